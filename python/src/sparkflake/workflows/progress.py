"""Progress as one object: what every workflow takes and hands to the stages it calls.

A stage reports counted work through the object's call ``(done, total, what)`` (so the
object is a ``core.progress.ProgressCallback`` as well) and a step without a count through
``phase``; the CLI's ``cli._output.Progress`` is the one that shows it. A workflow never
prints: without a progress object (``None``) nothing is reported.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, done: int, total: int, what: str, /) -> None:
        """``done`` of ``total`` in the stage's own unit (bytes, files, layers)."""

    def phase(self, name: str, /) -> None:
        """A step without a count (the runtime check's ``probe``)."""
