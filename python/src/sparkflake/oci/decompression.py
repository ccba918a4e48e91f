"""A layer blob's compression, from its first bytes, and its incremental decompression in
pieces of bounded size: a hostile blob of a few kilobytes (zstd RLE blocks, a gzip bomb)
inflates to gigabytes, and what one step produces is what the audit holds in memory.

gzip: zlib's ``decompress(data, max_length)``; what it did not take waits in
``unconsumed_tail``. zstd: python-zstandard's ``decompressobj`` takes no output bound, so
its input is cut at block boundaries: a block regenerates at most 128 KiB (the format's
Block_Maximum_Size, RFC 8878 3.1.1.2.4, enforced by libzstd), so feeding at most
``piece_bytes / 128 KiB`` blocks per call bounds the output. ``_ZstdFrames`` walks the
frame and block headers to find those boundaries, skips skippable frames (RFC 8878 3.1.2)
and knows when the blob stops inside a frame.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import zstandard

from .gzip_members import inflate_member

PIECE_BYTES = 1 << 20
GZIP_FEED_BYTES = 256 << 10  # compressed bytes per zlib call (~0.6 MiB out at 2.5:1)
ZSTD_BLOCK_MAX = 128 << 10  # RFC 8878 3.1.1.2.4: Block_Maximum_Size is at most 128 KiB
_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC, _SKIPPABLE_MASK = 0x184D2A50, 0xFFFFFFF0  # RFC 8878 3.1.2: 0x184D2A5?


def _is_zstd_magic(head: bytes) -> bool:
    if len(head) < 4:
        return False
    magic = int.from_bytes(head[:4], "little")
    return magic == _ZSTD_MAGIC or magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC


def detect_compression(head: bytes) -> str:
    """Compression of a blob from its first bytes (gzip, zstd, or none for plain tar). A
    zstd stream may begin with a skippable frame: it is zstd too, as moby's and
    containerd's zstd matchers take it (zstdMagicSkippableStart 0x184D2A50, mask
    0xFFFFFFF0); read as plain bytes it would pass for an uncompressed tar."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if _is_zstd_magic(head):
        return "zstd"
    return "none"


class Decompressor:
    """Incremental decompressor for gzip or zstd (concatenated members/frames accepted),
    or none. ``pieces(chunk)`` yields the chunk's decompressed bytes in pieces of at most
    ``piece_bytes`` (zstd: plus one block, 128 KiB); ``finish()`` raises ``ValueError`` if
    the stream stopped inside a member or frame. A corrupt stream is a ``ValueError``."""

    def __init__(self, algorithm: str, piece_bytes: int = PIECE_BYTES) -> None:
        self.algorithm = algorithm
        self._piece_bytes = piece_bytes
        self._in_member = False
        self._gzip = zlib.decompressobj(31) if algorithm == "gzip" else None
        self._zstd = _ZstdFrames() if algorithm == "zstd" else None
        self._zstd_stream = zstandard.ZstdDecompressor().decompressobj() if self._zstd else None
        self._carry = b""

    def pieces(self, chunk: bytes) -> Iterator[bytes]:
        try:
            if self._gzip is not None:
                yield from self._gzip_pieces(chunk)
            elif self._zstd is not None:
                yield from self._zstd_pieces(chunk)
            elif chunk:
                yield chunk
        except (zlib.error, zstandard.ZstdError) as exc:
            raise ValueError(f"corrupt {self.algorithm} stream: {exc}") from exc

    def _gzip_pieces(self, data: bytes) -> Iterator[bytes]:
        # Between members, a whole flagless member goes to libdeflate (``gzip_members``,
        # ~3x zlib); what it does not take, and a member cut by the end of ``data``, zlib
        # inflates. zlib is fed at most GZIP_FEED_BYTES at a time: what it holds back (its
        # ``unconsumed_tail``, a member's ``unused_data``) is a copy of the rest of what it
        # was given, which for a whole 8 MiB segment was copied once per 1 MiB piece.
        view = memoryview(data)
        position = 0  # the first byte of ``data`` no inflater has taken
        while True:
            if not self._in_member and position < len(view) and isinstance(data, bytes):
                member = inflate_member(data, position, self._piece_bytes)
                if member is not None:
                    pieces, used = member
                    position += used
                    yield from pieces
                    continue
            if position == len(view) and not self._in_member:
                return
            assert self._gzip is not None
            fed = view[position : position + GZIP_FEED_BYTES]
            piece = self._gzip.decompress(fed, self._piece_bytes)
            self._in_member = True
            if piece:
                yield piece
            if self._gzip.eof:  # a member ended; another may follow (RFC 1952 2.2)
                position += len(fed) - len(self._gzip.unused_data)
                self._gzip = zlib.decompressobj(31)
                self._in_member = False
                continue
            position += len(fed) - len(self._gzip.unconsumed_tail)
            if position == len(view) and len(piece) < self._piece_bytes:
                return  # all taken, nothing held back: the next chunk goes on

    def _zstd_pieces(self, chunk: bytes) -> Iterator[bytes]:
        assert self._zstd is not None and self._zstd_stream is not None
        data = self._carry + chunk if self._carry else chunk
        view = memoryview(data)
        blocks = max(1, self._piece_bytes // ZSTD_BLOCK_MAX)
        start = end = ended = 0
        for span_start, span_end, fed, block_end, frame_end in self._zstd.spans(data):
            if not fed:
                continue
            if end != span_start:
                start = span_start  # a skippable frame lay between: nothing pending
            end = span_end
            ended += block_end
            if ended >= blocks or frame_end:
                if piece := self._zstd_stream.decompress(view[start:end]):
                    yield piece
                start, ended = end, 0
            if frame_end:
                if not self._zstd_stream.eof:
                    raise ValueError("corrupt zstd stream: its blocks ended before the frame's content")
                self._zstd_stream = zstandard.ZstdDecompressor().decompressobj()
        if start < end and (piece := self._zstd_stream.decompress(view[start:end])):
            yield piece  # a block cut by the chunk: it gives at most its own size
        self._carry = data[self._zstd.consumed :]  # a header cut by the chunk (< 18 bytes)
        self._in_member = self._zstd.inside_frame or bool(self._carry)

    @property
    def at_member_end(self) -> bool:
        """Every member or frame fed so far ended: what follows may start a new one."""
        return not self._in_member

    def finish(self) -> None:
        if self._in_member:
            raise ValueError(f"truncated {self.algorithm} stream")


class _ZstdFrames:
    """Where a zstd stream's frames and blocks begin and end, from their headers alone
    (RFC 8878 3.1.1): the bytes pass through ``spans`` in order, cut anywhere."""

    def __init__(self) -> None:
        self._next = "magic"  # the header that follows the content: "magic" or "block-header"
        self._content = 0  # bytes of content left (a block's, a checksum's, a skippable frame's)
        self._content_fed = False  # whether that content is a zstd frame's
        self._ending = ""  # what ends with the content: "block", "frame" or "skippable"
        self._last_block = False
        self._checksum = 0
        self.consumed = 0  # bytes of the last ``spans`` data walked; the rest is a cut header

    @property
    def inside_frame(self) -> bool:
        return self._next != "magic" or self._content > 0

    def spans(self, data: bytes) -> Iterator[tuple[int, int, bool, bool, bool]]:
        """``(start, end, fed, block_end, frame_end)`` for each header and content of
        ``data``: ``fed`` when the bytes are a zstd frame's (a skippable frame's are not),
        ``block_end``/``frame_end`` when a block/frame ends with them. Stops before a
        header cut by the end of ``data`` (``consumed``)."""
        position = 0
        while position < len(data):
            if self._content:
                end = min(len(data), position + self._content)
                self._content -= end - position
                ends = self._end_content() if not self._content else (False, False)
                yield position, end, self._content_fed, *ends
                position = end
                continue
            length = self._header_length(data, position)
            if length is None:
                break
            header = data[position : position + length]
            yield position, position + length, *self._read_header(header)
            position += length
        self.consumed = position

    def _header_length(self, data: bytes, position: int) -> int | None:
        """The length of the header at ``position``, None when ``data`` ends inside it."""
        if self._next == "block-header":
            return 3 if len(data) - position >= 3 else None
        if len(data) - position < 5:
            return None
        magic = int.from_bytes(data[position : position + 4], "little")
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            return 8 if len(data) - position >= 8 else None
        if magic != _ZSTD_MAGIC:
            raise zstandard.ZstdError(f"not a zstd frame (magic {data[position:position + 4].hex()})")
        descriptor = data[position + 4]  # Frame_Header_Descriptor, RFC 8878 3.1.1.1.1
        single_segment = bool(descriptor & 0x20)
        length = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        length += (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        return length if len(data) - position >= length else None

    def _read_header(self, header: bytes) -> tuple[bool, bool, bool]:
        """Take a whole header: ``(fed, block_end, frame_end)`` of its span."""
        if self._next == "magic":
            if int.from_bytes(header[:4], "little") != _ZSTD_MAGIC:  # skippable
                return (False, *self._begin_content(int.from_bytes(header[4:8], "little"), False, "skippable"))
            if header[4] & 0x08:
                raise zstandard.ZstdError("zstd frame header: the reserved bit is set")
            self._checksum = 4 if header[4] & 0x04 else 0
            self._next = "block-header"
            return True, False, False
        # Block_Header: Last_Block (bit 0), Block_Type (bits 1-2), Block_Size (bits 3-23)
        value = int.from_bytes(header, "little")
        kind, size = (value >> 1) & 3, value >> 3
        if kind == 3:
            raise zstandard.ZstdError("zstd block of the reserved type")
        self._last_block = bool(value & 1)
        return (True, *self._begin_content(1 if kind == 1 else size, True, "block"))

    def _begin_content(self, size: int, fed: bool, ending: str) -> tuple[bool, bool]:
        """Content of ``size`` bytes follows; ``(block_end, frame_end)`` at once if empty."""
        self._content, self._content_fed, self._ending = size, fed, ending
        return self._end_content() if not size else (False, False)

    def _end_content(self) -> tuple[bool, bool]:
        """The content ended: ``(block_end, frame_end)``, and what comes next."""
        if self._ending == "block" and not self._last_block:
            self._next = "block-header"
            return True, False
        if self._ending == "block" and self._checksum:
            self._next = "magic"
            self._content, self._ending = self._checksum, "frame"
            return True, False
        self._next = "magic"
        return self._ending == "block", self._ending in ("block", "frame")
