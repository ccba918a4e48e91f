"""Shared printing for command modules: JSON for machines, plain lines for people."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from ..core.errors import SparkflakeError
from . import _signals


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")


def print_line(text: str = "") -> None:
    # A line may quote what an input holds (a checkpoint's model_type, a file name that is
    # not UTF-8): a lone surrogate is written as its escape, as stderr writes it, not raised.
    sys.stdout.write(text.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")


class Progress:
    """Progress on stderr: a one-line bar on a terminal; on anything else (a log, a pipe)
    nothing unless asked (``enabled=True``, the commands' ``--progress``), then plain lines
    a log keeps: ``build: 45% 1.2GiB/2.7GiB hashing trees``, one when the stage names
    another step, every ``LINE_STEP`` percent and at least every ``LINE_SECONDS``.

    Stages report progress through a plain callback ``(done, total, label)``; this class
    is such a callback, so stages never print. ``unit`` is ``"bytes"`` or ``"items"``.
    """

    LINE_STEP = 10
    LINE_SECONDS = 30.0

    def __init__(self, label: str, *, enabled: bool | None = None, unit: str = "bytes") -> None:
        self.label = label
        terminal = sys.stderr.isatty()
        self.bar = terminal if enabled is None else (enabled and terminal)
        self.lines = bool(enabled) and not terminal
        self.unit = unit
        self._last = -1
        self._last_line: tuple[str, int] | None = None
        self._line_at = 0.0

    @property
    def enabled(self) -> bool:
        return self.bar or self.lines

    def _amount(self, count: int) -> str:
        return human_bytes(count) if self.unit == "bytes" else str(count)

    def __call__(self, done: int, total: int, label: str | None = None) -> None:
        percent = int(done * 100 / total) if total else 100
        if self.lines:
            self._line(done, total, percent, label)
        if not self.bar:
            return
        if percent == self._last and done != total:
            return
        self._last = percent
        width = 30
        filled = int(width * percent / 100)
        bar = "#" * filled + "-" * (width - filled)
        text = f"\r{label or self.label} [{bar}] {percent:3d}% {self._amount(done)}/{self._amount(total)}"
        sys.stderr.write(text)
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def _line(self, done: int, total: int, percent: int, label: str | None) -> None:
        step = label or ""
        now = time.monotonic()
        previous = self._last_line
        due = (
            previous is None
            or step != previous[0]
            or percent // self.LINE_STEP != previous[1] // self.LINE_STEP
            or (done >= total and previous[1] != 100)
            or now - self._line_at >= self.LINE_SECONDS
        )
        if not due or (previous == (step, percent) and now - self._line_at < self.LINE_SECONDS):
            return
        self._last_line, self._line_at = (step, percent), now
        what = f" {step}" if step and step != self.label else ""
        sys.stderr.write(f"{self.label}: {percent}% {self._amount(done)}/{self._amount(total)}{what}\n")
        sys.stderr.flush()

    def phase(self, name: str) -> None:
        """A step without a count (``runtime check: probe``): one line, or one bar label."""
        if self.lines or self.bar:
            sys.stderr.write(f"{self.label}: {name}\n")
            sys.stderr.flush()


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}GiB"


def run_command(parse: Callable[[], argparse.Namespace], *, process_ends: bool = False) -> int:
    """Parse (importing the command modules) and run one command. SIGINT and SIGTERM end
    it with 130 and 143, its staging cleaned, without a traceback (``_signals``);
    ``process_ends``: the command is the process's own, which ends after it."""
    with _signals.InterruptsRaised(process_ends=process_ends):
        try:
            return run_handler(parse())
        except BaseException as exc:  # noqa: BLE001 - an interrupt, or what it left behind
            interrupt = _signals.interrupt_behind(exc)
            if interrupt is None:
                raise
            return _interrupted(interrupt)


def _interrupted(interrupt: KeyboardInterrupt) -> int:
    """The interrupt's line, then what the workflow it cut noted of the state it left
    (``add_note``: e.g. the ranks ``service down`` had not stopped)."""
    line, status = _signals.caught(interrupt)
    print(line, file=sys.stderr)
    for note in getattr(interrupt, "__notes__", ()):
        print(f"sparkflake: {note}", file=sys.stderr)
    return status


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action="store_true",
                        help="progress on stderr as plain lines when it is not a terminal (a log); a bar on a terminal")


def progress_for(label: str, args: argparse.Namespace, unit: str = "bytes") -> Progress:
    """The command's progress: a bar on a terminal; lines in a log with --progress."""
    return Progress(label, enabled=True if getattr(args, "progress", False) else None, unit=unit)


def run_handler(args: argparse.Namespace) -> int:
    """Run a parsed command; every refusal is one line on stderr and its exit code, never a
    traceback. An error raised while an interrupt unwound (library code cut at an unlucky
    point: a thread pool whose manager thread never started cannot be joined) is that
    interrupt's."""
    try:
        return int(args.handler(args) or 0)
    except BaseException as exc:  # noqa: BLE001 - sorted out below, the rest re-raised
        return _refusal(exc)


def _refusal(exc: BaseException) -> int:
    interrupt = _signals.interrupt_behind(exc)
    if interrupt is not None:
        return _interrupted(interrupt)
    if isinstance(exc, SparkflakeError):
        print(f"sparkflake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):
        return 0
    if isinstance(exc, OSError):
        # What a stage did not name itself (a full disk, a path that cannot be made):
        # the file and the reason, not a traceback.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"sparkflake: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    raise exc
