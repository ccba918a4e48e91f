"""Shared printing for command modules: JSON for machines, plain lines for people."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..core.errors import SparkflakeError


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")


def print_line(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")


class Progress:
    """A one-line progress bar on stderr (only when stderr is a terminal, or forced).

    Stages report progress through a plain callback ``(done, total, label)``; this class
    is such a callback, so stages never print.
    """

    def __init__(self, label: str, *, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._last = -1

    def __call__(self, done: int, total: int, label: str | None = None) -> None:
        if not self.enabled:
            return
        percent = int(done * 100 / total) if total else 100
        if percent == self._last and done != total:
            return
        self._last = percent
        width = 30
        filled = int(width * percent / 100)
        bar = "#" * filled + "-" * (width - filled)
        text = f"\r{label or self.label} [{bar}] {percent:3d}% {_human(done)}/{_human(total)}"
        sys.stderr.write(text)
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _human(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}GiB"


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout``, systemd and ``kill`` send), raised where the command is,
    as SIGINT raises KeyboardInterrupt: every ``except BaseException`` and ``finally`` on
    the way out runs, so staging directories go and the previous output stays."""


_EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal, as a shell reports it
_unwinding: list[int] = []  # the signal whose exception is on its way out


def _raise_interrupt(signum: int, _frame: object) -> None:
    if _unwinding:
        return  # a second signal would cut the first one's cleanup short
    _unwinding.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _swallowed(unraisable: Any, previous: Callable[[Any], None]) -> None:
    """``sys.unraisablehook``: an interrupt raised where Python cannot propagate it (a
    ``__del__``, an at-fork hook of ``logging``) is not printed but sent again, 10 ms later,
    to land where it can."""
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and _unwinding):
        previous(unraisable)
        return
    signum = _unwinding.pop()
    threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """SIGINT and SIGTERM raise in the main thread for the duration of the block; the
    previous handlers come back after it (the CLI runs in-process in tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, _raise_interrupt) for number in _EXIT_STATUS}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: _swallowed(unraisable, previous_hook)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = previous_hook
        _unwinding.clear()


def _interrupted(exc: KeyboardInterrupt) -> int:
    """The line and exit status of an interrupt, wherever it came."""
    print("sparkflake: terminated" if isinstance(exc, Terminated) else "sparkflake: interrupted", file=sys.stderr)
    return _EXIT_STATUS[signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT]


def run_command(parse: Callable[[], argparse.Namespace]) -> int:
    """Parse (importing the command modules) and run one command. SIGINT and SIGTERM, from
    here on, end it with 130 and 143, its staging cleaned, without a traceback."""
    with interrupts_raised():
        try:
            return run_handler(parse())
        except KeyboardInterrupt as exc:
            return _interrupted(exc)


def run_handler(args: argparse.Namespace) -> int:
    """Run a parsed command; every refusal is one line on stderr and its exit code, never a
    traceback."""
    try:
        return int(args.handler(args) or 0)
    except SparkflakeError as exc:
        print(f"sparkflake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # What a stage did not name itself (a full disk, a path that cannot be made):
        # the file and the reason, not a traceback.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"sparkflake: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
