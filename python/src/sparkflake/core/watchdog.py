"""A deadline that moves with progress: a peer that stops answering without closing its end
(a process hung on a healthy host, whose connection keepalives still answer) blocks a read
or a write for ever; a watchdog that nobody feeds for ``seconds`` ends it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType


class Watchdog:
    """Calls ``on_silence`` once, from a thread of its own, when ``feed`` was not called for
    ``seconds`` (counted from the start); ``fired`` then says so. ``stop`` (or leaving the
    ``with`` block) ends the watch."""

    def __init__(self, seconds: float, on_silence: Callable[[], None]) -> None:
        self.seconds = seconds
        self.fired = False
        self._on_silence = on_silence
        self._fed = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def feed(self) -> None:
        self._fed = time.monotonic()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _watch(self) -> None:
        # wake when the silence would be long enough if nothing is fed meanwhile
        while not self._stopped.wait(max(0.0, self._fed + self.seconds - time.monotonic())):
            if time.monotonic() - self._fed >= self.seconds:
                self.fired = True
                self._on_silence()
                return
