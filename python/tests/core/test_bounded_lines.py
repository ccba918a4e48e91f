"""Lines read within a bound (``core/bounded_lines.py``): what a pipe from a rank's agent,
relay or receiver gives the controller. Every whole line comes back as written; a longer
one comes back cut to the bound and never costs more than the bound to hold."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.bounded_lines import LineReader, bounded_lines, keep_tail, read_line

LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8)


@given(LINES, st.booleans(), st.integers(min_value=1, max_value=50))
def test_each_line_comes_back_whole_or_cut_to_the_limit(lines, last_has_newline, limit):
    data = b"\n".join(lines) + (b"\n" if last_has_newline and lines else b"")
    got = list(bounded_lines(io.BytesIO(data), limit))
    written = re.findall(rb"[^\n]*\n|[^\n]+\Z", data)  # lines end at \n only (not \r, as splitlines)
    assert len(got) == len(written)
    for line, original in zip(got, written, strict=True):
        assert len(line) <= limit
        if len(original) <= limit:
            assert line == original  # whole, with its newline (the last one may have none)
        else:
            assert line == original[:limit] and not line.endswith(b"\n")  # cut: the rest read past


@given(LINES, st.integers(min_value=1, max_value=50), st.integers(min_value=0, max_value=200))
def test_a_total_limit_ends_the_reading_there_and_says_so(lines, line_limit, total_limit):
    data = b"".join(line + b"\n" for line in lines)
    reader = LineReader(io.BytesIO(data), line_limit, total_limit)
    got = list(reader)
    assert reader.over == (len(data) > total_limit)
    assert reader.bytes_read <= total_limit + 1
    unbounded = list(bounded_lines(io.BytesIO(data), line_limit))
    if not reader.over:
        assert got == unbounded
    else:  # the lines read whole before the limit, as they were, and nothing of the rest
        assert got == unbounded[:len(got)]
        assert sum(len(line) + 1 for line in lines[:len(got)]) <= total_limit


def test_a_line_as_long_as_the_limit_with_its_newline_is_whole_and_the_next_line_follows():
    stream = io.BytesIO(b"abc\nde\n")
    assert read_line(stream, 4) == b"abc\n" and read_line(stream, 4) == b"de\n" and read_line(stream, 4) == b""
    stream = io.BytesIO(b"abcd\nxy\n")  # the newline is the byte after the limit: cut, then the next line
    assert read_line(stream, 4) == b"abcd" and read_line(stream, 4) == b"xy\n"


def test_a_line_without_end_from_a_pipe_is_read_past_in_bounded_memory():
    # 64 MiB with no newline, then a reply: the reader never holds more than its limit
    writer = subprocess.Popen([sys.executable, "-c", (
        "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(64): os.write(1, chunk)\nos.write(1, b'\\n{\"ok\": 1}\\n')")],
        stdout=subprocess.PIPE)
    assert writer.stdout is not None
    lines = list(bounded_lines(writer.stdout, 4096))
    assert writer.wait() == 0
    assert lines == [b"x" * 4096, b'{"ok": 1}\n']


def test_a_tail_keeps_the_last_lines_each_cut():
    read_end, write_end = os.pipe()
    tail: deque[bytes] = deque(maxlen=3)
    with open(read_end, "rb") as stream:
        reader = threading.Thread(target=keep_tail, args=(stream, tail, 8))
        reader.start()
        with open(write_end, "wb") as out:
            out.write(b"".join(b"line %d and more\n" % n for n in range(1000)))
        reader.join(timeout=10)
    assert not reader.is_alive()
    assert list(tail) == [b"line 997", b"line 998", b"line 999"]
