"""What every part of the probe shares: error text, the log capture, the record of the
environment variables the image's code reads, and running a step in a forked child.
Runs inside the image (see ``__init__.py``): standard library only."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

STARTED = time.monotonic()  # the probe's start: its modules are imported first
# Each forked child's [start, end] in seconds after STARTED, by what it did: where the two
# cores' time went (read by bench/bench_runtime_check.py)
CHILD_SPANS: dict[str, list[float]] = {}

# A forked step's bound: half the host's default bound on the whole probe
# (check.DEFAULT_TIMEOUT, 3600 s), so that a hung child is a named failure
CHILD_TIMEOUT = 1800.0
# Beside the result: one JSON line per judged case (case_done), which the host follows
PROGRESS_FILE = "progress.jsonl"
# Keys of a case's env that were read by code running in this interpreter
ENV_READS: set[str] = set()


def track_environ_reads() -> None:
    """Record every os.environ lookup (os.getenv goes through ``get``) from here on."""
    cls = type(os.environ)
    original_getitem = cls.__getitem__
    original_contains = cls.__contains__

    def note(key: object) -> None:
        # os.environb is an _Environ too: its keys are bytes
        ENV_READS.add(key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key))

    def getitem(self: Any, key: Any) -> Any:
        note(key)
        return original_getitem(self, key)

    def contains(self: Any, key: object) -> bool:
        note(key)
        return original_contains(self, key)

    # the image's os.environ class is wrapped on purpose, to record which keys its code reads
    cls.__getitem__ = getitem  # type: ignore[method-assign]  # replacing the method is the point
    cls.__contains__ = contains  # type: ignore[method-assign]  # likewise
    # Mapping.get calls __getitem__, so os.getenv and os.environ.get are seen too.

# seconds spent in each step after the imports (where a check's time goes under emulation)
PHASE_SECONDS: dict[str, float] = {}


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken log call must not break the probe
            message = str(record.msg)
        self.records.append({"logger": record.name, "level": record.levelname, "message": message[:2000]})


CAPTURE = LogCapture()


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text[:4000]


def run_forked(producer: Callable[[], object], result_path: str) -> int:
    """Run ``producer`` (returning JSON data) in a forked child, which inherits everything
    imported so far (under qemu its translated code too), on the other core; the parent
    reads what it returned with ``forked_result``."""
    forked_at = time.monotonic()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            try:
                produced = {"value": producer()}
            except BaseException as exc:  # noqa: BLE001 - a failure is data
                produced = {"error": error_text(exc)}
            produced["env_reads"] = sorted(ENV_READS)
            produced["child_seconds"] = [round(forked_at - STARTED, 1), round(time.monotonic() - STARTED, 1)]
            with open(result_path, "w", encoding="utf-8") as handle:
                json.dump(produced, handle)
            status = 0
        finally:
            os._exit(status)
    return pid


def forked_result(what: str, pid: int, result_path: str, timeout: float = CHILD_TIMEOUT) -> dict[str, object]:
    """``{"value": ...}`` or ``{"error": ...}`` of the child ``pid``; a child that has not
    ended within ``timeout`` seconds is killed and its step named as the failure."""
    deadline = time.monotonic() + timeout
    while True:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"error": f"the child {what} did not finish within {timeout:.0f} s and was killed"}
        time.sleep(0.2)
    try:
        with open(result_path, encoding="utf-8") as handle:
            produced: dict[str, Any] = json.load(handle)
    except (OSError, ValueError):
        return {"error": f"the child {what} ended with wait status {status} and no result"}
    ENV_READS.update(produced.pop("env_reads", []))
    CHILD_SPANS[what] = produced.pop("child_seconds", [])
    return produced


def failed_steps(verdict: dict[str, object]) -> list[str]:
    """The steps of a case's verdict (and of its engine start) that did not pass, by name."""
    steps = {key: value for key, value in verdict.items() if isinstance(value, dict)}
    engine = verdict.get("engine")
    if isinstance(engine, dict):
        steps.update({f"engine.{key}": value for key, value in engine.items() if isinstance(value, dict)})
    return sorted(name for name, step in steps.items() if "ok" in step and not step["ok"])


def case_done(path: str, index: int, total: int, verdict: dict[str, object]) -> None:
    """One line per judged case appended to ``path`` (the host follows it while the probe
    runs: ``runtime check --progress``), flushed at once."""
    line = {"case": verdict.get("name"), "index": index, "total": total, "seconds": verdict.get("seconds"),
            "failed": failed_steps(verdict) if "error" not in verdict else ["probe"]}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")  # read back with json.loads, never compared

