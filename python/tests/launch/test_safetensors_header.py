"""The safetensors header reader: round trip with a writer of the format, the reference
implementation's own test vectors, and every truncation or garbage refused as bad input
with bounded reads."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from fixtures.safetensors_files import safetensors_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.safetensors_header import (
    DTYPE_BITS,
    MAX_HEADER_BYTES,
    parse_header,
    read_header,
    tensor_bytes,
)

# huggingface/safetensors, safetensors/src/tensor.rs test_serialization: the exact bytes
# its serializer writes for one F32 tensor "attn.0" of shape [1, 2, 3] holding 0.0..5.0.
REFERENCE_FILE = bytes([
    64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100,
    116, 121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34,
    58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102, 115,
    101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0, 0, 0, 0, 0, 128, 63,
    0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64,
])
# the same file's test_empty with metadata {"framework": "pt"} and no tensor
REFERENCE_EMPTY = bytes([
    40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95,
    95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112,
    116, 34, 125, 125, 32, 32, 32, 32, 32,
])


def _file(tmp_path: Path, content: bytes, name: str = "model.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_the_reference_implementations_own_files_are_read(tmp_path):
    header = read_header(_file(tmp_path, REFERENCE_FILE))
    [tensor] = header.tensors
    assert (tensor.name, tensor.dtype, tensor.shape, tensor.data_offsets) == ("attn.0", "F32", (1, 2, 3), (0, 24))
    assert header.header_length == 64 and header.data_bytes == 24 and header.metadata is None
    empty = read_header(_file(tmp_path, REFERENCE_EMPTY, "empty.safetensors"))
    assert empty.tensors == () and dict(empty.metadata) == {"framework": "pt"}
    # the fixture writer writes what the reference serializer writes
    assert safetensors_bytes([("attn.0", "F32", (1, 2, 3))])[:72] == REFERENCE_FILE[:72]
    assert safetensors_bytes([], {"framework": "pt"}) == REFERENCE_EMPTY


_dtype = st.sampled_from(sorted(DTYPE_BITS))
_shape = st.lists(st.integers(0, 6), max_size=3).map(tuple)
_name = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda name: name != "__metadata__")
_tensors = st.lists(st.tuples(_name, _dtype, _shape), max_size=6, unique_by=lambda spec: spec[0]).filter(
    lambda specs: all(_whole_bytes(spec) for spec in specs))
_metadata = st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))


def _whole_bytes(spec) -> bool:
    elements = 1
    for size in spec[2]:
        elements *= size
    return elements * DTYPE_BITS[spec[1]] % 8 == 0


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150)
@given(tensors=_tensors, metadata=_metadata)
def test_round_trip_with_the_writer(tmp_path, tensors, metadata):
    header = read_header(_file(tmp_path, safetensors_bytes(tensors, metadata)))
    assert {(t.name, t.dtype, t.shape) for t in header.tensors} == set(tensors)
    assert len(header.tensors) == len(tensors)
    assert (dict(header.metadata) if header.metadata is not None else None) == metadata
    assert header.data_bytes == sum(tensor_bytes(dtype, shape) for _, dtype, shape in tensors)
    for tensor in header.tensors:
        assert tensor.nbytes == tensor_bytes(tensor.dtype, tensor.shape)


_VALID = safetensors_bytes([("a", "BF16", (3, 2)), ("b.weight", "F4", (4,)), ("c", "F8_E4M3", (2, 2))],
                           {"format": "pt"})


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(_VALID) - 1))
def test_every_truncation_is_refused_cleanly(tmp_path, cut):
    with pytest.raises(InputError) as refused:
        read_header(_file(tmp_path, _VALID[:cut]))
    assert str(refused.value).startswith(str(tmp_path / "model.safetensors") + ": ")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)
@given(at=st.integers(0, len(_VALID) - 1), value=st.integers(0, 255))
def test_a_changed_byte_is_read_or_refused_never_a_traceback(tmp_path, at, value):
    changed = bytearray(_VALID)
    changed[at] = value
    try:
        header = read_header(_file(tmp_path, bytes(changed)))
    except InputError as refused:
        assert str(refused).startswith(str(tmp_path / "model.safetensors") + ": ")
    else:  # whatever still parses obeys the format
        assert header.data_bytes == len(changed) - 8 - header.header_length


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)
@given(content=st.one_of(
    st.binary(max_size=64),
    st.builds(lambda body, pad: struct.pack("<Q", len(body)) + body + pad, st.binary(max_size=48), st.binary(max_size=8)),
    st.builds(lambda text: struct.pack("<Q", len(text.encode())) + text.encode(), st.text(max_size=48)),
))
def test_garbage_is_refused_as_bad_input(tmp_path, content):
    try:
        header = read_header(_file(tmp_path, content))
    except InputError as refused:
        assert str(refused).startswith(str(tmp_path / "model.safetensors") + ": ")
    else:  # only a well-formed file: its tensors tile exactly the bytes after the header
        assert header.data_bytes == len(content) - 8 - header.header_length


@pytest.mark.parametrize(("header", "expected"), [
    (b'{"t":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}', 'header["t"].dtype: "Q9" is not a safetensors dtype'),
    (b'{"t":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}', 'header["t"]: data_offsets hold 1 bytes, shape [2] of U8 is 2 bytes'),
    (b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', 'header["t"].data_offsets: [1, 2] does not start where'),
    (b'{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}', 'header["t"]: 3 elements of F4 (12 bits) do not fill whole bytes'),
    (b'{"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}', "overflows a 64-bit element count"),
    (b'{"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', 'header["t"].shape: expected an array of non-negative'),
    (b'{"t":{"dtype":"U8","shape":[1]}}', 'header["t"]: missing data_offsets'),
    (b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
     'header["t"].data_offsets: [1, 2] does not start where the previous tensor ends (0)'),
    (b'{"__metadata__":{"a":1}}', 'header["__metadata__"]: expected an object of strings'),
    (b'[1]', "the safetensors header is not a JSON object"),
    (b'{"t":', "the safetensors header is not JSON"),
    (b'\xff{}', "the safetensors header is not UTF-8 (header byte 0)"),
    (b'[' * 100_000, "nested too deeply"),
])
def test_malformed_headers_name_the_tensor_and_the_rule(header, expected):
    with pytest.raises(InputError) as refused:
        parse_header(header, 1, "w.safetensors")
    assert str(refused.value).startswith("w.safetensors: ") and expected in str(refused.value), str(refused.value)


def test_the_buffer_must_end_where_the_last_tensor_ends():
    with pytest.raises(InputError, match=r"the tensors cover 1 bytes of the 2-byte buffer"):
        parse_header(b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 2, "w.safetensors")


def test_a_huge_header_length_is_refused_before_it_is_read(tmp_path):
    # a sparse file larger than the bound claims a header of 2^63 bytes, then of one byte
    # past the bound: neither is read (an unbounded reader would try to allocate it)
    path = tmp_path / "huge.safetensors"
    for length in (2**63, MAX_HEADER_BYTES + 1):
        with open(path, "wb") as handle:
            handle.write(struct.pack("<Q", length))
            handle.truncate(MAX_HEADER_BYTES + 64)
        with pytest.raises(InputError) as refused:
            read_header(path)
        assert f"header length {length} exceeds safetensors' bound of {MAX_HEADER_BYTES} bytes; not read" in str(refused.value)
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(InputError, match=r"header length 1000 runs past the end of the 10-byte file"):
        read_header(path)


def test_only_regular_files_are_read(tmp_path):
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"fifo.safetensors: is a FIFO, expected a safetensors file"):
        read_header(fifo)
    with pytest.raises(InputError, match=r"is a character device"):
        read_header("/dev/zero")
    with pytest.raises(InputError, match=r"is a directory"):
        read_header(tmp_path)
