"""Deterministic compression: exact gzip header, round trips, stable bytes."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import zlib

import deflate
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci.compression import (
    GZIP_HEADER,
    Compression,
    Compressor,
)
from sparkflake.oci.decompression import Decompressor, detect_compression

pytestmark = pytest.mark.nix_sandbox  # needs Python and zstd: also run by the flake check

KNOWN_LIBDEFLATE_SHA256 = "4428c5f57b6882e4b60d9d6d5678743cc3f1be1dab29aba81bd4b89d53e90907"


def _compress(algorithm: str, chunks: list[bytes], level: int | None = None) -> bytes:
    implementation = "zlib" if algorithm == "gzip" else None
    compressor = Compressor(Compression(algorithm, level, 0, implementation))
    return b"".join(compressor.compress(c) for c in chunks) + compressor.flush()


def test_gzip_header_has_no_name_and_mtime_zero():
    blob = _compress("gzip", [b"hello"])
    assert blob[:10] == GZIP_HEADER == bytes.fromhex("1f8b0800000000000003")
    assert gzip.decompress(blob) == b"hello"


@given(
    chunks=st.lists(st.binary(max_size=5000), max_size=6),
    algorithm=st.sampled_from(["gzip", "zstd", "none"]),
)
def test_round_trip_and_chunking_independence(chunks, algorithm):
    blob = _compress(algorithm, chunks)
    assert blob == _compress(algorithm, [b"".join(chunks)])
    decompressor = Decompressor(detect_compression(blob) if blob else algorithm)
    assert b"".join(decompressor.pieces(blob)) == b"".join(chunks)
    decompressor.finish()


@given(payload=st.binary(min_size=100, max_size=5000))
def test_truncated_streams_are_detected(payload):
    for algorithm in ("gzip", "zstd"):
        blob = _compress(algorithm, [payload])
        decompressor = Decompressor(algorithm)
        with pytest.raises(ValueError):
            b"".join(decompressor.pieces(blob[: len(blob) // 2]))
            decompressor.finish()


def test_standard_tools_decompress_our_streams(tmp_path):
    payload = bytes(range(256)) * 4000
    for algorithm, argv in (("gzip", ["gzip", "-dc"]), ("zstd", ["zstd", "-dc"])):
        path = tmp_path / f"blob.{algorithm}"
        path.write_bytes(_compress(algorithm, [payload]))
        assert subprocess.run(argv + [str(path)], capture_output=True, check=True).stdout == payload


def test_zstd_output_is_independent_of_chunking_but_not_of_threads():
    payload = b"".join(i.to_bytes(4, "little") for i in range(2_000_000))

    def stream(threads: int, step: int) -> bytes:
        compressor = zstandard.ZstdCompressor(
            level=3, threads=threads, write_content_size=False
        ).compressobj()
        pieces = [compressor.compress(payload[i : i + step]) for i in range(0, len(payload), step)]
        return b"".join(pieces) + compressor.flush()

    ours = _compress("zstd", [payload[: 1 << 20], payload[1 << 20 :]])
    assert ours == stream(0, 4096) == stream(0, 3 << 20)
    # libzstd's worker mode cuts the input into jobs: other bytes, hence threads=0
    assert stream(2, 1 << 20) != ours
    assert zstandard.ZstdDecompressor().decompressobj().decompress(ours) == payload


def test_bad_levels_and_algorithms_refused():
    with pytest.raises(InputError):
        Compression("brotli")
    with pytest.raises(InputError):
        Compression("gzip", 12)
    assert Compression("zstd").level == 3
    assert Compression("gzip").level == 3 and Compression("gzip", implementation="zlib").level == 6
    assert Compression("gzip").media_type.endswith("tar+gzip")


def _layer_blob(tmp_path, tree, compression, threads, monkeypatch) -> bytes:
    from sparkflake.oci import BlobStore, LayerInput, LayerOptions, TreeSource, build_layer

    monkeypatch.setenv("SPARKFLAKE_COMPRESSION_THREADS", str(threads))
    store = tmp_path / f"store-{compression.algorithm}-{threads}-{compression.block_size}"
    layer = build_layer(
        LayerInput(sources=(TreeSource(str(tree)),)), LayerOptions(compression), BlobStore(store)
    )
    return layer.blob_path.read_bytes()


def test_block_mode_bytes_do_not_depend_on_thread_count(tmp_path, monkeypatch):
    import random

    rng = random.Random(5)
    tree = tmp_path / "tree"
    tree.mkdir()
    for index in range(12):
        words = [rng.choice(["alpha", "beta", "gamma", "delta", "\n"]) for _ in range(40_000)]
        (tree / f"f{index}").write_text(" ".join(words))
    (tree / "random").write_bytes(rng.randbytes(3 << 20))
    cases = (
        ("gzip", "zlib", 1 << 20),
        ("gzip", "zlib", 64 << 10),
        ("gzip", "libdeflate", 4 << 20),
        ("gzip", "libdeflate", 64 << 10),
        ("zstd", None, 4 << 20),
    )
    for algorithm, implementation, block_size in cases:
        compression = Compression(algorithm, block_size=block_size, implementation=implementation)
        blobs = {t: _layer_blob(tmp_path, tree, compression, t, monkeypatch) for t in (1, 2, 5)}
        assert blobs[1] == blobs[2] == blobs[5]
        argv = ["gzip", "-dc"] if algorithm == "gzip" else ["zstd", "-dc"]
        plain = subprocess.run(argv, input=blobs[1], capture_output=True, check=True).stdout
        single = Compression(algorithm, block_size=0, implementation="zlib" if implementation else None)
        stream = _layer_blob(tmp_path, tree, single, 1, monkeypatch)
        assert subprocess.run(argv, input=stream, capture_output=True, check=True).stdout == plain
        if block_size >= 1 << 20 or implementation == "zlib":
            # block mode costs almost nothing in size: primed window or large members
            assert len(blobs[1]) <= len(stream) * 1.03 + 1024
    zlib_blob = _layer_blob(tmp_path, tree, Compression("gzip", implementation="zlib"), 2, monkeypatch)
    assert zlib_blob[:10] == GZIP_HEADER
    assert gzip.decompress(zlib_blob)  # one member, valid CRC and size


def _gzip_members(blob: bytes) -> list[bytes]:
    """Split a multi-member gzip blob into the plain bytes of each member (zlib, not ours)."""
    members = []
    while blob:
        stream = zlib.decompressobj(31)
        members.append(stream.decompress(blob))
        assert stream.eof, "member truncated"
        blob = stream.unused_data
    return members


@given(payload=st.binary(max_size=300_000), block_kib=st.sampled_from([64, 128]))
def test_libdeflate_blob_is_one_member_per_block(payload, block_kib):
    """The default gzip blob: complete members of exactly block_size plain bytes each
    (the last shorter), each with no name and MTIME 0, read back by zlib and gzip(1)."""
    import io

    from sparkflake.oci.layer import _BlockSink

    block = block_kib << 10
    handle = io.BytesIO()
    compression = Compression("gzip", block_size=block)
    sink = _BlockSink(compression, handle)
    for start in range(0, len(payload), 50_000):
        sink.put(payload[start : start + 50_000])
    digest, size = sink.finish()
    blob = handle.getvalue()
    assert size == len(blob) and digest == hashlib.sha256(blob).hexdigest()
    members = _gzip_members(blob)
    expected = [payload[i : i + block] for i in range(0, len(payload), block)] or [b""]
    assert members == expected
    assert gzip.decompress(blob) == payload
    offset = 0
    for plain in members:
        assert blob[offset : offset + 8] == bytes.fromhex("1f8b080000000000")  # no name, MTIME 0
        offset += len(deflate.gzip_compress(plain, compression.level))
    assert offset == len(blob)


def test_libdeflate_bytes_are_pinned():
    """A known answer: the same input gives these bytes on any machine with the locked
    wrapper. A libdeflate upgrade that changes them fails here, not in a user's digest."""
    payload = b"".join(f"{i:08d} sparkflake layer bytes\n".encode() for i in range(20_000))
    blob = deflate.gzip_compress(payload, 6)
    assert hashlib.sha256(blob).hexdigest() == KNOWN_LIBDEFLATE_SHA256
    assert Compression("gzip").description == (
        f"gzip;implementation=libdeflate;wrapper=deflate-{deflate.__version__};level=3"
        ";members=4194304"
    )
    with pytest.raises(InputError, match="single-stream"):
        Compressor(Compression("gzip"))
    with pytest.raises(InputError, match="block size"):
        Compression("gzip", block_size=0)
    with pytest.raises(InputError, match="implementation"):
        Compression("gzip", implementation="zopfli")
    with pytest.raises(InputError, match="one implementation"):
        Compression("zstd", implementation="zlib")


@pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0662", " 2", "+2", "1_2", "0", ""])
def test_compression_threads_take_ascii_digits_only(monkeypatch, value):
    # str.isdigit took "²" (int() then raised) and other scripts' digits
    import os

    from sparkflake.oci.layer import compression_threads

    monkeypatch.setenv("SPARKFLAKE_COMPRESSION_THREADS", value)
    assert compression_threads() == max(1, len(os.sched_getaffinity(0)))
    monkeypatch.setenv("SPARKFLAKE_COMPRESSION_THREADS", "3")
    assert compression_threads() == 3


@pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0662", " 2", "+2", "1_2", "-1", "1" * 5000])
def test_source_date_epoch_takes_ascii_digits_only(monkeypatch, value):
    from sparkflake.oci.image import default_source_date_epoch

    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(InputError, match=r"^SOURCE_DATE_EPOCH=.* is not a non-negative integer"):
        default_source_date_epoch()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert default_source_date_epoch() == 1700000000
