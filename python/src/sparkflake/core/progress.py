"""Progress as one object. A long stage takes a ``ProgressCallback``: ``(done, total, what)``,
in the stage's own unit (bytes, files, layers). Every workflow takes a ``Progress``, which is
such a callback and also shows steps without a count (``phase``), and hands it to the stages
it calls. Only the CLI turns either into output (``cli._output.Progress``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

ProgressCallback = Callable[[int, int, str], None]


class Progress(Protocol):
    def __call__(self, done: int, total: int, what: str, /) -> None:
        """``done`` of ``total`` in the stage's own unit (bytes, files, layers)."""

    def phase(self, name: str, /) -> None:
        """A step without a count (the runtime check's ``probe``)."""


def report_phase(progress: Progress | None, name: str) -> None:
    """A step without a count, when there is a progress object to show it."""
    if progress is not None:
        progress.phase(name)


class BytesProgress:
    """A callback for the bytes of one item among several: each call adds its bytes to the
    item's count and reports ``base + count`` of ``total`` (capped at ``total``)."""

    def __init__(self, progress: ProgressCallback | None, base: int, total: int, what: str) -> None:
        self.progress, self.base, self.total, self.what = progress, base, total, what
        self.seen = 0

    def __call__(self, count: int) -> None:
        self.seen += count
        if self.progress is not None:
            self.progress(min(self.total, self.base + self.seen), self.total, self.what)
