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
    for algorithm, block_size in (("gzip", 1 << 20), ("gzip", 64 << 10), ("zstd", 4 << 20)):
        compression = Compression(algorithm, block_size=block_size)
        blobs = {t: _layer_blob(tmp_path, tree, compression, t, monkeypatch) for t in (1, 2, 5)}
        assert blobs[1] == blobs[2] == blobs[5]
        argv = ["gzip", "-dc"] if algorithm == "gzip" else ["zstd", "-dc"]
        plain = subprocess.run(argv, input=blobs[1], capture_output=True, check=True).stdout
        stream = _layer_blob(tmp_path, tree, Compression(algorithm, block_size=0), 1, monkeypatch)
        assert subprocess.run(argv, input=stream, capture_output=True, check=True).stdout == plain
        # block mode costs almost nothing in size: the deflate window is primed
        assert len(blobs[1]) <= len(stream) * 1.03 + 1024
    gzip_blob = _layer_blob(tmp_path, tree, Compression("gzip"), 2, monkeypatch)
    assert gzip_blob[:10] == GZIP_HEADER
    assert gzip.decompress(gzip_blob)  # one member, valid CRC and size
