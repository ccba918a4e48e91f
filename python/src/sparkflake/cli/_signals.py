"""SIGINT and SIGTERM for the CLI: one path out for both, without a traceback.

SIGTERM (what ``timeout``, systemd and ``kill`` send) is raised where the command is, as
SIGINT is: every ``except BaseException`` and ``finally`` on the way out runs, so staging
directories go and the previous output stays; the command exits 143 (SIGINT: 130), as a
shell reports a process ended by the signal.

From the import of ``sparkflake.cli`` (the console script's first line) until a command
runs, an interrupt ends the process at once with that status and one line: nothing has
been written yet. This module imports only modules the interpreter has loaded before it
runs any code of ours (``_signal``, ``_thread``, ``os``, ``sys``, ``_collections_abc``), so the handlers are in
place before the rest of the CLI is imported; only what the interpreter does before that
(under heavy load a few hundred milliseconds) is outside them.

While a command runs (``InterruptsRaised``) the signal is raised; a second one is ignored
while the first unwinds, so the cleanup is not cut short. Python cannot raise everywhere:
an exception from a handler that lands in a ``__del__`` or an at-fork hook (``logging``
registers one) is "ignored" and printed; such an interrupt is not printed but delivered
again 10 ms later (``_thread.interrupt_main``), where it can land.
"""

from __future__ import annotations

import _signal
import _thread
import os
import sys
from _collections_abc import Callable  # collections.abc's own module, which os has loaded

EXIT_STATUS = {_signal.SIGINT: 130, _signal.SIGTERM: 143}  # 128 + the signal


class Interrupted(KeyboardInterrupt):
    """SIGINT. A subclass, not KeyboardInterrupt itself: CPython remembers a bare
    KeyboardInterrupt that leaves code run by ``exec`` of a string (dataclasses make
    their methods so) and then ends the process by SIGINT, whatever status we return."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like SIGINT."""


class _State:
    running = False  # a command runs: raise, do not exit
    unwinding: int | None = None  # the signal whose exception is on its way out
    swallowed = False  # that exception landed where Python could not raise it
    handled = False  # the command's caller caught it
    # cancels the timer that delivers a swallowed interrupt again (threading is imported
    # only when one is made)
    cancel_redelivery: Callable[[], None] | None = None


_STATE = _State()
_BEFORE_IMPORT: dict[int, object] = {}


def caught(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """The command's caller caught ``interrupt``: its line and exit status. A delivery
    still pending is not needed any more."""
    _STATE.handled = True
    if isinstance(interrupt, Terminated):
        return "sparkflake: terminated", EXIT_STATUS[_signal.SIGTERM]
    return "sparkflake: interrupted", EXIT_STATUS[_signal.SIGINT]


def interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """``error`` if it is an interrupt, else the interrupt it was raised while handling
    (its ``__context__``/``__cause__`` chain), else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _on_signal(signum: int, _frame: object) -> None:
    if not _STATE.running:
        os.write(2, b"sparkflake: interrupted\n" if signum == _signal.SIGINT else b"sparkflake: terminated\n")
        os._exit(EXIT_STATUS[signum])
    if _STATE.handled or (_STATE.unwinding is not None and not _STATE.swallowed):
        return
    # a step that must not be cut in half holds interrupts (core.interrupts): it gets this
    # one when it ends; looked up, not imported, so this module still imports nothing new
    holds = sys.modules.get("sparkflake.core.interrupts")
    if holds is not None and holds.defer(signum):
        return
    _STATE.unwinding, _STATE.swallowed = signum, False
    raise Terminated() if signum == _signal.SIGTERM else Interrupted()


def _on_unraisable(unraisable: sys.UnraisableHookArgs, previous: Callable[[sys.UnraisableHookArgs], object]) -> None:
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and _STATE.unwinding is not None):
        previous(unraisable)
        return
    import threading

    _STATE.swallowed = True
    redelivery = threading.Timer(0.01, _thread.interrupt_main, (_STATE.unwinding,))
    _STATE.cancel_redelivery = redelivery.cancel
    redelivery.start()


def install() -> None:
    """Exit quietly on SIGINT and SIGTERM until a command runs (main thread only)."""
    try:
        for number in EXIT_STATUS:
            _BEFORE_IMPORT.setdefault(number, _signal.signal(number, _on_signal))
    except ValueError:  # imported outside the main thread: leave the handlers alone
        pass


class InterruptsRaised:
    """``with InterruptsRaised():`` SIGINT and SIGTERM raise in the main thread for the
    duration of the block; then the handlers from before ``sparkflake.cli`` was imported
    come back (the CLI runs in-process in tests). ``process_ends=True``: the block runs the
    process's own command line, which ends when it is done; the quiet exit stays until
    then (Python's own SIGINT handler, put back, raised KeyboardInterrupt in the
    interpreter's shutdown, `Exception ignored in: <module 'threading'>`, after a command
    that had printed everything)."""

    def __init__(self, *, process_ends: bool = False) -> None:
        self._process_ends = process_ends

    def __enter__(self) -> None:
        import threading

        self._previous: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = {number: _signal.signal(number, _on_signal) for number in EXIT_STATUS}
        self._hook = sys.unraisablehook
        sys.unraisablehook = lambda unraisable: _on_unraisable(unraisable, self._hook)
        _STATE.running, _STATE.unwinding, _STATE.swallowed, _STATE.handled = True, None, False, False

    def __exit__(self, kind: type[BaseException] | None, value: object, traceback: object) -> None:
        if not self._previous:
            return
        _STATE.running = False
        if _STATE.cancel_redelivery is not None:
            _STATE.cancel_redelivery()
        for number, handler in self._previous.items():
            _signal.signal(number, _on_signal if self._process_ends else _BEFORE_IMPORT.get(number, handler))
        sys.unraisablehook = self._hook
