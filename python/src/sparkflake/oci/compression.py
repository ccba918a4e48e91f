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
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import zstandard

from ..errors import InputError
from .media_types import LAYER_MEDIA_TYPES

COMPRESSIONS = ("gzip", "zstd", "none")
DEFAULT_LEVELS = {"gzip": 6, "zstd": 3, "none": 0}
GZIP_HEADER = bytes.fromhex("1f8b0800000000000003")


@dataclass(frozen=True)
class Compression:
    algorithm: str = "gzip"
    level: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in COMPRESSIONS:
            raise InputError(
                f"unknown compression {self.algorithm!r}: expected one of {', '.join(COMPRESSIONS)}"
            )
        if self.level is None:
            object.__setattr__(self, "level", DEFAULT_LEVELS[self.algorithm])
        bounds = {"gzip": (1, 9), "zstd": (1, 19), "none": (0, 0)}[self.algorithm]
        assert self.level is not None
        if not bounds[0] <= self.level <= bounds[1]:
            raise InputError(
                f"compression level {self.level} out of range {bounds[0]}..{bounds[1]} "
                f"for {self.algorithm}"
            )

    @property
    def media_type(self) -> str:
        return LAYER_MEDIA_TYPES[self.algorithm]

    @property
    def description(self) -> str:
        """What produced the bytes, recorded in the manifest: implementation + level."""
        if self.algorithm == "gzip":
            return f"gzip;implementation=zlib;level={self.level};wbits=31;memlevel=8"
        if self.algorithm == "zstd":
            return f"zstd;implementation=libzstd;level={self.level};threads=0"
        return "none"

    def as_record(self) -> dict[str, object]:
        return {"algorithm": self.algorithm, "level": self.level}


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
