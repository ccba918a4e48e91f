"""The one streaming decompression of a layer blob (``oci.layer_stream``): whatever the
compression and however the blob's reads and the reader's reads are cut, the bytes come
back whole and the digests equal hashlib's; a truncated, corrupt or over-bound stream is
refused in the reading thread; closing mid-stream leaves no thread behind."""

from __future__ import annotations

import hashlib
import io
import threading
import zlib

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sparkflake.oci.compression import (
    Compression,
    Compressor,
    deflate_block,
    gzip_member,
    zstd_block,
)
from sparkflake.oci.layer_stream import READ_CHUNK, LayerStream

pytestmark = pytest.mark.nix_sandbox  # needs Python and zstd only

STREAM_THREADS = ("layer-stream", "inflate", "inflate-order")
ALGORITHMS = ("gzip-members", "gzip-stream", "zstd-frames", "zstd-stream", "none")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(algorithm: str, blocks: list[bytes]) -> tuple[bytes, dict[int, int]]:
    """The blob the OCI engine would write for these input blocks, and at each offset where
    a member or frame ends (a cut there leaves a valid, shorter stream) the length of the
    content before it."""
    if algorithm == "gzip-members":
        pieces = [gzip_member(block, 3) for block in blocks]
        sizes = [len(block) for block in blocks]
    elif algorithm == "zstd-frames":
        pieces = [zstd_block(block, 3) for block in blocks]
        sizes = [len(block) for block in blocks]
    elif algorithm == "gzip-stream":  # pigz-style blocks between one header and trailer
        dictionary, body = b"", []
        for index, block in enumerate(blocks):
            body.append(deflate_block(block, dictionary, 6, index == len(blocks) - 1))
            dictionary = (dictionary + block)[-32768:]
        payload = b"".join(blocks)
        trailer = zlib.crc32(payload).to_bytes(4, "little") + (len(payload) & 0xFFFFFFFF).to_bytes(4, "little")
        pieces = [bytes.fromhex("1f8b0800000000000003") + b"".join(body) + trailer]
        sizes = [len(payload)]
    else:
        name = "zstd" if algorithm == "zstd-stream" else "none"
        compressor = Compressor(Compression(name, block_size=0))
        pieces = [b"".join(compressor.compress(block) for block in blocks) + compressor.flush()]
        sizes = [sum(len(block) for block in blocks)]
    ends, offset, content = {}, 0, 0
    for piece, size in zip(pieces, sizes, strict=True):
        offset += len(piece)
        content += size
        ends[offset] = content
    return b"".join(pieces), ends


class ChoppedReader(io.RawIOBase):
    """A blob handle whose reads give at most the next of ``sizes`` bytes (a pipe or a
    socket gives short reads), and which can fail after ``fail_after`` bytes."""

    def __init__(self, data: bytes, sizes: list[int], fail_after: int | None = None) -> None:
        self._data, self._sizes, self._position, self._fail_after = data, sizes, 0, fail_after

    def read(self, size: int = -1) -> bytes:
        if self._fail_after is not None and self._position >= self._fail_after:
            raise OSError(5, "Input/output error")
        step = self._sizes[self._position % len(self._sizes)] if self._sizes else size
        end = self._position + min(size if size >= 0 else len(self._data), step)
        chunk = self._data[self._position:end]
        self._position = end
        return chunk


_BLOCKS = st.lists(st.binary(max_size=3000) | st.builds(lambda n, b: bytes([b]) * n,
                   st.integers(0, 200_000), st.integers(0, 255)), min_size=1, max_size=5)
_READS = st.lists(st.integers(1, 70_000), max_size=4)


def _no_stream_threads() -> bool:
    return not any(thread.name in STREAM_THREADS for thread in threading.enumerate())


@given(algorithm=st.sampled_from(ALGORITHMS), blocks=_BLOCKS, blob_reads=_READS,
       reader_reads=st.lists(st.integers(1, 50_000) | st.just(-1), min_size=1, max_size=4), use_chunks=st.booleans())
def test_any_chunking_round_trips_with_hashlib_digests(algorithm, blocks, blob_reads, reader_reads, use_chunks):
    blob, _ = _blob(algorithm, blocks)
    payload = b"".join(blocks)
    if algorithm == "none":
        assume(blob[:2] != b"\x1f\x8b" and blob[:4] != b"\x28\xb5\x2f\xfd")
    progress: list[int] = []
    with LayerStream(ChoppedReader(blob, blob_reads), on_bytes=progress.append) as stream:
        if use_chunks:
            out = b"".join(stream.chunks())
        else:
            pieces, turn = [], 0
            while piece := stream.read(reader_reads[turn % len(reader_reads)]):
                pieces.append(piece)
                turn += 1
            out = b"".join(pieces)
        digests = stream.digests()
    assert out == payload
    assert digests.blob_digest == _sha256(blob) and digests.size == len(blob) == sum(progress)
    assert digests.diff_id == _sha256(payload) and digests.uncompressed_size == len(payload)
    expected = "none" if algorithm == "none" or not blob else algorithm.split("-")[0]
    assert digests.compression == expected
    assert _no_stream_threads()


@given(algorithm=st.sampled_from(ALGORITHMS[:4]), blocks=_BLOCKS, blob_reads=_READS, data=st.data())
def test_a_truncated_stream_is_always_refused(algorithm, blocks, blob_reads, data):
    """Every cut inside a member or frame is refused by the stream itself. A cut between
    two members leaves a valid shorter stream: its diffID is that of the shorter content,
    which the callers compare with the config's. A cut within the first 4 bytes is not
    recognisable as compressed (it is read as plain bytes: diffID and media type differ)."""
    blob, ends = _blob(algorithm, blocks)
    payload = b"".join(blocks)
    cut = data.draw(st.integers(4, len(blob) - 1)) if len(blob) > 4 else len(blob)
    assume(cut < len(blob))
    with LayerStream(ChoppedReader(blob[:cut], blob_reads)) as stream:
        if cut in ends:
            stream.drain()
            assert stream.digests().diff_id == _sha256(payload[: ends[cut]])
        else:
            with pytest.raises(ValueError, match="truncated|corrupt"):
                stream.drain()
            digests = stream.digests()
            assert digests.diff_id is None
            assert digests.blob_digest == _sha256(blob[:cut]) and digests.size == cut
    assert _no_stream_threads()


@given(algorithm=st.sampled_from(ALGORITHMS), blocks=_BLOCKS, bound=st.integers(0, 400_000))
def test_the_uncompressed_bound_is_respected(algorithm, blocks, bound):
    blob, _ = _blob(algorithm, blocks)
    payload = b"".join(blocks)
    if algorithm == "none":
        assume(blob[:2] != b"\x1f\x8b" and blob[:4] != b"\x28\xb5\x2f\xfd")
    with LayerStream(io.BytesIO(blob), max_uncompressed_bytes=bound) as stream:
        if len(payload) > bound:
            with pytest.raises(ValueError, match=f"more than the bound of {bound} bytes"):
                stream.drain()
        else:
            stream.drain()
        digests = stream.digests()
    assert digests.uncompressed_size <= bound
    # the blob is still hashed to its end, so the caller can name it
    assert digests.blob_digest == _sha256(blob) and digests.size == len(blob)
    assert (digests.diff_id is None) == (len(payload) > bound)


@given(read_before_close=st.integers(0, 12 << 20), algorithm=st.sampled_from(["gzip-members", "zstd-frames", "none"]))
def test_close_mid_stream_leaves_no_thread(read_before_close, algorithm):
    """The blob is larger than the queue holds, so the worker is blocked on a full queue
    when the reader stops."""
    payload = bytes(range(256)) * (64 << 10)  # 16 MiB
    blob, _ = _blob(algorithm, [payload[i:i + (1 << 20)] for i in range(0, len(payload), 1 << 20)])
    read_so_far = 0
    with LayerStream(io.BytesIO(blob)) as stream:
        while read_so_far < read_before_close and (piece := stream.read(min(READ_CHUNK, read_before_close - read_so_far))):
            read_so_far += len(piece)
    assert _no_stream_threads()


def test_a_corrupt_stream_is_refused_and_the_whole_blob_still_hashed():
    payload = bytes(range(256)) * 40_000
    blob, _ = _blob("gzip-members", [payload[: len(payload) // 2], payload[len(payload) // 2:]])
    broken = bytearray(blob)
    broken[20:60] = bytes(40)  # inside the first member's deflate data
    broken += bytes(3 << 20)  # past the error: read and hashed, not decompressed
    with LayerStream(ChoppedReader(bytes(broken), [READ_CHUNK])) as stream:
        with pytest.raises(ValueError, match="corrupt gzip stream"):
            stream.drain()
        digests = stream.digests()
    assert digests.blob_digest == _sha256(bytes(broken)) and digests.size == len(broken)
    assert digests.diff_id is None and digests.compression == "gzip"
    assert _no_stream_threads()


def test_a_read_error_is_raised_in_the_reading_thread():
    blob, _ = _blob("zstd-frames", [bytes(range(256)) * 20_000] * 3)
    with LayerStream(ChoppedReader(blob, [64], fail_after=128)) as stream:
        with pytest.raises(OSError, match="Input/output error"):
            stream.read()
        assert stream.digests().diff_id is None
    assert _no_stream_threads()


def test_an_empty_blob_is_an_empty_plain_stream():
    with LayerStream(io.BytesIO(b"")) as stream:
        assert stream.read() == b""
        digests = stream.digests()
    assert (digests.blob_digest, digests.size, digests.compression, digests.diff_id) == (
        _sha256(b""), 0, "none", _sha256(b""))
