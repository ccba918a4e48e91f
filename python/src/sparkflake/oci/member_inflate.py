"""A multi-member gzip blob inflated on every core, its bytes given on in blob order.

Inflating is most of what verifying a gzip layer costs (zlib: ~75 MB/s of blob per core
here, libdeflate ~2-3x that; sha256 ~1.2 GB/s). Our engine writes a gzip layer as members of
4 MiB of tar (``compression``), and a member can be inflated without the ones before it, so
the blob is cut into segments at what looks like a member header and the segments are
inflated by a pool of threads (``decompression``: libdeflate and zlib release the GIL).

What looks like a header may be bytes inside a member. So a segment's output is used only
when the segment before it ended exactly at a member's end (its ``Decompressor`` holds no
partial member): then the segment starts where a member starts, and its bytes are the
ones a sequential inflate gives there. Otherwise its speculative output is dropped and the
previous segment's decompressor goes on through its bytes, in order, until it ends on a
member end again. A segment cut where no header was found (a single-member blob: another
builder's, a bomb) is never inflated speculatively: it is always inflated in order. A
stream error in a segment whose output is used is the stream's error, at its place.

Memory: at most ``threads + 2`` segments of at most ``max_segment`` bytes, and per segment
``SEGMENT_PIECES`` pieces of ``decompression.PIECE_BYTES``.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .decompression import Decompressor

MEMBER_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"  # gzip, deflate, no flags, MTIME 0 (RFC 1952 2.3)
MIN_SEGMENT = 4 << 20  # ~2 of our members
MAX_SEGMENT = 8 << 20
SEGMENT_PIECES = 2
_DONE = object()  # the end of a segment's pieces (its error, if any, is on the segment)
_POLL = 0.1  # seconds between looks at the stop flag while blocked


def inflate_threads() -> int:
    """One inflating thread per core this process may run on (at most 8)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


@dataclass
class Segment:
    data: bytes
    starts_member: bool  # cut at what looks like a member header: inflated speculatively
    pieces: queue.Queue[object] = field(default_factory=lambda: queue.Queue(maxsize=SEGMENT_PIECES))
    decompressor: Decompressor | None = None
    error: ValueError | None = None
    cancel: threading.Event = field(default_factory=threading.Event)


class MemberInflater:
    """``add(chunk)`` the blob's bytes in order, then ``end()``; the plain bytes reach
    ``pass_on`` in order (from the ordering thread). ``stop`` ends every thread early.
    ``result()`` waits: None when the stream was inflated whole, else its error."""

    def __init__(
        self,
        pass_on: Callable[[bytes], None],
        stop: threading.Event,
        *,
        threads: int | None = None,
        min_segment: int = MIN_SEGMENT,
        max_segment: int = MAX_SEGMENT,
    ) -> None:
        self._pass_on = pass_on
        self._stop = stop
        self._min, self._max = min_segment, max_segment
        self._buffer = bytearray()
        self._searched = 1  # the blob's first header is the first segment's own
        self._next_starts_member = True
        count = threads or inflate_threads()
        self._order: queue.Queue[object] = queue.Queue(maxsize=count + 1)
        self._work: queue.Queue[Segment | None] = queue.Queue()
        self._error: BaseException | None = None
        self._failed = threading.Event()
        self._inflaters = [threading.Thread(target=self._inflate, daemon=True, name="inflate") for _ in range(count)]
        self._orderer = threading.Thread(target=self._give_in_order, daemon=True, name="inflate-order")
        for thread in (*self._inflaters, self._orderer):
            thread.start()

    @property
    def failed(self) -> bool:
        return self._failed.is_set()

    def add(self, chunk: bytes) -> None:
        if self._failed.is_set():
            return  # the rest of the blob is hashed, not inflated
        self._buffer += chunk
        while len(self._buffer) >= self._min:
            cut = self._buffer.find(MEMBER_HEAD, max(self._min, self._searched))
            if cut < 0 and len(self._buffer) < self._max:
                self._searched = max(self._min, len(self._buffer) - len(MEMBER_HEAD) + 1)
                return
            found = cut >= 0
            self._cut(cut if found else len(self._buffer), next_starts_member=found)

    def end(self) -> None:
        """The blob ended: its last segment, then the end."""
        if not self._failed.is_set() and self._buffer:
            self._cut(len(self._buffer), next_starts_member=False)
        self._put(self._order, _DONE)

    def abandon(self) -> None:
        """The blob could not be read on: what is cut is given on, the rest dropped."""
        self._buffer.clear()
        self._put(self._order, _DONE)

    def result(self) -> BaseException | None:
        self._orderer.join()
        for _ in self._inflaters:
            self._work.put(None)
        for thread in self._inflaters:
            thread.join()
        return self._error

    def _cut(self, at: int, *, next_starts_member: bool) -> None:
        segment = Segment(bytes(self._buffer[:at]), self._next_starts_member)
        del self._buffer[:at]
        self._searched = 1
        self._next_starts_member = next_starts_member
        if not self._put(self._order, segment):
            return
        if segment.starts_member:
            self._work.put(segment)

    def _put(self, target: queue.Queue[object], item: object, cancel: threading.Event | None = None) -> bool:
        """Put, unless told to stop while the queue is full."""
        while not self._stop.is_set() and not self._failed.is_set() and not (cancel is not None and cancel.is_set()):
            try:
                target.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _inflate(self) -> None:
        while (segment := self._work.get()) is not None:
            decompressor = Decompressor("gzip")
            try:
                for piece in decompressor.pieces(segment.data):
                    if not self._put(segment.pieces, piece, segment.cancel):
                        break
            except ValueError as exc:
                segment.error = exc
            segment.decompressor = decompressor
            self._put(segment.pieces, _DONE, segment.cancel)

    def _speculated(self, segment: Segment) -> Iterator[bytes]:
        while True:
            try:
                item = segment.pieces.get(timeout=_POLL)
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            if item is _DONE:
                return
            assert isinstance(item, bytes)
            yield item

    def _give_in_order(self) -> None:
        carry: Decompressor | None = None  # the blob starts where a member starts
        try:
            while (segment := self._next_segment()) is not None:
                if carry is None and segment.starts_member:
                    for piece in self._speculated(segment):
                        self._pass_on(piece)
                    if self._stop.is_set():
                        return
                    if segment.error is not None:
                        raise segment.error
                    assert segment.decompressor is not None
                    carry = segment.decompressor if not segment.decompressor.at_member_end else None
                    continue
                segment.cancel.set()  # its speculative output, if any, is not the stream's
                decompressor = carry or Decompressor("gzip")
                for piece in decompressor.pieces(segment.data):
                    if self._stop.is_set():
                        return
                    self._pass_on(piece)
                carry = None if decompressor.at_member_end else decompressor
            if carry is not None:
                carry.finish()
        except BaseException as exc:  # noqa: BLE001 - given to the reading thread
            self._error = exc
            self._failed.set()
            self._stop_inflaters()

    def _next_segment(self) -> Segment | None:
        while not self._stop.is_set():
            try:
                item = self._order.get(timeout=_POLL)
            except queue.Empty:
                continue
            if item is _DONE:
                return None
            assert isinstance(item, Segment)
            return item
        return None

    def _stop_inflaters(self) -> None:
        while True:
            try:
                item = self._order.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Segment):
                item.cancel.set()
