"""PEP 751 pylock.toml into lock records."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.lock_strategies import sdists, wheels
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core import canonical_toml
from sparkflake.core.errors import InputError
from sparkflake.lock.lock_file import dump_lock, parse_lock
from sparkflake.lock.pins import Lock, Target
from sparkflake.lock.pylock import read_pylock

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SHA = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"
SIX = f'''\
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "six"
version = "1.16.0"
sdist = {{ url = "https://files.pythonhosted.org/packages/71/39/six-1.16.0.tar.gz", upload-time = 2021-05-05T14:18:18Z, size = 34041, hashes = {{ sha256 = "{SHA}" }} }}
wheels = [{{ url = "https://files.pythonhosted.org/packages/d9/5a/six-1.16.0-py2.py3-none-any.whl", upload-time = 2021-05-05T14:18:17Z, size = 11053, hashes = {{ sha256 = "{SHA}", md5 = "x" }} }}]

[[packages]]
name = "Torch"
version = "2.14.0"
index = "https://pypi.org/simple"
marker = "platform_machine == 'aarch64'"
wheels = [
  {{ url = "https://files.pythonhosted.org/packages/aa/torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl", size = 1, hashes = {{ sha256 = "{SHA}" }} }},
  {{ url = "https://files.pythonhosted.org/packages/bb/torch-2.14.0-cp311-cp311-manylinux_2_28_aarch64.whl", size = 2, hashes = {{ sha256 = "{SHA}" }} }},
  {{ name = "torch-2.14.0-cp311-none-manylinux_2_17_aarch64.whl", url = "https://files.pythonhosted.org/packages/cc/t.whl", size = 3, hashes = {{ sha256 = "{SHA}" }} }},
]
'''

TARGET = Target("linux/arm64", "3.11", "2.36")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pylock.toml"
    path.write_text(text)
    return path


def test_reads_wheels_and_sdists_choosing_the_target_wheel(tmp_path: Path) -> None:
    pins = read_pylock(_write(tmp_path, SIX), supported_tags=TARGET.supported_tags())
    assert [(pin.kind, pin.name) for pin in pins] == [
        ("wheel", "six"),
        ("sdist", "six-sdist"),
        ("wheel", "torch"),
    ]
    six, six_sdist, torch = pins
    assert six.tags == ("py2-none-any", "py3-none-any")
    assert six.filename == "six-1.16.0-py2.py3-none-any.whl" and six.size == 11053
    assert six_sdist.filename == "six-1.16.0.tar.gz" and six_sdist.version == "1.16.0"
    # cp311-cp311 beats cp311-none; the x86_64 wheel never qualifies
    assert torch.filename == "torch-2.14.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    lock = Lock(target=TARGET, inputs=tuple(pins))
    assert parse_lock(dump_lock(lock)) == lock


def test_several_wheels_without_target_tags_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, SIX)
    with pytest.raises(InputError) as caught:
        read_pylock(path)
    assert str(caught.value) == (
        f"{path}: packages[1].wheels: 3 wheels for one package; pass the target's supported "
        "tags to choose one"
    )


def test_no_wheel_for_the_target_and_no_sdist(tmp_path: Path) -> None:
    text = SIX.replace("aarch64.whl", "x86_64.whl")
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=r"packages\[1\]\.wheels: no wheel runs on the target and there is no sdist"):
        read_pylock(path, supported_tags=TARGET.supported_tags())


@pytest.mark.parametrize(
    ("old", "new", "where", "problem"),
    [
        (f'size = 11053, hashes = {{ sha256 = "{SHA}"', f'size = 11053, hashes = {{ sha256 = "{SHA.upper()}"',
         "packages[0].wheels[0].hashes.sha256", f'expected 64 lowercase hex digits, got "{SHA.upper()}"'),
        (f'size = 11053, hashes = {{ sha256 = "{SHA}", ', "hashes = { ",
         "packages[0].wheels[0].size", "missing required key"),
        (f'size = 11053, hashes = {{ sha256 = "{SHA}", md5 = "x" }}', 'size = 11053, hashes = { md5 = "x" }',
         "packages[0].wheels[0].hashes.sha256", "missing required key"),
        ("size = 34041", "size = -5", "packages[0].sdist.size", "expected a non-negative integer, got integer -5"),
        ('url = "https://files.pythonhosted.org/packages/71', 'url = "http://files.pythonhosted.org/packages/71',
         "packages[0].sdist.url", 'expected an https:// or file:/// URL, got "http://files.pythonhosted.org/packages/71/39/six-1.16.0.tar.gz": '
         'unsupported scheme'),
        ('url = "https://files.pythonhosted.org/packages/71', 'url = "https://__token__:pypi-SECRET@files.pythonhosted.org/packages/71',
         "packages[0].sdist.url", 'expected an https:// or file:/// URL, got "https://***@files.pythonhosted.org/packages/71/39/'
         'six-1.16.0.tar.gz": the URL carries a credential (user:password@)'),
        ('url = "https://files.pythonhosted.org/packages/71/39/six-1.16.0.tar.gz", ',
         'path = "dist/six-1.16.0.tar.gz", ',
         "packages[0].sdist.url", "missing required key (local paths cannot be pinned)"),
        ('version = "1.16.0"', 'version = "1.16.0"\nvcs = { type = "git", url = "https://x", commit-id = "a" }',
         "packages[0].vcs", "only index wheels and sdists can be pinned (no file hash for this source)"),
        ('version = "1.16.0"', 'version = "1.16.0"\nsurprise = 1',
         "packages[0].surprise", "unknown key (expected one of: "),
        ('lock-version = "1.0"', 'lock-version = "2.0"', "lock-version", 'expected "1.x", got "2.0"'),
        ('created-by = "uv"\n', "", "created-by", "missing required key"),
        ('version = "1.16.0"\n', "", "packages[0].version", "missing required key"),
        ("upload-time = 2021-05-05T14:18:17Z", 'upload-time = "yesterday"',
         "packages[0].wheels[0].upload-time", "expected a TOML datetime"),
        ('version = "1.16.0"', 'version = "1.17.0"', "packages[0].wheels[0].version",
         'file name says "1.16.0", got "1.17.0"'),
    ],
)
def test_invalid_pylock_names_the_place(tmp_path: Path, old: str, new: str, where: str, problem: str) -> None:
    assert old in SIX
    path = _write(tmp_path, SIX.replace(old, new, 1))
    with pytest.raises(InputError) as caught:
        read_pylock(path, supported_tags=TARGET.supported_tags())
    assert str(caught.value).startswith(f"{path}: {where}: {problem}")


def test_one_distribution_twice_is_refused(tmp_path: Path) -> None:
    second = SIX[SIX.index("[[packages]]\nname = \"six\""):SIX.index("[[packages]]\nname = \"Torch\"")]
    path = _write(tmp_path, SIX + "\n" + second.replace('name = "six"', 'name = "Six"'))
    with pytest.raises(InputError) as caught:
        read_pylock(path, supported_tags=TARGET.supported_tags())
    assert str(caught.value) == (
        f'{path}: packages[2].name: "six" again (first at packages[0]): markers are not evaluated, '
        "resolve the pylock for one target"
    )


def test_truncated_pylock_names_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, SIX[: SIX.index("wheels = [") + 14])
    with pytest.raises(InputError, match=r"pylock\.toml: invalid TOML: .*\(at line \d+, column \d+"):
        read_pylock(path)


@given(st.lists(st.tuples(wheels(), st.booleans(), sdists()), max_size=5, unique_by=lambda t: t[0].name))
def test_generated_pylocks_read_back_as_the_same_pins(entries: list) -> None:
    packages = []
    expected = []
    for wheel, with_sdist, sdist_template in entries:
        package: dict = {"name": wheel.name, "version": wheel.version}
        expected.append(wheel)
        if with_sdist:
            filename = f"{wheel.name.replace('-', '_')}-{wheel.version}.tar.gz"
            sdist = type(sdist_template)(
                name=f"{wheel.name}-sdist", version=wheel.version, filename=filename,
                sha256=sdist_template.sha256, size=sdist_template.size, urls=sdist_template.urls[:1],
            )
            package["sdist"] = {"name": filename, "url": sdist.urls[0], "size": sdist.size, "hashes": {"sha256": sdist.sha256}}
            expected.append(sdist)
        package["wheels"] = [{"name": wheel.filename, "url": wheel.urls[0], "size": wheel.size, "hashes": {"sha256": wheel.sha256}}]
        packages.append(package)
    text = canonical_toml.dumps({"lock-version": "1.0", "created-by": "test", "packages": packages})
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "pylock.toml"
        path.write_text(text)
        pins = read_pylock(path)
    normalized = [
        type(pin)(**{**pin.__dict__, "tags": tuple(sorted(pin.tags)), "urls": pin.urls[:1]})
        if pin.kind == "wheel" else pin
        for pin in expected
    ]
    assert pins == normalized


@pytest.mark.network
def test_reads_what_uv_writes_for_the_target(tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    requirements = tmp_path / "requirements.in"
    requirements.write_text("six==1.16.0\npackaging==24.2\n")
    output = tmp_path / "pylock.toml"
    subprocess.run(
        [uv, "pip", "compile", str(requirements), "--format", "pylock.toml",
         "--python-platform", "aarch64-manylinux_2_28", "--python-version", "3.11",
         "-o", str(output), "--quiet"],
        check=True, cwd=tmp_path, timeout=300,
    )
    pins = read_pylock(output, supported_tags=TARGET.supported_tags())
    by_name = {pin.name: pin for pin in pins}
    assert by_name["six"].version == "1.16.0"
    assert by_name["six"].sha256 == SHA
    assert by_name["packaging"].filename == "packaging-24.2-py3-none-any.whl"
    lock = Lock(target=TARGET, inputs=tuple(pins))
    assert parse_lock(dump_lock(lock)) == lock
