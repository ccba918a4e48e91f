"""SIGINT and SIGTERM held back while a step must not be cut in half.

The CLI raises an interrupt as an exception wherever the main thread is
(``cli/_signals.py``). A directory made for a run and then named in a variable that a
``finally`` removes has a gap between the two: an interrupt landing there leaves the
directory behind. Inside ``interrupts_held`` the two signals are blocked at the kernel, so
they stay pending; they are delivered when the block ends, where the caller's ``finally``
already covers what was made."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

HELD = frozenset({signal.SIGINT, signal.SIGTERM})


class _Hold:
    """The holds in force in this process, and the signals they deferred. The kernel mask
    alone is not enough: a process-directed signal that the main thread blocks is given to
    another thread (a pool's worker), and CPython then runs the handler in the main thread
    anyway, at its next instruction, inside the hold. The CLI's handler asks ``defer``
    first (a worker process forked inside ``WorkerPool.submit``'s hold was left waiting for
    work no manager would send, and the interpreter's exit waited for it for ever)."""

    depth = 0
    pending: list[int] = []


def defer(signum: int) -> bool:
    """For the CLI's signal handler: True when a hold is in force, and ``signum`` is then
    delivered again when the outermost hold ends."""
    if _Hold.depth == 0:
        return False
    if signum not in _Hold.pending:
        _Hold.pending.append(signum)
    return True


def _forget_holds() -> None:
    # a forked child (a pool's worker) is not inside its parent's hold
    _Hold.depth, _Hold.pending = 0, []


os.register_at_fork(after_in_child=_forget_holds)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Block SIGINT and SIGTERM for the body (main thread only: signals are delivered to it
    and only it runs Python's handlers); the mask before is restored after, which delivers
    what arrived meanwhile, as does the handler's deferral (``defer``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Hold.depth += 1  # before the mask: a handler that runs from here on defers
    previous: set[int | signal.Signals] | None = None
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        yield
    finally:
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # still held: a delivery here defers
        _Hold.depth -= 1
        pending = _Hold.pending if _Hold.depth == 0 else []
        if _Hold.depth == 0:
            _Hold.pending = []
        for signum in pending:
            signal.raise_signal(signum)  # no hold now: the handler raises here, after the body
