"""Deterministic compression: exact gzip header, round trips, stable bytes."""

from __future__ import annotations

import gzip
import subprocess

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.errors import InputError
from sparkflake.oci.compression import (
    GZIP_HEADER,
    Compression,
    Compressor,
    Decompressor,
    detect_compression,
)


def _compress(algorithm: str, chunks: list[bytes], level: int | None = None) -> bytes:
    compressor = Compressor(Compression(algorithm, level))
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
    assert decompressor.decompress(blob) == b"".join(chunks)
    decompressor.finish()


@given(payload=st.binary(min_size=100, max_size=5000))
def test_truncated_streams_are_detected(payload):
    for algorithm in ("gzip", "zstd"):
        blob = _compress(algorithm, [payload])
        decompressor = Decompressor(algorithm)
        with pytest.raises(ValueError):
            decompressor.decompress(blob[: len(blob) // 2])
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
    assert Compression("gzip").media_type.endswith("tar+gzip")
