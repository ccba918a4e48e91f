"""`sparkflake lock validate FILE [--json]`, in process and through the console script."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_lock_model import SHA, VALID

from sparkflake.cli import main

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SPARKFLAKE = str(Path(sys.executable).parent / "sparkflake")


def _write(tmp_path: Path, text: str, name: str = "glm53.lock") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_valid_lock_exit_0_with_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, VALID)
    assert main(["lock", "validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out == f"{path}: valid (schema 1, linux/arm64, 1 deb, 1 file, 1 git, 1 oci, 1 sdist, 1 wheel)\n"


def test_valid_lock_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, VALID)
    assert main(["lock", "validate", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["valid"] is True and document["file"] == str(path)
    assert [pin["name"] for pin in document["lock"]["inputs"]] == [
        "libc6:arm64", "nccl-switchless", "vllm-composition", "r8-image", "vllm-sdist", "vllm",
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (f'sha256 = "{SHA}"\nsize = 1', 'sha256 = "ABC"\nsize = 1',
         'inputs[5].sha256: expected 64 lowercase hex digits, got "ABC"'),
        ('size = 2\n', 'size = -2\n', "inputs[0].size: expected a non-negative integer, got integer -2"),
        ('name = "r8-image"', 'name = "vllm"', 'inputs[5].name: duplicate input name "vllm"'),
        ('urls = ["https://github.com', 'urls = ["ext::github.com', "inputs[2].urls[0]: expected a git URL"),
        # issue 28: credentials, option-like hosts, invisible characters and dot steps never
        # reach the SBOM, the receipt or the image: the lock is refused at load
        ('urls = ["https://github.com', 'urls = ["https://oauth2:ghp_SECRET@github.com',
         'inputs[2].urls[0]: expected a git URL https://, http://, git://, ssh://host/path or file:///absolute, '
         'got "https://***@github.com/vllm-project/vllm.git": the URL carries a credential (user:password@): '
         'credentials never go in a lock'),
        ('urls = ["https://github.com', 'urls = ["ssh://-oProxyCommand=touch%20pwned',
         "inputs[2].urls[0]: expected a git URL"),
        ('urls = []\n', 'urls = ["https://files.example.org/\u202egnp.whl"]\n',
         "inputs[1].urls[0]: expected an https:// or file:/// URL, got"),
        ('urls = []\n', 'urls = ["file:///etc/../../root/.netrc"]\n',
         "inputs[1].urls[0]: expected an https:// or file:/// URL, got \"file:///etc/../../root/.netrc\": the path has"),
        ('kind = "git"\n', 'kind = "git"\nextra = 1\n', "inputs[2].extra: unknown key"),
        ('nar_hash = "sha256-47DEQ', 'nar_hash = "sha256-47DE', 'inputs[2].nar_hash: expected an SRI hash'),
    ],
)
def test_invalid_lock_exit_2_names_file_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, expected: str
) -> None:
    path = _write(tmp_path, VALID.replace(old, new, 1))
    assert main(["lock", "validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"sparkflake: error: {path}: {expected}")
    assert "SECRET" not in captured.err


def test_console_script_truncated_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID[: VALID.index("[[inputs]]") + 5])
    result = subprocess.run([SPARKFLAKE, "lock", "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"sparkflake: error: {path}: invalid TOML: ")
    assert "(at line 8, column" in result.stderr
    assert "Traceback" not in result.stderr


def test_console_script_wrong_type(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID.replace("size = 3\n", 'size = "3"\n'))
    result = subprocess.run([SPARKFLAKE, "lock", "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f'sparkflake: error: {path}: inputs[1].size: expected a non-negative integer, got "3"\n'
    )


def test_console_script_valid(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID)
    result = subprocess.run([SPARKFLAKE, "lock", "validate", str(path), "--json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["lock"]["target"] == {"platform": "linux/arm64", "python": "3.11", "glibc": "2.36"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["lock", "validate", "/nonexistent/glm53.lock"], "sparkflake: error: /nonexistent/glm53.lock: cannot read a TOML file: No such file or directory\n"),
        (["lock", "validate"], "sparkflake: error: lock validate: missing FILE\n"),
        (["lock", "validate", "x.lock", "--check"], "sparkflake: error: lock validate: --check, --update and --exclude-newer belong to"),
        (["lock", "validate", "x.lock", "--exclude-newer", "2026-12-01"], "sparkflake: error: lock validate: --check, --update and"),
        (["lock", "glm53-dflash7", "--exclude-newer", "1 week"], "sparkflake: error: --exclude-newer '1 week': expected a UTC date"),
        (["lock", "glm53-dflash7", "--exclude-newer", "2026-12-01T10:00:00"], "sparkflake: error: --exclude-newer '2026-12-01T10:00:00': expected"),
        (["lock", "glm53-dflash7", "--exclude-newer", "2026-13-01"], "sparkflake: error: --exclude-newer '2026-13-01': expected"),
        (["lock", "glm53-dflash7", "--check", "--exclude-newer", "2026-12-01"], "sparkflake: error: lock --check reads the lock offline"),
    ],
)
def test_bad_usage_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(expected)


def test_directory_and_binary_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "validate", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"sparkflake: error: {tmp_path}: is a directory, expected a TOML file (a regular file)\n"
    binary = tmp_path / "x.lock"
    binary.write_bytes(b"\x00\xff\xfe")
    assert main(["lock", "validate", str(binary)]) == 2
    assert capsys.readouterr().err == f"sparkflake: error: {binary}: not UTF-8 text (byte offset 1)\n"


def test_update_of_an_input_of_a_later_lock_names_that_lock_and_how_it_is_pinned(capsys):
    """Issue 31: `lock --update` of a git input searched only the first lock ("no input named
    …"); it now finds the lock that holds it and says how that input is pinned. Offline: the
    refusal comes before any resolution."""
    from sparkflake.cli import main

    profiles = Path(__file__).resolve().parents[3] / "profiles"
    assert main(["lock", "glm53-dflash7-exact", "--update", "vllm-git"]) == 2
    err = capsys.readouterr().err
    assert f"lock --update vllm-git: {profiles / 'glm53-exact.lock'} holds it" in err
    assert "a git input pinned by commit and tree: set its rev and tree there" in err
    assert main(["lock", "glm53-dflash7-exact", "--update", "no-such-input"]) == 2
    err = capsys.readouterr().err
    assert "no input named 'no-such-input' in " in err and "glm53.lock" in err and "glm53-exact.lock" in err


def test_a_lock_with_a_credential_is_refused_before_anything_is_fetched_or_written(tmp_path: Path) -> None:
    """Issue 28 class 3: the lock is refused at load, so no SBOM, receipt or layer can carry it."""
    path = _write(tmp_path, VALID.replace('urls = ["https://github.com', 'urls = ["https://deploy:glpat-SECRET@github.com', 1))
    cache = tmp_path / "cache"
    result = subprocess.run([SPARKFLAKE, "fetch", str(path), "--cache", str(cache)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{path}: inputs[2].urls[0]: expected a git URL" in result.stderr
    assert "https://***@github.com/vllm-project/vllm.git" in result.stderr and "SECRET" not in result.stderr
    assert "sparkflake fetch --from DIR" in result.stderr  # where credentials belong instead
    assert not cache.exists() and "Traceback" not in result.stderr


@given(st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9999, 12, 31)), st.booleans())
def test_a_resolution_cutoff_is_the_utc_time_uv_is_given(moment: datetime.datetime, date_only: bool) -> None:
    from sparkflake.lock.resolve_python import resolution_cutoff

    moment = moment.replace(microsecond=0, hour=0, minute=0, second=0) if date_only else moment.replace(microsecond=0)
    text = moment.strftime("%Y-%m-%d") if date_only else moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert resolution_cutoff(text) == moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.text(max_size=30))
def test_anything_else_is_refused_as_a_cutoff(text: str) -> None:
    from sparkflake.core.errors import InputError
    from sparkflake.lock.resolve_python import resolution_cutoff

    try:
        shown = resolution_cutoff(text)
    except InputError as refused:
        assert refused.message.startswith(f"--exclude-newer {text!r}: expected a UTC date")
    else:  # only the two forms pass, and as a real time
        assert datetime.datetime.strptime(shown, "%Y-%m-%dT%H:%M:%SZ")
        assert text in (shown, shown.removesuffix("T00:00:00Z"))
