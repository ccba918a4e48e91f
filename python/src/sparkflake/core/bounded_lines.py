"""Lines read from a pipe within bounds: a peer that writes a line without end (no newline)
costs at most ``line_limit`` bytes of the reader's memory, and with ``total_limit`` one that
writes without end is read no further than that. ``readline()`` and ``for line in stream``
hold a whole line, however long."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import IO


class LineReader:
    """The lines of ``stream``, each with its newline; a line longer than ``line_limit``
    bytes comes back cut to its first ``line_limit`` bytes, without a newline, the rest of
    it read past. With ``total_limit``, once more than that many bytes were read in all
    (cut lines' rest included) the reader ends, and ``over`` says so."""

    def __init__(self, stream: IO[bytes], line_limit: int, total_limit: int | None = None) -> None:
        self.stream = stream
        self.line_limit = line_limit
        self.total_limit = total_limit
        self.bytes_read = 0
        self.over = False

    def read_line(self) -> bytes:
        """The next line (``b""`` at the end of the stream, or once ``over``)."""
        line = self._read(self.line_limit)
        if len(line) == self.line_limit and not line.endswith(b"\n"):
            while True:  # cut: the rest of it, ``line_limit`` bytes at a time
                rest = self._read(self.line_limit)
                if not rest or rest.endswith(b"\n"):
                    break
        return b"" if self.over else line  # a line whose rest passed the total is not given

    def __iter__(self) -> Iterator[bytes]:
        while line := self.read_line():
            yield line

    def _read(self, size: int) -> bytes:
        if self.over:
            return b""
        if self.total_limit is not None:
            size = min(size, self.total_limit + 1 - self.bytes_read)
        # readline(size) returns fewer than size bytes only at a newline or the stream's end
        chunk = self.stream.readline(size)
        self.bytes_read += len(chunk)
        if self.total_limit is not None and self.bytes_read > self.total_limit:
            self.over = True
            return b""
        return chunk


def read_line(stream: IO[bytes], limit: int) -> bytes:
    """The next line of ``stream``, cut to ``limit`` bytes (``LineReader``)."""
    return LineReader(stream, limit).read_line()


def bounded_lines(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """The lines of ``stream`` to its end, each cut to ``limit`` bytes (``LineReader``)."""
    return iter(LineReader(stream, limit))


def keep_tail(stream: IO[bytes], tail: deque[bytes], limit: int) -> None:
    """Read ``stream`` to its end, keeping its last lines in ``tail`` (a deque with a
    ``maxlen``), each cut to ``limit`` bytes: what a thread draining a child's stderr keeps."""
    tail.extend(bounded_lines(stream, limit))
