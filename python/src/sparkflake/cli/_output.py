"""Shared printing for command modules: JSON for machines, plain lines for people."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ..core.errors import SparkflakeError
from . import _signals


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


def run_command(parse: Callable[[], argparse.Namespace]) -> int:
    """Parse (importing the command modules) and run one command. SIGINT and SIGTERM end
    it with 130 and 143, its staging cleaned, without a traceback (``_signals``)."""
    with _signals.InterruptsRaised():
        try:
            return run_handler(parse())
        except KeyboardInterrupt as exc:
            return _interrupted(exc)


def _interrupted(interrupt: KeyboardInterrupt) -> int:
    line, status = _signals.caught(interrupt)
    print(line, file=sys.stderr)
    return status


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
