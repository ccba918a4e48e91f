"""The progress callback every long stage takes: ``(done, total, what)``, in the stage's own
unit (bytes, files, layers). Only the CLI turns it into output."""

from __future__ import annotations

from collections.abc import Callable

ProgressCallback = Callable[[int, int, str], None]


def report_phase(progress: ProgressCallback | None, name: str) -> None:
    """A step without a count (the runtime check's ``probe``), for a callback that shows
    steps (the CLI's ``Progress.phase``); other callbacks ignore it."""
    show = getattr(progress, "phase", None)
    if show is not None:
        show(name)


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
