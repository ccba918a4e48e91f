"""The progress callback every long stage takes: ``(done, total, what)``, in the stage's own
unit (bytes, files, layers). Only the CLI turns it into output."""

from __future__ import annotations

from collections.abc import Callable

ProgressCallback = Callable[[int, int, str], None]
