"""Lock model: canonical round trips, API, and the precise message of every invalid form."""

from __future__ import annotations

import json
import os
import random
import tomllib
from pathlib import Path

import pytest
from fixtures.lock_strategies import hex64, locks, pins, sri_sha256
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.digest import parse_hash
from sparkflake.core.errors import InputError
from sparkflake.lock.lock_file import dump_lock, load_lock, lock_to_dict, parse_lock, write_lock
from sparkflake.lock.pins import DebPin, FilePin, GitPin, Lock, OciPin, SdistPin, Target, WheelPin

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SHA = "5f1c3f10d5ace66d4ba584415bbfe42b6ac1a0a9116a3b81dcbe50516ad924b3"
SRI = "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="

VALID = f'''\
schema = 1

[target]
platform = "linux/arm64"
python = "3.11"
glibc = "2.36"

[[inputs]]
kind = "deb"
name = "libc6:arm64"
package = "libc6"
version = "2.36-9+deb12u9"
architecture = "arm64"
sha256 = "{SHA}"
size = 2
urls = ["https://deb.debian.org/debian/pool/main/g/glibc/libc6_2.36-9+deb12u9_arm64.deb"]

[[inputs]]
kind = "file"
name = "nccl-switchless"
sha256 = "{SHA}"
size = 3
urls = []
how_to_supply = "copy libnccl.so.2 from the R8 build host"

[[inputs]]
kind = "git"
name = "vllm-composition"
urls = ["https://github.com/vllm-project/vllm.git"]
rev = "331573d20bd47e78327ed8d8b4d2e6d350bbb1ab"
tree = "927f52a0085bcecfd2ba679e5abebe1a62623daf"
nar_hash = "{SRI}"

[[inputs]]
kind = "oci"
name = "r8-image"
reference = "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache"
manifest_digest = "sha256:380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a"
config_digest = "sha256:b3a13d8003e7de30d7737fd33c8307404e506ba570240819ec7eb4f5c611400f"

[[inputs]]
kind = "sdist"
name = "vllm-sdist"
version = "0.33.0"
filename = "vllm-0.33.0.tar.gz"
sha256 = "{SHA}"
size = 4
urls = ["https://files.pythonhosted.org/packages/aa/vllm-0.33.0.tar.gz"]

[[inputs]]
kind = "wheel"
name = "vllm"
version = "0.33.0"
filename = "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"
sha256 = "{SHA}"
size = 1
tags = ["cp38-abi3-manylinux_2_28_aarch64"]
urls = [
  "https://files.pythonhosted.org/packages/bb/vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl",
]
'''


# --------------------------------------------------------------------------- round trips


@given(locks)
def test_dump_parse_round_trip_is_byte_identical(lock: Lock) -> None:
    text = dump_lock(lock)
    parsed = parse_lock(text, "x.lock")
    assert parsed == lock
    assert dump_lock(parsed) == text


@given(locks, st.randoms(use_true_random=False))
def test_dump_does_not_depend_on_input_order(lock: Lock, rng: random.Random) -> None:
    shuffled = list(lock.inputs)
    rng.shuffle(shuffled)
    assert dump_lock(Lock(target=lock.target, inputs=tuple(shuffled))) == dump_lock(lock)


@given(locks)
def test_dump_is_what_tomllib_reads_and_json_equals_the_dict_form(lock: Lock) -> None:
    text = dump_lock(lock)
    assert tomllib.loads(text) == json.loads(json.dumps(lock_to_dict(lock)))
    kinds_names = [(pin["kind"], pin["name"]) for pin in tomllib.loads(text).get("inputs", [])]
    assert kinds_names == sorted(kinds_names)


def test_valid_example_is_canonical_and_fields_read_back() -> None:
    lock = parse_lock(VALID, "glm53.lock")
    assert dump_lock(lock) == VALID
    wheel = lock.by_name("vllm")
    assert isinstance(wheel, WheelPin) and wheel.tags == ("cp38-abi3-manylinux_2_28_aarch64",)
    assert isinstance(lock.by_name("vllm-sdist"), SdistPin)
    assert lock.by_name("vllm-sdist").distribution == "vllm"
    file_pin = lock.by_name("nccl-switchless")
    assert isinstance(file_pin, FilePin) and not file_pin.urls  # operator supplied
    oci = lock.by_name("r8-image")
    assert isinstance(oci, OciPin) and oci.index_digest is None
    assert oci.repository == "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache"
    assert [pin.kind for pin in lock.of_kind("git")] == ["git"]
    assert "libc6:arm64" in lock and "libc6" not in lock
    assert lock.target.manylinux == "manylinux_2_36"
    assert lock.target.wheel_architecture == "aarch64"


def test_by_name_of_a_missing_input_names_it() -> None:
    lock = parse_lock(VALID, "glm53.lock")
    with pytest.raises(InputError, match='no input named "torch" in the lock'):
        lock.by_name("torch")
    assert lock.get("torch") is None


def test_replace_input_swaps_one_pin_and_keeps_order() -> None:
    lock = parse_lock(VALID, "glm53.lock")
    old = lock.by_name("nccl-switchless")
    new = FilePin(name=old.name, sha256="0" * 64, size=9, urls=("file:///srv/libnccl.so.2",))
    updated = lock.replace_input(new)
    assert updated.by_name("nccl-switchless") == new
    assert [pin.name for pin in updated.inputs] == [pin.name for pin in lock.inputs]


def test_write_lock_is_atomic_and_canonical(tmp_path: Path) -> None:
    lock = parse_lock(VALID, "glm53.lock")
    target = tmp_path / "glm53.lock"
    target.write_text("previous")
    write_lock(target, lock)
    assert target.read_text() == VALID
    assert load_lock(target) == lock
    assert sorted(path.name for path in tmp_path.iterdir()) == ["glm53.lock"]


@given(sri_sha256)
def test_nar_hash_check_agrees_with_the_digest_module(sri: str) -> None:
    pin = GitPin(name="g", urls=("https://h/r.git",), rev="a" * 40, tree="b" * 40, nar_hash=sri)
    assert parse_hash(pin.nar_hash).sri == sri


_base64ish = st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_ !"), max_size=46)


@given(st.one_of(sri_sha256, sri_sha256.map(lambda sri: sri[:-2] + "A="), _base64ish.map(lambda text: "sha256-" + text)))
def test_sri_acceptance_is_exactly_the_digest_modules(text: str) -> None:
    try:
        parse_hash(text, "sha256")
        digest_accepts = text.startswith("sha256-")
    except InputError:
        digest_accepts = False
    try:
        GitPin(name="g", urls=("https://h/r.git",), rev="a" * 40, tree="b" * 40, nar_hash=text)
        lock_accepts = True
    except InputError as error:
        assert str(error).startswith("nar_hash: expected an SRI hash")
        lock_accepts = False
    assert lock_accepts == digest_accepts


@given(pins)
def test_records_are_frozen_and_hashable(pin) -> None:
    assert hash(pin) == hash(type(pin)(**pin.__dict__))
    with pytest.raises(AttributeError):
        pin.name = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- invalid forms


def _replace(old: str, new: str, text: str = VALID) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _error(text: str, shown: str = "glm53.lock") -> str:
    with pytest.raises(InputError) as caught:
        parse_lock(text, shown)
    return str(caught.value)


def test_truncated_toml_names_file_line_and_column() -> None:
    prefix = 'nar_hash = "sha256-47D'
    cut = VALID.index(prefix) + len(prefix)
    message = _error(VALID[:cut])
    line = VALID[:cut].count("\n") + 1
    assert message.startswith("glm53.lock: invalid TOML: ")
    assert f"(at line {line}, column {len(prefix) + 1}" in message


def test_toml_syntax_error_in_the_middle_names_line_and_column() -> None:
    message = _error(_replace('size = 3\n', 'size = = 3\n'))
    line = VALID[: VALID.index("size = 3")].count("\n") + 1
    assert message.startswith("glm53.lock: invalid TOML: ")
    assert f"line {line}, column 8" in message


def test_not_utf8_is_refused_with_the_offset() -> None:
    assert _error(VALID.encode() + b"\xff") == f"glm53.lock: not UTF-8 text (byte offset {len(VALID.encode())})"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (f'sha256 = "{SHA}"\nsize = 1', 'sha256 = "ABC"\nsize = 1',
         'glm53.lock: inputs[5].sha256: expected 64 lowercase hex digits, got "ABC"'),
        (f'sha256 = "{SHA}"\nsize = 2', f'sha256 = "{SHA.upper()}"\nsize = 2',
         f'glm53.lock: inputs[0].sha256: expected 64 lowercase hex digits, got "{SHA.upper()}"'),
        (f'sha256 = "{SHA}"\nsize = 3', f'sha256 = "{SHA[:-1]}"\nsize = 3',
         f'glm53.lock: inputs[1].sha256: expected 64 lowercase hex digits, got "{SHA[:-1]}"'),
        ('rev = "331573d20bd47e78327ed8d8b4d2e6d350bbb1ab"', 'rev = "331573d2"',
         'glm53.lock: inputs[2].rev: expected 40 lowercase hex digits, got "331573d2"'),
        ('tree = "927f52a0085bcecfd2ba679e5abebe1a62623daf"', 'tree = "927F52A0085BCECFD2BA679E5ABEBE1A62623DAF"',
         'glm53.lock: inputs[2].tree: expected 40 lowercase hex digits, got "927F52A0085BCECFD2BA679E5ABEBE1A62623DAF"'),
        ("manifest_digest = \"sha256:380283", "manifest_digest = \"sha512:380283",
         'glm53.lock: inputs[3].manifest_digest: expected "sha256:" and 64 lowercase hex digits, '
         'got "sha512:380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a"'),
    ],
)
def test_bad_hex(old: str, new: str, expected: str) -> None:
    assert _error(_replace(old, new)) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU",  # padding missing
        "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFV=",  # non-canonical low bits
        "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hS",  # too short
        "sha512-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",  # wrong algorithm
        "sha256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",  # not SRI
        "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSu!U=",  # not base64
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # base16
    ],
)
def test_malformed_sri(bad: str) -> None:
    assert _error(_replace(SRI, bad)) == (
        'glm53.lock: inputs[2].nar_hash: expected an SRI hash "sha256-" + 44 base64 '
        f'characters (32 bytes), got "{bad}"'
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('urls = ["https://github.com/vllm-project/vllm.git"]', 'urls = ["git@github.com:vllm-project/vllm.git"]',
         'glm53.lock: inputs[2].urls[0]: expected a git URL https://, http://, git://, ssh://host/path or '
         'file:///absolute, got "git@github.com:vllm-project/vllm.git": unsupported scheme'),
        ('urls = ["https://files.pythonhosted.org/packages/aa/', 'urls = ["ftp://files.pythonhosted.org/packages/aa/',
         'glm53.lock: inputs[4].urls[0]: expected an https:// or file:/// URL, got '
         '"ftp://files.pythonhosted.org/packages/aa/vllm-0.33.0.tar.gz": unsupported scheme'),
        ('urls = []\n', 'urls = ["https:///nohost"]\n',
         'glm53.lock: inputs[1].urls[0]: expected an https:// or file:/// URL, got "https:///nohost": no host'),
        ('urls = []\n', 'urls = ["file://relative/x"]\n',
         'glm53.lock: inputs[1].urls[0]: expected an https:// or file:/// URL, got "file://relative/x": '
         'a file: URL names no host (file:///absolute/path)'),
        ('urls = []\n', 'urls = ["https://h/a b"]\n',
         'glm53.lock: inputs[1].urls[0]: expected an https:// or file:/// URL, got "https://h/a b": '
         'a URL may not hold spaces, control or formatting characters, found U+0020 SPACE'),
        ('urls = []\n', 'urls = ["file:///x", "file:///x"]\n',
         'glm53.lock: inputs[1].urls[1]: duplicate element "file:///x"'),
    ],
)
def test_bad_urls(old: str, new: str, expected: str) -> None:
    assert _error(_replace(old, new)) == expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("size = 1\n", "size = -1\n", "glm53.lock: inputs[5].size: expected a non-negative integer, got integer -1"),
        ("size = 1\n", 'size = "1"\n', 'glm53.lock: inputs[5].size: expected a non-negative integer, got "1"'),
        ("size = 1\n", "size = true\n", "glm53.lock: inputs[5].size: expected a non-negative integer, got boolean true"),
        ("size = 1\n", "size = 1.5\n", "glm53.lock: inputs[5].size: expected a non-negative integer, got float 1.5"),
        ('version = "0.33.0"\nfilename = "vllm-0.33.0-', 'version = 33\nfilename = "vllm-0.33.0-',
         "glm53.lock: inputs[5].version: expected a string, got integer 33"),
        ('tags = ["cp38-abi3-manylinux_2_28_aarch64"]', 'tags = "cp38-abi3-manylinux_2_28_aarch64"',
         'glm53.lock: inputs[5].tags: expected an array of strings, got "cp38-abi3-manylinux_2_28_aarch64"'),
        ('tags = ["cp38-abi3-manylinux_2_28_aarch64"]', 'tags = [1]',
         "glm53.lock: inputs[5].tags[0]: expected a string, got integer 1"),
        ('urls = []\n', 'urls = [{ a = 1 }]\n', "glm53.lock: inputs[1].urls[0]: expected a string, got a table"),
        ('glibc = "2.36"', "glibc = 2.36", "glm53.lock: target.glibc: expected a string, got float 2.36"),
        ("schema = 1", 'schema = "1"', 'glm53.lock: schema: expected the integer 1, got "1"'),
        ("schema = 1", "schema = 2", "glm53.lock: schema: this sparkflake reads schema 1, got integer 2"),
        ('kind = "oci"', 'kind = "docker"',
         'glm53.lock: inputs[3].kind: expected one of deb, file, git, oci, sdist, wheel, got "docker"'),
        ('[target]\nplatform = "linux/arm64"', '[target]\nplatform = "arm64"',
         'glm53.lock: target.platform: expected an OCI platform like "linux/arm64", got "arm64"'),
    ],
)
def test_wrong_types_and_values(old: str, new: str, expected: str) -> None:
    assert _error(_replace(old, new)) == expected


def test_inputs_not_an_array_of_tables() -> None:
    text = VALID.split("[[inputs]]")[0] + 'inputs = "none"\n'
    text = text.replace('schema = 1\n', 'schema = 1\ninputs = "none"\n').rsplit('inputs = "none"\n', 1)[0]
    assert _error(text) == 'glm53.lock: inputs: expected an array of tables ([[inputs]]), got "none"'


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('kind = "git"\n', 'kind = "git"\nbranch = "main"\n',
         "glm53.lock: inputs[2].branch: unknown key (expected one of: archive_urls, kind, name, nar_hash, rev, source_sha256, tree, urls)"),
        ('glibc = "2.36"\n', 'glibc = "2.36"\nlibc = "musl"\n',
         "glm53.lock: target.libc: unknown key (expected one of: glibc, platform, python)"),
        ("schema = 1\n", 'schema = 1\ngenerator = "x"\n',
         "glm53.lock: generator: unknown key (expected one of: inputs, schema, target)"),
        ('tree = "927f52a0085bcecfd2ba679e5abebe1a62623daf"\n', "",
         "glm53.lock: inputs[2].tree: missing required key"),
        ('kind = "oci"\n', "", "glm53.lock: inputs[3].kind: missing required key"),
        ('"weird key" = 1\n', "", None),
    ],
)
def test_unknown_and_missing_keys(old: str, new: str, expected: str | None) -> None:
    if expected is None:  # a quoted key is named with its quotes
        text = _replace('kind = "git"\n', 'kind = "git"\n"weird key" = 1\n')
        assert _error(text).startswith('glm53.lock: inputs[2]."weird key": unknown key')
        return
    assert _error(_replace(old, new)) == expected


def test_duplicate_names_across_kinds() -> None:
    text = _replace('name = "r8-image"', 'name = "vllm"')
    assert _error(text) == 'glm53.lock: inputs[5].name: duplicate input name "vllm" (first used by inputs[3])'


def test_duplicate_names_of_one_kind() -> None:
    text = _replace('name = "nccl-switchless"', 'name = "vllm-composition"')
    assert _error(text) == (
        'glm53.lock: inputs[2].name: duplicate input name "vllm-composition" (first used by inputs[1])'
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('name = "vllm"\n', 'name = "VLLM"\n',
         'glm53.lock: inputs[5].name: expected a lowercase name of [a-z0-9._+:-], starting with [a-z0-9], got "VLLM"'),
        ('name = "vllm"\n', 'name = "torch"\n',
         'glm53.lock: inputs[5].name: expected the normalized distribution name of the file, "vllm", got "torch"'),
        ('version = "0.33.0"\nfilename = "vllm-0.33.0-', 'version = "0.34.0"\nfilename = "vllm-0.33.0-',
         'glm53.lock: inputs[5].version: file name says "0.33.0", got "0.34.0"'),
        ('version = "0.33.0"\nfilename = "vllm-0.33.0-', 'version = "0.33"\nfilename = "vllm-0.33.0-',
         'glm53.lock: inputs[5].version: file name says "0.33.0", got "0.33"'),
        ('version = "0.33.0"\nfilename = "vllm-0.33.0-', 'version = "v0.33.0"\nfilename = "vllm-0.33.0-',
         'glm53.lock: inputs[5].version: expected the normalized form "0.33.0", got "v0.33.0"'),
        ('tags = ["cp38-abi3-manylinux_2_28_aarch64"]', 'tags = ["cp311-cp311-manylinux_2_28_aarch64"]',
         "glm53.lock: inputs[5].tags: file name gives the tags ['cp38-abi3-manylinux_2_28_aarch64'], "
         "got ['cp311-cp311-manylinux_2_28_aarch64']"),
        ('filename = "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"', 'filename = "vllm.whl"',
         "glm53.lock: inputs[5].filename: not a valid wheel file name: "),
        ('filename = "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"', 'filename = "a/vllm.whl"',
         "glm53.lock: inputs[5].filename: expected a file name without '/', got \"a/vllm.whl\""),
        ('name = "vllm-sdist"', 'name = "vllm"',
         'glm53.lock: inputs[4].name: expected "vllm-sdist" for this file, got "vllm"'),
        ('name = "libc6:arm64"', 'name = "libc6"',
         'glm53.lock: inputs[0].name: expected "libc6:arm64", got "libc6"'),
        ('version = "2.36-9+deb12u9"', 'version = "two"',
         'glm53.lock: inputs[0].version: expected a Debian version, got "two"'),
        ('how_to_supply = "copy libnccl.so.2 from the R8 build host"\n', "",
         "glm53.lock: inputs[1].how_to_supply: a file without urls is operator supplied and needs how_to_supply"),
        ('reference = "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache"',
         'reference = "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache@sha256:00"',
         "glm53.lock: inputs[3].reference: put digests in index_digest/manifest_digest, not in the "
         'reference; got "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache@sha256:00"'),
        ('reference = "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache"', 'reference = "GHCR.io/X"',
         'glm53.lock: inputs[3].reference: expected an image reference like registry/name[:tag], got "GHCR.io/X"'),
        ('manifest_digest = "sha256:380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a"\n', "",
         "glm53.lock: inputs[3].manifest_digest: an oci input needs index_digest or manifest_digest"),
    ],
)
def test_record_rules(old: str, new: str, expected: str) -> None:
    assert _error(_replace(old, new)).startswith(expected)


def test_control_characters_in_identifiers_are_refused_by_name() -> None:
    assert _error(_replace('name = "r8-image"', 'name = "r8\\u0007"')) == (
        'glm53.lock: inputs[3].name: control characters are not allowed, got "r8\\u0007"'
    )


def test_long_bad_values_are_shortened_in_messages() -> None:
    message = _error(_replace(f'sha256 = "{SHA}"\nsize = 1', f'sha256 = "{"x" * 500}"\nsize = 1'))
    assert message.startswith("glm53.lock: inputs[5].sha256: expected 64 lowercase hex digits, got \"xxx")
    assert len(message) < 200


def test_load_lock_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.lock: cannot read a TOML file: No such file or directory"):
        load_lock(tmp_path / "missing.lock")
    with pytest.raises(InputError, match=r": is a directory, expected a TOML file"):
        load_lock(tmp_path)
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"fifo\.lock: is a FIFO, expected a TOML file \(a regular file\)"):
        load_lock(fifo)
    with pytest.raises(InputError, match=r"null: is a character device, expected a TOML file"):
        load_lock("/dev/null")


def test_direct_construction_validates_too() -> None:
    with pytest.raises(InputError, match=r'^sha256: expected 64 lowercase hex digits, got "nope"$'):
        FilePin(name="f", sha256="nope", size=1, urls=("file:///f",))
    with pytest.raises(InputError, match=r"^inputs\[1\]\.name: duplicate input name"):
        Lock(
            target=Target("linux/arm64", "3.11", "2.36"),
            inputs=(
                FilePin(name="f", sha256=SHA, size=1, urls=("file:///f",)),
                GitPin(name="f", urls=("https://h/r",), rev="a" * 40, tree="b" * 40, nar_hash=SRI),
            ),
        )
    with pytest.raises(InputError, match=r"^size: expected a non-negative integer, got boolean false$"):
        DebPin(name="ab:all", package="ab", version="1", architecture="all", sha256=SHA, size=False, urls=("file:///a",))


@given(hex64)
def test_sha256_of_the_right_shape_is_accepted(digest: str) -> None:
    assert FilePin(name="f", sha256=digest, size=0, urls=("file:///f",)).sha256 == digest


def test_wheel_with_compressed_tags_lists_them_expanded() -> None:
    pin = WheelPin(
        name="six",
        version="1.16.0",
        filename="six-1.16.0-py2.py3-none-any.whl",
        sha256=SHA,
        size=1,
        tags=("py3-none-any", "py2-none-any"),
        urls=("https://files.pythonhosted.org/six-1.16.0-py2.py3-none-any.whl",),
    )
    assert {str(tag) for tag in pin.tag_set()} == {"py2-none-any", "py3-none-any"}


def test_the_committed_shared_lock_is_valid_and_canonical() -> None:
    path = Path(__file__).resolve().parents[3] / "profiles" / "glm53.lock"
    lock = load_lock(path)
    assert dump_lock(lock) == path.read_text(encoding="utf-8")
    assert {"vllm", "vllm-sdist", "torch", "nvidia-nccl-cu13"} <= {pin.name for pin in lock.inputs}


COMMITTED_LOCKS = sorted((Path(__file__).resolve().parents[3] / "profiles").rglob("*.lock"))
WRITTEN_BY_LOCK = ("glm53.lock", "fixture.lock")  # glm53-exact.lock is pinned by hand


@pytest.mark.parametrize("path", COMMITTED_LOCKS, ids=lambda path: path.name)
def test_committed_locks_keep_their_key_order(path: Path) -> None:
    """The key order of every input kind is its declared field order after ``kind``
    (``keys_in_field_order``): written back, every committed lock has its keys in the order
    the file has them, and a lock `sparkflake lock` wrote is the same bytes."""
    text = path.read_text(encoding="utf-8")
    written = dump_lock(parse_lock(text, path.name))
    committed_order = [list(table) for table in tomllib.loads(text)["inputs"]]
    assert [list(table) for table in tomllib.loads(written)["inputs"]] == committed_order
    if path.name in WRITTEN_BY_LOCK:
        assert written == text
