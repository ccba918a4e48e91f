"""Deterministic layer compression: gzip, zstd or none.

gzip has two fixed implementations; which one made a blob, its level and block size are
recorded in each layer descriptor's annotations (``description``):

- ``libdeflate`` (the default): libdeflate as pinned in python/uv.lock (the ``deflate``
  wheel, whose version is part of the recorded description), level 3, 4 MiB members. The
  tar stream is cut into 4 MiB blocks; each becomes one complete gzip member
  (``libdeflate_gzip_compress``: header ``1f 8b 08 00 00000000 XFL ff``, i.e. no name,
  MTIME=0, XFL 0 at levels 2-8, OS=255; CRC32 and ISIZE trailer); the members are
  concatenated in order. A
  sequence of members is one gzip file (RFC 1952 2.2) and every reader we meet (Go's
  compress/gzip and pgzip in skopeo/podman/containerd/docker, zlib, gzip(1)) reads it as one
  stream. libdeflate's output is deterministic for a given version (its author, libdeflate
  issue #400); its CPU-specific code is checksums and matchfinder initialisation, which do
  not change the bytes. Level 3 is the default: on the 1.26 GB benchmark tree its blobs are
  2.5 % larger than zlib level 6 and 2 % smaller than skopeo's default gzip, for a third
  of zlib-6's CPU (docs/image-engine.md has the level-by-level table); level 6 is about
  2.5x faster than zlib level 6 with blobs 1 % smaller.
- ``zlib``: ``zlib.compressobj(level=6, method=DEFLATED, memLevel=8,
  strategy=Z_DEFAULT_STRATEGY)``, one gzip member with the 10 header bytes
  ``1f 8b 08 00 00000000 00 03`` (no name, MTIME=0, XFL=0 for levels 2-8, OS=3). In block
  mode (1 MiB blocks) each block is raw deflate primed with the previous block's last
  32 KiB (the whole window, so matches across the cut are still found), ended by a sync
  flush and the last by the final block, between one header and one CRC32/ISIZE trailer,
  as pigz does. Block size 0 is one single-threaded zlib stream. zlib 1.2.x/1.3.x give
  stable bytes.

zstd: python-zstandard ``ZstdCompressor(level=3, threads=0)``, no checksum. Single-threaded
per block on purpose: libzstd's multi-threaded mode cuts the input into jobs and produces
different bytes from single-threaded mode, so the thread count would become part of the
image identity. Block mode (4 MiB) makes independent frames with their content size,
concatenated (decoders read a sequence of frames as one stream); block size 0 is one
frame without content size.

In every block mode the blocks are compressed on every core and written in order: the
bytes depend on the block size, which is fixed and recorded, never on the number of
threads, so any machine gives the same blob.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import deflate
import zstandard

from ..core.errors import InputError
from ..core.records import field_record
from .media_types import LAYER_MEDIA_TYPES

COMPRESSIONS = ("gzip", "zstd", "none")
DEFAULT_LEVELS = {"libdeflate": 3, "zlib": 6, "zstd": 3, "none": 0}
GZIP_HEADER = bytes.fromhex("1f8b0800000000000003")


GZIP_IMPLEMENTATIONS = ("libdeflate", "zlib")
DEFAULT_GZIP_IMPLEMENTATION = "libdeflate"
DEFAULT_BLOCK_SIZES = {"libdeflate": 4 << 20, "zlib": 1 << 20, "zstd": 4 << 20, "none": 0}
DEFLATE_WINDOW = 32 * 1024
LIBDEFLATE_WRAPPER = f"deflate-{deflate.__version__}"


@dataclass(frozen=True)
class Compression:
    """Algorithm, level, block size (0: one single-threaded stream) and, for gzip, the
    implementation (libdeflate or zlib)."""

    algorithm: str = "gzip"
    level: int | None = None
    block_size: int | None = None
    implementation: str | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in COMPRESSIONS:
            raise InputError(
                f"unknown compression {self.algorithm!r}: expected one of {', '.join(COMPRESSIONS)}"
            )
        if self.algorithm == "gzip":
            if self.implementation is None:
                object.__setattr__(self, "implementation", DEFAULT_GZIP_IMPLEMENTATION)
            if self.implementation not in GZIP_IMPLEMENTATIONS:
                raise InputError(
                    f"unknown gzip implementation {self.implementation!r}: expected one of "
                    f"{', '.join(GZIP_IMPLEMENTATIONS)}"
                )
        elif self.implementation is not None:
            raise InputError(f"{self.algorithm} has one implementation: give none")
        # gzip's implementation was set above when none was given
        key = cast(str, self.implementation) if self.algorithm == "gzip" else self.algorithm
        if self.level is None:
            object.__setattr__(self, "level", DEFAULT_LEVELS[key])
        if self.block_size is None:
            object.__setattr__(self, "block_size", DEFAULT_BLOCK_SIZES[key])
        bounds = {"gzip": (1, 9), "zstd": (1, 19), "none": (0, 0)}[self.algorithm]
        assert self.level is not None and self.block_size is not None
        if not bounds[0] <= self.level <= bounds[1]:
            raise InputError(
                f"compression level {self.level} out of range {bounds[0]}..{bounds[1]} "
                f"for {self.algorithm}"
            )
        if self.block_size and (self.algorithm == "none" or self.block_size < 64 * 1024):
            raise InputError(f"block size {self.block_size} invalid for {self.algorithm}")
        if self.implementation == "libdeflate" and not self.block_size:
            raise InputError(
                "gzip with libdeflate compresses whole members: block size must be at least 64 KiB"
            )

    @property
    def media_type(self) -> str:
        return LAYER_MEDIA_TYPES[self.algorithm]

    @property
    def description(self) -> str:
        """What produced the bytes, recorded in the manifest: implementation + level."""
        blocks = f";blocks={self.block_size}" if self.block_size else ""
        if self.algorithm == "gzip" and self.implementation == "libdeflate":
            return (
                f"gzip;implementation=libdeflate;wrapper={LIBDEFLATE_WRAPPER};level={self.level}"
                f";members={self.block_size}"
            )
        if self.algorithm == "gzip":
            return f"gzip;implementation=zlib;level={self.level};memlevel=8{blocks}"
        if self.algorithm == "zstd":
            return f"zstd;implementation=libzstd;level={self.level}{blocks}"
        return "none"

    def as_record(self) -> dict[str, object]:
        record = field_record(self, ("algorithm", "level", "block_size"))
        if self.implementation is not None:
            record["implementation"] = self.implementation
            if self.implementation == "libdeflate":
                record["wrapper"] = LIBDEFLATE_WRAPPER
        return record


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


def gzip_member(block: bytes, level: int) -> bytearray:
    """One block of a libdeflate block-mode blob: a complete gzip member (CRC and size
    included). The wrapper releases the GIL, so members compress on every core."""
    return deflate.gzip_compress(block, level)


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
    """Incremental single-stream compressor (block size 0): ``compress(chunk)`` then
    ``flush()``; both return bytes. gzip here is always zlib (libdeflate is one-shot)."""

    def __init__(self, compression: Compression) -> None:
        if compression.implementation == "libdeflate":
            raise InputError("libdeflate gzip has no single-stream mode: use zlib or blocks")
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
