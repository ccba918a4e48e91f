"""Deterministic layer compression: gzip, zstd or none.

gzip: ``zlib.compressobj(level=6, method=DEFLATED, wbits=31, memLevel=8,
strategy=Z_DEFAULT_STRATEGY)``. wbits=31 makes zlib write the gzip wrapper itself and
zlib always writes the same 10 header bytes ``1f 8b 08 00 00 00 00 00 00 03``: magic,
CM=8 (deflate), FLG=0 (no file name, no comment, no extra field), MTIME=0, XFL=0 (zlib
writes 0 for levels 2-8), OS=3 (Unix). The trailer is CRC32 and ISIZE of the tar stream.
The deflate bytes depend only on the input, the level and the zlib implementation
(zlib 1.2.x/1.3.x are stable; zlib-ng would differ), which is why the implementation and
level are recorded in each layer descriptor's annotations.

zstd: python-zstandard ``ZstdCompressor(level=3, threads=0)``, no checksum, no content
size (the stream length is unknown when the frame starts). Single-threaded on purpose:
libzstd's multi-threaded mode (threads>=1) cuts the input into jobs and produces
different bytes from single-threaded mode, so the thread count would become part of the
image identity.

Block mode (the default for both): the tar stream is cut into fixed-size blocks (gzip
1 MiB, zstd 4 MiB) that are compressed independently on every core and concatenated in
order, as pigz does. gzip blocks are raw deflate primed with the previous block's last
32 KiB (the whole deflate window, so matches across the cut are still found), each ended
by a sync flush (an empty stored block) and the last by the final block; one gzip header
and one CRC32/ISIZE trailer wrap them, so the result is one ordinary gzip member. zstd
blocks are independent frames with their content size, concatenated (decoders read a
sequence of frames as one stream). The bytes depend on the block size, which is fixed and
recorded, never on the number of threads, so any machine gives the same blob.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import zstandard

from ..errors import InputError
from .media_types import LAYER_MEDIA_TYPES

COMPRESSIONS = ("gzip", "zstd", "none")
DEFAULT_LEVELS = {"gzip": 6, "zstd": 3, "none": 0}
GZIP_HEADER = bytes.fromhex("1f8b0800000000000003")


DEFAULT_BLOCK_SIZES = {"gzip": 1 << 20, "zstd": 4 << 20, "none": 0}
DEFLATE_WINDOW = 32 * 1024


@dataclass(frozen=True)
class Compression:
    """Algorithm, level and block size (0: one single-threaded stream)."""

    algorithm: str = "gzip"
    level: int | None = None
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in COMPRESSIONS:
            raise InputError(
                f"unknown compression {self.algorithm!r}: expected one of {', '.join(COMPRESSIONS)}"
            )
        if self.level is None:
            object.__setattr__(self, "level", DEFAULT_LEVELS[self.algorithm])
        if self.block_size is None:
            object.__setattr__(self, "block_size", DEFAULT_BLOCK_SIZES[self.algorithm])
        bounds = {"gzip": (1, 9), "zstd": (1, 19), "none": (0, 0)}[self.algorithm]
        assert self.level is not None and self.block_size is not None
        if not bounds[0] <= self.level <= bounds[1]:
            raise InputError(
                f"compression level {self.level} out of range {bounds[0]}..{bounds[1]} "
                f"for {self.algorithm}"
            )
        if self.block_size and (self.algorithm == "none" or self.block_size < 64 * 1024):
            raise InputError(f"block size {self.block_size} invalid for {self.algorithm}")

    @property
    def media_type(self) -> str:
        return LAYER_MEDIA_TYPES[self.algorithm]

    @property
    def description(self) -> str:
        """What produced the bytes, recorded in the manifest: implementation + level."""
        blocks = f";blocks={self.block_size}" if self.block_size else ""
        if self.algorithm == "gzip":
            return f"gzip;implementation=zlib;level={self.level};memlevel=8{blocks}"
        if self.algorithm == "zstd":
            return f"zstd;implementation=libzstd;level={self.level}{blocks}"
        return "none"

    def as_record(self) -> dict[str, object]:
        return {"algorithm": self.algorithm, "level": self.level, "block_size": self.block_size}


def deflate_block(block: bytes, dictionary: bytes, level: int, final: bool) -> bytes:
    """One block of a block-mode gzip member: raw deflate, primed, sync- or final-flushed."""
    if dictionary:
        compressor = zlib.compressobj(
            level, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=dictionary
        )
    else:
        compressor = zlib.compressobj(level, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
    return compressor.compress(block) + compressor.flush(
        zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH
    )


def gzip_trailer(crc: int, size: int) -> bytes:
    return crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")


_thread_compressors = threading.local()


def zstd_block(block: bytes, level: int) -> bytes:
    """One block of a block-mode zstd stream: an independent frame with its size.
    Each thread reuses one compressor context (a one-shot compress resets the session,
    so reuse changes speed, not bytes)."""
    compressors = getattr(_thread_compressors, "by_level", None)
    if compressors is None:
        compressors = _thread_compressors.by_level = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = zstandard.ZstdCompressor(
            level=level, threads=0, write_checksum=False, write_content_size=True
        )
    return compressor.compress(block)


class Compressor:
    """Incremental compressor: ``compress(chunk)`` then ``flush()``; both return bytes."""

    def __init__(self, compression: Compression) -> None:
        self.compress: Callable[[bytes], bytes]
        self.flush: Callable[[], bytes]
        if compression.algorithm == "gzip":
            zobj = zlib.compressobj(
                compression.level or 6, zlib.DEFLATED, 31, 8, zlib.Z_DEFAULT_STRATEGY
            )
            self.compress = zobj.compress
            self.flush = zobj.flush
        elif compression.algorithm == "zstd":
            zcomp = zstandard.ZstdCompressor(
                level=compression.level or 3,
                threads=0,
                write_checksum=False,
                write_content_size=False,
            ).compressobj()
            self.compress = zcomp.compress
            self.flush = zcomp.flush
        else:
            self.compress = bytes
            self.flush = bytes


def detect_compression(head: bytes) -> str:
    """Compression of a blob from its first bytes (gzip, zstd, or none for plain tar)."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return "none"


class Decompressor:
    """Incremental decompressor for gzip or zstd (concatenated members/frames accepted),
    or none. ``finish()`` raises ``ValueError`` if the stream stopped inside a member."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._in_member = False
        self._stream = self._new_stream()

    def _new_stream(self) -> zlib._Decompress | zstandard.ZstdDecompressionObj | None:
        if self.algorithm == "gzip":
            return zlib.decompressobj(31)
        if self.algorithm == "zstd":
            return zstandard.ZstdDecompressor().decompressobj()
        return None

    def decompress(self, chunk: bytes) -> bytes:
        if self._stream is None:
            return chunk
        out = []
        try:
            while chunk:
                out.append(self._stream.decompress(chunk))
                self._in_member = True
                if self._stream.eof:
                    chunk = self._stream.unused_data
                    self._stream = self._new_stream()
                    self._in_member = False
                else:
                    chunk = b""
        except (zlib.error, zstandard.ZstdError) as exc:
            raise ValueError(f"corrupt {self.algorithm} stream: {exc}") from exc
        return b"".join(out)

    def finish(self) -> None:
        if self._in_member:
            raise ValueError(f"truncated {self.algorithm} stream")
