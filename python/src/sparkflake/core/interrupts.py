"""SIGINT and SIGTERM held back while a step must not be cut in half.

The CLI raises an interrupt as an exception wherever the main thread is
(``cli/_signals.py``). A directory made for a run and then named in a variable that a
``finally`` removes has a gap between the two: an interrupt landing there leaves the
directory behind. Inside ``interrupts_held`` the two signals are blocked at the kernel, so
they stay pending; they are delivered when the block ends, where the caller's ``finally``
already covers what was made."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Block SIGINT and SIGTERM for the body (main thread only: signals are delivered to it
    and only it runs Python's handlers); the mask before is restored after, which delivers
    what arrived meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
