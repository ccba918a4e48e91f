"""gzip members inflated whole by libdeflate (``oci.gzip_members``) inside the bounded
gzip decompression (``oci.decompression``): however a stream of members is made (flagless,
with a file name, larger than libdeflate's limit), corrupted, cut or followed by junk, and
however its bytes are cut into chunks, the decompression gives what zlib alone gives, in
pieces of at most the bound, and fails where zlib fails, as truncated or corrupt."""

from __future__ import annotations

import gzip
import io
import zlib

import deflate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.oci import gzip_members
from sparkflake.oci.decompression import Decompressor

pytestmark = pytest.mark.nix_sandbox  # needs Python, zlib and the locked deflate wheel only


def _flagless(content: bytes) -> bytes:
    return gzip.compress(content, mtime=0)


def _named(content: bytes) -> bytes:  # FLG.FNAME: zlib reads the name, libdeflate is not asked
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="layer.tar", mode="wb", fileobj=buffer, mtime=0) as handle:
        handle.write(content)
    return buffer.getvalue()


def _libdeflate(content: bytes) -> bytes:  # as our engine writes members (compression.gzip_member)
    return bytes(deflate.gzip_compress(content, 3))


_CONTENT = st.binary(max_size=4000) | st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 200_000), st.integers(0, 255))
_MEMBER = st.builds(lambda make, content: make(content), st.sampled_from([_flagless, _named, _libdeflate]), _CONTENT)


def _mutated(blob: bytes, kind: str, at: int, junk: bytes) -> bytes:
    if not blob:
        return blob + junk
    at %= len(blob)
    if kind == "flip":
        return blob[:at] + bytes([blob[at] ^ 0x5A]) + blob[at + 1:]
    if kind == "cut":
        return blob[:at]
    if kind == "junk-after":
        return blob + junk
    if kind == "junk-inside":
        return blob[:at] + junk + blob[at:]
    return blob


def _zlib_alone(blob: bytes) -> tuple[str, bytes]:
    """What a sequential zlib gives: ("ok", bytes), ("truncated", b"") or ("corrupt", b"")."""
    out, data = [], blob
    try:
        while data:
            inflater = zlib.decompressobj(31)
            out.append(inflater.decompress(data))
            if not inflater.eof:
                return "truncated", b""
            data = inflater.unused_data
    except zlib.error:
        return "corrupt", b""
    return "ok", b"".join(out)


def _ours(blob: bytes, cuts: list[int], piece_bytes: int) -> tuple[str, bytes]:
    decompressor = Decompressor("gzip", piece_bytes)
    out, position, turn = [], 0, 0
    try:
        while position < len(blob):
            size = cuts[turn % len(cuts)]
            for piece in decompressor.pieces(blob[position:position + size]):
                assert 0 < len(piece) <= piece_bytes
                out.append(piece)
            position += size
            turn += 1
        decompressor.finish()
    except ValueError as error:
        return ("truncated" if "truncated" in str(error) else "corrupt"), b""
    return "ok", b"".join(out)


def test_libdeflate_is_found_in_the_locked_wheel():
    # else every member would silently go the slower way
    assert gzip_members.available()


@given(members=st.lists(_MEMBER, max_size=5),
       mutation=st.sampled_from(["none", "flip", "cut", "junk-after", "junk-inside"]),
       at=st.integers(0, 1 << 30), junk=st.binary(min_size=1, max_size=40),
       cuts=st.lists(st.integers(1, 300_000), min_size=1, max_size=4),
       piece_bytes=st.sampled_from([1 << 10, 64 << 10, 1 << 20]))
def test_members_inflate_as_zlib_alone_inflates_them(members, mutation, at, junk, cuts, piece_bytes):
    blob = _mutated(b"".join(members), mutation, at, junk)
    assert _ours(blob, cuts, piece_bytes) == _zlib_alone(blob)


def test_a_member_larger_than_the_limit_is_inflated_by_zlib():
    content = bytes(range(256)) * ((gzip_members.MEMBER_LIMIT + (1 << 20)) // 256)
    member = _flagless(content)
    assert gzip_members.inflate_member(member, 0, 1 << 20) is None
    assert _ours(member + _flagless(b"tail"), [1 << 20], 1 << 20) == ("ok", content + b"tail")


def test_libdeflate_says_exactly_where_a_member_ends():
    first, second = _libdeflate(b"a" * 5000 + bytes(range(256))), _flagless(b"second")
    taken = gzip_members.inflate_member(b"junk" + first + second, 4, 1000)
    assert taken is not None
    pieces, used = taken
    assert used == len(first) and b"".join(pieces) == b"a" * 5000 + bytes(range(256))
    assert [len(piece) for piece in pieces] == [1000] * 5 + [256]


@pytest.mark.parametrize("blob", [
    _libdeflate(b"x" * 1000)[:-1],  # cut before the last byte of its size
    _named(b"named"),  # has header fields libdeflate would skip unchecked
    _flagless(b"crc")[:-8] + b"\0\0\0\0" + _flagless(b"crc")[-4:],  # CRC-32 wrong
    _flagless(b"size")[:-4] + b"\x09\0\0\0",  # ISIZE wrong
    b"\x1f\x8b\x08\x00" + bytes(30),  # no deflate stream
])
def test_what_libdeflate_does_not_take_is_left_to_zlib(blob):
    assert gzip_members.inflate_member(blob, 0, 1 << 20) is None
