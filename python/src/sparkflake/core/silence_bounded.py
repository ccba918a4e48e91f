"""A child process run to its end unless it falls silent. A tool that waits without end (on
a lock another process holds, on a hung disk) writes nothing, while one at work prints as it
goes (skopeo and ``podman load`` a line as each blob starts and ends), so silence, not the
run's length, is what tells them apart: a long import is not ended, a stuck one is."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from .bounded_lines import LineReader
from .watchdog import Watchdog

LINE_LIMIT = 64 << 10  # a longer line is cut: a tool's progress lines are short
OUTPUT_LIMIT = 16 << 20  # kept of each stream; past it the child's output is read and dropped


@dataclass(frozen=True)
class BoundedRun:
    returncode: int
    stdout: str
    stderr: str
    silent_for: float | None = None  # the silence it was ended after; None: it ended by itself


def run_bounded_by_silence(
    argv: Sequence[str], silence_seconds: float, env: Mapping[str, str] | None = None,
    on_line: Callable[[bytes], None] | None = None,
) -> BoundedRun:
    """Run ``argv`` (stdin empty; ``env``, else this process's environment) to its end; if
    neither stdout nor stderr gives a line for ``silence_seconds``, end it (SIGKILL) and say
    so in ``silent_for``. ``on_line`` is given each line of either stream as it comes (from
    a reader thread). Raises OSError when the program cannot be started."""
    process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None and process.stderr is not None
    streams = {"stdout": process.stdout, "stderr": process.stderr}
    kept: dict[str, list[bytes]] = {name: [] for name in streams}
    readers: dict[str, threading.Thread] = {}
    try:
        with Watchdog(silence_seconds, process.kill) as watchdog:
            for name, stream in streams.items():
                readers[name] = threading.Thread(target=_read, args=(stream, kept[name], watchdog, on_line),
                                                 daemon=True)
                readers[name].start()
            returncode = process.wait()
            for reader in readers.values():
                # the pipes end with the child, unless something it started holds them
                reader.join(timeout=5)
            # ended by the watchdog, not a child that ended by itself as the silence ran out
            silenced = watchdog.fired and returncode == -signal.SIGKILL
    except BaseException:  # an interrupt: the child does not outlive the run that started it
        process.kill()
        process.wait()
        raise
    finally:
        for name, stream in streams.items():
            if name not in readers or not readers[name].is_alive():  # closing under a reader blocks
                stream.close()
    return BoundedRun(returncode, _text(kept["stdout"]), _text(kept["stderr"]),
                      silent_for=silence_seconds if silenced else None)


def _read(stream: IO[bytes], kept: list[bytes], watchdog: Watchdog, on_line: Callable[[bytes], None] | None) -> None:
    size = 0
    for line in LineReader(stream, LINE_LIMIT):
        watchdog.feed()
        if on_line is not None:
            on_line(line)
        if size + len(line) <= OUTPUT_LIMIT:
            kept.append(line)
            size += len(line)


def _text(lines: list[bytes]) -> str:
    return b"".join(lines).decode("utf-8", "replace")

