"""Decompression in bounded pieces (``oci.decompression``, issue 28 class 2): however a
stream is made (RLE blocks, raw blocks, compressed frames, skippable frames anywhere,
gzip members of long runs) and however its bytes are cut, every piece is at most the
bound (one zstd block more), the pieces join to what libzstd and zlib give, and a cut
inside a frame is refused as truncated."""

from __future__ import annotations

import struct
import subprocess
import zlib

import pytest
import zstandard
from fixtures.bomb_layers import gzip_bomb, zstd_rle_bomb
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.oci.decompression import ZSTD_BLOCK_MAX, Decompressor, detect_compression

pytestmark = pytest.mark.nix_sandbox  # needs Python, zlib and zstd only


def _skippable(payload: bytes, nibble: int) -> bytes:
    return struct.pack("<II", 0x184D2A50 | nibble, len(payload)) + payload


def _zstd_frame(content: bytes, checksum: bool) -> bytes:
    return zstandard.ZstdCompressor(level=1, write_checksum=checksum, write_content_size=True).compress(content)


# A frame: compressed content, or hand-made RLE blocks behind a raw head (a bomb's shape).
_FRAMES = st.one_of(
    st.builds(lambda content, checksum: ("frame", _zstd_frame(content, checksum), content),
              st.binary(max_size=3000) | st.builds(lambda n: b"z" * n, st.integers(0, 300_000)), st.booleans()),
    st.builds(lambda head, blocks, fill: ("frame", zstd_rle_bomb(head, blocks, fill),
                                          head + bytes([fill]) * (blocks * ZSTD_BLOCK_MAX)),
              st.binary(max_size=600), st.integers(1, 12), st.integers(0, 255)),
    st.builds(lambda payload, nibble: ("skippable", _skippable(payload, nibble), b""),
              st.binary(max_size=300), st.integers(0, 15)),
)
_CUTS = st.lists(st.integers(1, 300_000), min_size=1, max_size=5)
_PIECE_BYTES = st.sampled_from([ZSTD_BLOCK_MAX, 3 * ZSTD_BLOCK_MAX, 1 << 20])


def _chunks(blob: bytes, cuts: list[int]) -> list[bytes]:
    chunks, position, turn = [], 0, 0
    while position < len(blob):
        chunks.append(blob[position:position + cuts[turn % len(cuts)]])
        position += cuts[turn % len(cuts)]
        turn += 1
    return chunks


@given(frames=st.lists(_FRAMES, min_size=1, max_size=5), cuts=_CUTS, piece_bytes=_PIECE_BYTES)
def test_zstd_pieces_are_bounded_and_whole(frames, cuts, piece_bytes):
    blob = b"".join(frame for _, frame, _ in frames)
    expected = b"".join(content for _, _, content in frames)
    assert detect_compression(blob) == "zstd"
    decompressor = Decompressor("zstd", piece_bytes)
    pieces = [piece for chunk in _chunks(blob, cuts) for piece in decompressor.pieces(chunk)]
    decompressor.finish()
    assert all(0 < len(piece) <= piece_bytes + ZSTD_BLOCK_MAX for piece in pieces)
    assert b"".join(pieces) == expected
    # libzstd itself, reading across frames, skips the same skippable frames
    assert zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(blob) == expected


@given(frames=st.lists(_FRAMES, min_size=1, max_size=3), data=st.data())
def test_a_zstd_stream_cut_inside_any_frame_is_truncated(frames, data):
    blob = b"".join(frame for _, frame, _ in frames)
    ends, offset = set(), 0
    for _, frame, _ in frames:
        offset += len(frame)
        ends.add(offset)
    cut = data.draw(st.integers(1, len(blob) - 1)) if len(blob) > 1 else 0
    decompressor = Decompressor("zstd")
    for piece in decompressor.pieces(blob[:cut]):
        assert len(piece) <= (1 << 20) + ZSTD_BLOCK_MAX
    if cut in ends or cut == 0:
        decompressor.finish()
    else:
        with pytest.raises(ValueError, match="truncated zstd stream"):
            decompressor.finish()


@given(head=st.binary(max_size=2000), run=st.integers(0, 3 << 20), members=st.integers(1, 3),
       cuts=_CUTS, piece_bytes=st.sampled_from([1 << 16, 1 << 20]))
def test_gzip_pieces_are_bounded_and_whole(head, run, members, cuts, piece_bytes):
    content = head + bytes(run)  # a run of zeros: ~1,000 times smaller compressed
    blob = zlib.compress(content, 9, wbits=31) * members
    decompressor = Decompressor("gzip", piece_bytes)
    pieces = [piece for chunk in _chunks(blob, cuts) for piece in decompressor.pieces(chunk)]
    decompressor.finish()
    assert all(0 < len(piece) <= piece_bytes for piece in pieces)
    assert b"".join(pieces) == content * members


def test_standard_tools_read_the_bombs_as_we_do():
    """The hand-made bombs are streams zstd(1) and gzip(1) read, to the same bytes."""
    for blob, argv in ((zstd_rle_bomb(b"head", 40, 7), ["zstd", "-dc"]), (gzip_bomb(b"head", 64), ["gzip", "-dc"])):
        decompressor = Decompressor(detect_compression(blob))
        ours = b"".join(decompressor.pieces(blob))
        decompressor.finish()
        assert subprocess.run(argv, input=blob, capture_output=True, check=True).stdout == ours


def test_a_layer_beginning_with_a_skippable_frame_is_zstd():
    """zstd(1) writes and reads a skippable frame first (a seekable zstd index, a
    signature); read as plain bytes it would pass as an uncompressed tar."""
    blob = _skippable(b"index", 0xE) + _zstd_frame(b"content", True)
    assert subprocess.run(["zstd", "-dc"], input=blob, capture_output=True, check=True).stdout == b"content"
    assert detect_compression(blob) == "zstd"
    assert detect_compression(b"\x50\x2a\x4d\x17....") == "none"


@pytest.mark.parametrize("blob, message", [
    (b"\x28\xb5\x2f\xfd\x08\x00", "reserved bit"),
    (b"\x28\xb5\x2f\xfd\x00\x38" + (3 << 1).to_bytes(3, "little"), "reserved type"),
    (_zstd_frame(b"one", False) + b"garbage!", "not a zstd frame"),
])
def test_corrupt_zstd_headers_are_refused(blob, message):
    with pytest.raises(ValueError, match=f"corrupt zstd stream: .*{message}"):
        b"".join(Decompressor("zstd").pieces(blob))
