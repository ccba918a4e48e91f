"""The header of a safetensors file, read with bounds: what a checkpoint's weights are
(each tensor's dtype, shape and byte range) without reading the weights.

The format (huggingface/safetensors, safetensors/src/tensor.rs ``read_metadata`` and
``Metadata::validate``; the image's safetensors 0.8.0 reads the same):
8 bytes ``N``, a little-endian u64; ``N`` bytes of UTF-8 JSON (an object, space-padded
to 8-byte alignment by the writer); then the byte buffer. Each key but ``__metadata__``
(a string-to-string map) names a tensor: ``dtype``, ``shape``, ``data_offsets`` =
``[begin, end]`` relative to the buffer. Sorted by offset, the tensors tile the buffer
from 0 without gap or overlap, each exactly ``prod(shape) * bits(dtype) / 8`` bytes, and
the last ends where the file ends.

``N`` is refused above safetensors' own ``MAX_HEADER_SIZE`` (100,000,000) before a byte
of the header is read, and beyond the end of the file; sizes are refused where
safetensors' usize arithmetic would overflow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from ..core.documents import open_regular_file, parse_limit_error
from ..core.errors import InputError

LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100_000_000  # safetensors/src/tensor.rs MAX_HEADER_SIZE: every loader refuses more
USIZE_MAX = 2**64 - 1  # safetensors computes sizes in usize with checked_mul (ValidationOverflow)
METADATA_KEY = "__metadata__"
# Bits per element of every dtype safetensors 0.8.0 (the image's) knows: Dtype::bitsize.
DTYPE_BITS: Mapping[str, int] = MappingProxyType({
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
})


class TensorEntry(NamedTuple):  # a named tuple: a checkpoint has ~10^5 of them to build
    name: str
    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # [begin, end) in the byte buffer

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]


@dataclass(frozen=True)
class SafetensorsHeader:
    header_length: int  # N
    tensors: tuple[TensorEntry, ...]  # in offset order
    metadata: Mapping[str, str] | None = None
    data_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_bytes", self.tensors[-1].data_offsets[1] if self.tensors else 0)
        if self.metadata is not None:
            object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """The byte size of a tensor; ValueError (saying why) where safetensors refuses it: an
    element count or a bit count beyond usize, or a sub-byte dtype whose bits do not fill
    whole bytes."""
    elements = 1
    for size in shape:
        elements *= size
        if elements > USIZE_MAX:
            raise ValueError(f"shape {list(shape)} overflows a 64-bit element count")
    bits = elements * DTYPE_BITS[dtype]
    if bits > USIZE_MAX:
        raise ValueError(f"shape {list(shape)} of {dtype} overflows a 64-bit bit count")
    if bits % 8:
        raise ValueError(f"{elements} elements of {dtype} ({bits} bits) do not fill whole bytes")
    return bits // 8


def _naturals(values: object, count: int | None = None) -> bool:
    """A JSON array of integers in [0, 2^64) (``count`` of them, if given); ``type(v) is
    int`` keeps booleans out."""
    return (isinstance(values, list) and (count is None or len(values) == count)
            and all(type(value) is int for value in values)
            and (not values or (min(values) >= 0 and max(values) <= USIZE_MAX)))


def _where(shown: str, name: str) -> str:
    return f"{shown}: header[{json.dumps(name)}]"


def _tensor(name: str, entry: object, shown: str) -> TensorEntry:
    # the place is spelled only for a refusal: a checkpoint has ~10^5 tensors
    if not isinstance(entry, dict):
        raise InputError(f"{_where(shown, name)}: expected an object with dtype, shape and data_offsets")
    try:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    except KeyError:
        missing = [key for key in ("dtype", "shape", "data_offsets") if key not in entry]
        raise InputError(f"{_where(shown, name)}: missing {', '.join(missing)}") from None
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise InputError(f"{_where(shown, name)}.dtype: {json.dumps(dtype)[:40]} is not a safetensors dtype "
                         f"(expected one of {', '.join(DTYPE_BITS)})")
    if not _naturals(shape):
        raise InputError(f"{_where(shown, name)}.shape: expected an array of non-negative 64-bit integers")
    if not _naturals(offsets, 2):
        raise InputError(f"{_where(shown, name)}.data_offsets: expected [begin, end], two non-negative 64-bit "
                         "integers")
    return TensorEntry(name, dtype, tuple(shape), (offsets[0], offsets[1]))


def parse_header(header: bytes, buffer_bytes: int, shown: str) -> SafetensorsHeader:
    """The ``N`` header bytes of a file whose byte buffer (after the header) holds
    ``buffer_bytes``: every rule of the format checked, every refusal an InputError."""
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown}: the safetensors header is not UTF-8 (header byte {exc.start})") from None
    # A name given twice keeps its last entry (json's rule); the bytes of the entry it hides
    # then break the tiling below, unless the two entries are the same.
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{shown}: the safetensors header is not JSON: {exc.msg} (header byte {exc.pos})") from None
    except (RecursionError, ValueError) as exc:
        raise parse_limit_error(exc, text, f"{shown}: the safetensors header") from None
    if not isinstance(document, dict):
        raise InputError(f"{shown}: the safetensors header is not a JSON object")
    metadata = document.pop(METADATA_KEY, None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(value, str) for value in metadata.values())
    ):
        raise InputError(f"{shown}: header[{json.dumps(METADATA_KEY)}]: expected an object of strings")
    tensors = sorted((_tensor(name, entry, shown) for name, entry in document.items()),
                     key=lambda tensor: tensor.data_offsets)
    start = 0
    for tensor in tensors:
        begin, end = tensor.data_offsets
        if begin != start or end < begin:
            raise InputError(f"{_where(shown, tensor.name)}.data_offsets: [{begin}, {end}] does not start where the "
                             f"previous tensor ends ({start}): the tensors must tile the byte buffer")
        try:
            expected = tensor_bytes(tensor.dtype, tensor.shape)
        except ValueError as exc:
            raise InputError(f"{_where(shown, tensor.name)}: {exc}") from None
        if end - begin != expected:
            raise InputError(f"{_where(shown, tensor.name)}: data_offsets hold {end - begin} bytes, shape "
                             f"{list(tensor.shape)} of {tensor.dtype} is {expected} bytes")
        start = end
    if start != buffer_bytes:
        raise InputError(f"{shown}: the tensors cover {start} bytes of the {buffer_bytes}-byte buffer after the "
                         "header (the last tensor must end where the file ends)")
    return SafetensorsHeader(len(header), tuple(tensors), metadata)


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """The header of the regular file at ``path``: its length is read and judged first, and
    at most ``MAX_HEADER_BYTES`` more are read; the weights never are."""
    shown = os.fspath(path)
    fd = open_regular_file(path, "a safetensors file")
    try:
        size = os.fstat(fd).st_size
        prefix = os.pread(fd, LENGTH_BYTES, 0)
        if len(prefix) < LENGTH_BYTES:
            raise InputError(f"{shown}: {size} bytes, shorter than the 8-byte header length of a safetensors file")
        length = int.from_bytes(prefix, "little")
        if length > MAX_HEADER_BYTES:
            raise InputError(f"{shown}: header length {length} exceeds safetensors' bound of {MAX_HEADER_BYTES} "
                             "bytes; not read (not a safetensors file, or a damaged one)")
        if LENGTH_BYTES + length > size:
            raise InputError(f"{shown}: header length {length} runs past the end of the {size}-byte file")
        header = _read_exactly(fd, length, shown)
    except OSError as exc:
        raise InputError(f"{shown}: cannot read the safetensors header: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return parse_header(header, size - LENGTH_BYTES - length, shown)


def _read_exactly(fd: int, length: int, shown: str) -> bytes:
    chunks, done = [], 0
    while done < length:
        chunk = os.pread(fd, min(length - done, 1 << 24), LENGTH_BYTES + done)
        if not chunk:
            raise InputError(f"{shown}: the file ended after {done} of the header's {length} bytes (truncated meanwhile)")
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)
