"""Bounded line reading (``core.bounded_lines.LineReader``/``read_line``/``bounded_lines``):
the lines given are the stream's lines (``bytes.splitlines(keepends=True)``) each cut to
``line_limit`` bytes, in order; with ``total_limit`` the reader ends once more than that
was read, never asking the stream for more than ``total_limit + 1`` bytes, and never
holding more than ``line_limit`` bytes of a line; and one line written by the fan-out
agent's ``emit`` (canonical JSON) is read back whole by the relay (``_read_json_line``),
anything else is no document, never an exception."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.bounded_lines import LineReader, bounded_lines, read_line
from sparkflake.core.canonical_json import canonical_json_bytes
from sparkflake.distribute.relay import _read_json_line

pytestmark = pytest.mark.core

_data = st.lists(st.binary(max_size=30).map(lambda chunk: chunk.replace(b"\n", b"")) | st.just(b""), max_size=8).map(
    lambda parts: b"\n".join(parts)) | st.binary(max_size=120)


def _lines(data: bytes) -> list[bytes]:
    """The stream's lines as readline splits them (at b"\\n" only)."""
    return [line for line in io.BytesIO(data)]


class _Counting(io.BytesIO):
    """A stream that records the largest readline it was asked for and the bytes it gave."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.largest = 0

    def readline(self, size: int | None = -1) -> bytes:
        assert size is not None and size > 0  # never an unbounded readline
        self.largest = max(self.largest, size)
        return super().readline(size)


@given(_data, st.integers(1, 40))
def test_the_lines_are_the_streams_lines_cut_to_the_limit(data: bytes, limit: int) -> None:
    stream = _Counting(data)
    assert list(bounded_lines(stream, limit)) == [line[:limit] for line in _lines(data)]
    assert stream.largest <= limit
    assert read_line(io.BytesIO(data), limit) == (_lines(data) or [b""])[0][:limit]


@given(_data, st.integers(1, 40), st.integers(0, 150))
def test_a_total_limit_ends_the_reader_where_it_is_passed(data: bytes, limit: int, total: int) -> None:
    stream = _Counting(data)
    reader = LineReader(stream, limit, total)
    got = list(reader)
    assert stream.tell() <= total + 1 and reader.bytes_read == stream.tell()
    assert reader.over == (len(data) > total)
    # what was given: the whole lines (cut) that ended within the total, in order
    expected, consumed = [], 0
    for line in _lines(data):
        consumed += len(line)
        if consumed > total:
            break
        expected.append(line[:limit])
    assert got == expected


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=10)


@given(st.dictionaries(st.text(max_size=8), _json, max_size=4), st.binary(max_size=40))
def test_an_emitted_line_is_read_back_by_the_relay(document, after) -> None:
    line = canonical_json_bytes(document) + b"\n"  # what agent_protocol.emit writes
    stream = io.BytesIO(line + after)
    assert _read_json_line(stream) == document
    assert stream.tell() == len(line)


@given(st.binary(max_size=80) | _json.map(lambda value: json.dumps(value).encode()) | st.just(b"[" * 5000))
def test_any_other_line_is_no_document(raw: bytes) -> None:
    first = (_lines(raw) or [b""])[0]
    try:
        parsed = json.loads(first)
    except (ValueError, RecursionError):
        parsed = None
    assert _read_json_line(io.BytesIO(raw)) == (parsed if isinstance(parsed, dict) else None)
