"""A wheel's RECORD hashes (``compose.python_env._RecordCheckedStream``, the stream each
member is installed through): bytes pass through unchanged in any read sizes, bytes that
hash and size as RECORD says (any of hashlib's RECORD algorithms, urlsafe base64 without
padding, PEP 376/427) are accepted, any other bytes or size are refused at EOF with
``CheckFailed`` naming the wheel and member, a waiver accepts exactly its sha256 and
size; and a whole wheel installs (``install_wheel``) only when every member matches."""

from __future__ import annotations

import base64
import hashlib
import io

import pytest
from fixtures.inputs import _record_hash, make_wheel
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from installer.records import Hash, RecordEntry

from sparkflake.compose.python_env import RecordWaiver, _RecordCheckedStream, install_wheel
from sparkflake.core.errors import CheckFailed
from sparkflake.lock.target import DEBIAN_BOOKWORM_ARM64

pytestmark = pytest.mark.compose

_ALGORITHMS = st.sampled_from(["sha256", "sha384", "sha512", "sha1", "md5", "blake2b"])
_reads = st.lists(st.integers(1, 70), max_size=8)


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def _drain(stream: _RecordCheckedStream, sizes: list[int]) -> bytes:
    """Read as installer does: sized reads, then to EOF (an empty read)."""
    out = b""
    for size in sizes:
        out += stream.read(size)
    while chunk := stream.read(16):
        out += chunk
    return out


@given(st.binary(max_size=300), _ALGORITHMS, _reads)
def test_matching_bytes_pass_through_unchanged(data: bytes, algorithm: str, sizes: list[int]) -> None:
    entry = RecordEntry("pkg/mod.py", Hash(algorithm, _b64(hashlib.new(algorithm, data).digest())), len(data))
    stream = _RecordCheckedStream(io.BytesIO(data), entry, "w.whl")
    assert _drain(stream, sizes) == data
    assert stream.content_digest() == (_b64(hashlib.new(algorithm, data).digest()), len(data))
    # one read of everything (size -1) is checked at once, too
    assert _RecordCheckedStream(io.BytesIO(data), entry, "w.whl").read() == data


@given(st.binary(max_size=200), st.binary(max_size=200), _ALGORITHMS, _reads, st.integers(-2, 2))
def test_other_bytes_or_size_are_refused_naming_wheel_and_member(recorded, actual, algorithm, sizes, size_shift) -> None:
    assume(recorded != actual or size_shift != 0)
    entry = RecordEntry("pkg/data.bin", Hash(algorithm, _b64(hashlib.new(algorithm, recorded).digest())),
                        max(0, len(recorded) + size_shift))
    assume(entry.size != len(actual) or recorded != actual)
    stream = _RecordCheckedStream(io.BytesIO(actual), entry, "w-1.0-py3-none-any.whl")
    with pytest.raises(CheckFailed) as refused:
        _drain(stream, sizes)
    assert refused.value.check_id == "wheel-record"
    assert str(refused.value).startswith(
        f"[wheel-record] w-1.0-py3-none-any.whl: pkg/data.bin does not match its RECORD entry ({algorithm}=")
    assert f"content has {algorithm}={_b64(hashlib.new(algorithm, actual).digest())}, size {len(actual)})" in str(refused.value)


@given(st.binary(max_size=200), st.sampled_from([None, "hash", "size"]))
def test_an_entry_without_hash_or_size_is_refused(data: bytes, missing: str | None) -> None:
    hash_ = None if missing in (None, "hash") else Hash("sha256", _b64(hashlib.sha256(data).digest()))
    size = None if missing in (None, "size") else len(data)
    stream = _RecordCheckedStream(io.BytesIO(data), RecordEntry("m", hash_, size), "w.whl")
    with pytest.raises(CheckFailed, match=r"^\[wheel-record\] w\.whl: RECORD has no hash/size for m$"):
        _drain(stream, [])


@given(st.binary(max_size=200), st.binary(max_size=200), st.booleans(), st.booleans())
def test_a_waiver_accepts_exactly_its_bytes(recorded, actual, right_digest, right_size) -> None:
    assume(recorded != actual)
    entry = RecordEntry("m", Hash("sha256", _b64(hashlib.sha256(recorded).digest())), len(recorded))
    waiver = RecordWaiver("w.whl", "0" * 64, "m",
                          hashlib.sha256(actual if right_digest else actual + b"!").hexdigest(),
                          len(actual) + (0 if right_size else 1))
    stream = _RecordCheckedStream(io.BytesIO(actual), entry, "w.whl", waiver)
    if right_digest and right_size:
        assert _drain(stream, []) == actual
    else:
        with pytest.raises(CheckFailed, match="the waiver expects sha256 "):
            _drain(stream, [])


_modules = st.dictionaries(st.from_regex(r"pkg/[a-z]{1,8}\.py", fullmatch=True), st.binary(max_size=100),
                           min_size=1, max_size=4)


@settings(max_examples=25)
@given(_modules, st.data())
def test_a_wheel_installs_only_when_every_member_matches_its_record(tmp_path_factory, files, data) -> None:
    root = tmp_path_factory.mktemp("whl")
    tampered = data.draw(st.none() | st.sampled_from(sorted(files)))
    override = {}
    if tampered is not None:
        lie = data.draw(st.binary(max_size=100).filter(lambda other: other != files[tampered]))
        override[tampered] = f"{tampered},{_record_hash(lie)},{len(lie)}"
    wheel = make_wheel(root, "demo", "1.0", files=files, record_override=override)
    stage = root / "stage"
    stage.mkdir()
    if tampered is None:
        name, written = install_wheel(str(wheel.path), wheel.filename, str(stage), "/opt/venv", DEBIAN_BOOKWORM_ARM64)
        assert name == wheel.filename
        site = stage / "opt/venv/lib/python3.11/site-packages"
        for path, content in files.items():
            assert (site / path).read_bytes() == content
        return
    with pytest.raises(CheckFailed) as refused:
        install_wheel(str(wheel.path), wheel.filename, str(stage), "/opt/venv", DEBIAN_BOOKWORM_ARM64)
    assert refused.value.check_id == "wheel-record"
    assert f"{wheel.filename}: {tampered} does not match its RECORD entry" in str(refused.value)
