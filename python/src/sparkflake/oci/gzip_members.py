"""Whole gzip members inflated by libdeflate, with the number of input bytes each used.

zlib inflates ~80 MB/s of blob per core here, libdeflate ~3x that (bench/results,
audit-real-issue32*.json). libdeflate inflates a member in one call into a buffer of known
size, so it can only take members that inflate to at most ``MEMBER_LIMIT`` bytes (ours are
4 MiB, ``compression.DEFAULT_BLOCK_SIZES``); anything else is zlib's, in bounded pieces.

The Python wrapper (``deflate``, locked) returns no input count, and a member's end is
known only by inflating it, so ``libdeflate_gzip_decompress_ex`` (which reports it) is
called through ctypes from the wrapper's own extension, which exports libdeflate's API
(``nm -D``: ``libdeflate_gzip_decompress_ex``, ``libdeflate_alloc_decompressor``); ctypes
releases the GIL during the call, so members inflate on every core.

Only a member whose header has no flags (FLG 0: no FEXTRA/FNAME/FCOMMENT/FHCRC, which
zlib checks and libdeflate skips) is taken; libdeflate checks the deflate stream, the
member's CRC-32 and ISIZE, as zlib does. Whatever it refuses (a cut member, a corrupt
one, one larger than the limit) returns None, and the caller inflates that member with
zlib, so an error is zlib's, at its place.
"""

from __future__ import annotations

import ctypes
import threading

import deflate._deflate

FLAGLESS_HEAD = b"\x1f\x8b\x08\x00"  # gzip magic, CM 8 (deflate), FLG 0 (RFC 1952 2.3)
MEMBER_LIMIT = 8 << 20  # what one member may inflate to here (ours: 4 MiB)
MIN_MEMBER = 20  # a 10-byte header, the shortest deflate stream (an empty fixed block, 2), the 8-byte trailer
_SUCCESS = 0  # enum libdeflate_result (libdeflate.h)


def _bind() -> ctypes.CDLL | None:
    try:
        library = ctypes.CDLL(deflate._deflate.__file__)
        library.libdeflate_alloc_decompressor.restype = ctypes.c_void_p
        library.libdeflate_alloc_decompressor.argtypes = []
        library.libdeflate_free_decompressor.restype = None
        library.libdeflate_free_decompressor.argtypes = [ctypes.c_void_p]
        inflate = library.libdeflate_gzip_decompress_ex
    except (OSError, AttributeError):
        return None
    inflate.restype = ctypes.c_int
    inflate.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t),
    ]
    return library


_LIBRARY = _bind()
_per_thread = threading.local()


def available() -> bool:
    """Whether libdeflate's API was found in the ``deflate`` wheel (else zlib does all)."""
    return _LIBRARY is not None


class _ThreadInflater:
    """A libdeflate decompressor (not to be shared between threads) and its output buffer."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._library = library
        self.handle = library.libdeflate_alloc_decompressor()
        if not self.handle:
            raise MemoryError("libdeflate_alloc_decompressor failed")
        self.output = bytearray(MEMBER_LIMIT)
        self.output_address = ctypes.addressof((ctypes.c_char * MEMBER_LIMIT).from_buffer(self.output))
        self.used_in = ctypes.c_size_t()
        self.used_out = ctypes.c_size_t()

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            self._library.libdeflate_free_decompressor(self.handle)


def _thread_inflater() -> _ThreadInflater | None:
    if _LIBRARY is None:
        return None
    inflater = getattr(_per_thread, "inflater", None)
    if inflater is None:
        inflater = _per_thread.inflater = _ThreadInflater(_LIBRARY)
    return inflater


def inflate_member(data: bytes, start: int, piece_bytes: int) -> tuple[list[bytes], int] | None:
    """The flagless member at ``data[start:]``, inflated whole, as pieces of at most
    ``piece_bytes``, and the number of bytes of ``data`` it took; None when libdeflate is
    not there or does not take it (see the module's docstring): zlib's turn."""
    if len(data) - start < MIN_MEMBER or data[start : start + 4] != FLAGLESS_HEAD:
        return None
    inflater = _thread_inflater()
    if inflater is None or _LIBRARY is None:  # no inflater without the library
        return None
    # ``data`` is bytes (immutable): its buffer stays put while ``source`` holds it
    source = ctypes.c_char_p(data)
    address = ctypes.cast(source, ctypes.c_void_p).value
    assert address is not None
    result = _LIBRARY.libdeflate_gzip_decompress_ex(
        inflater.handle, address + start, len(data) - start, inflater.output_address, MEMBER_LIMIT,
        ctypes.byref(inflater.used_in), ctypes.byref(inflater.used_out),
    )
    if result != _SUCCESS:
        return None
    produced = inflater.used_out.value
    view = memoryview(inflater.output)
    pieces = [bytes(view[at : min(at + piece_bytes, produced)]) for at in range(0, produced, piece_bytes)]
    return pieces, inflater.used_in.value
