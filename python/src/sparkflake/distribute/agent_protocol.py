"""The protocol of the per-rank programs the controller starts over SSH (fan-out's
distribute/agent.py, the service's service/agent.py): stdout is one JSON object per line,
the last one the result; a refusal is such a line and its exit code. Kept apart from the
agents so that one does not import the other's stage (the service agent starts in a
fraction of fan-out's import time)."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ..core import interrupts
from ..core.canonical_json import canonical_json_bytes
from ..core.errors import SparkflakeError

# The longest line a reader of these programs takes (a longer one is cut, and so no JSON):
# a last line with a result for each file of a plan of thousands fits many times over.
LINE_LIMIT = 16 << 20


def emit(document: dict[str, Any]) -> None:
    sys.stdout.write(canonical_json_bytes(document).decode() + "\n")
    sys.stdout.flush()


def controller_gone(wait: float | None = 0.0) -> bool:
    """Whether the SSH session that started this agent has ended (the controller was
    interrupted, or killed its session): stdout has no reader any more, as sshd closes its
    end when the client goes, signalling nothing. stdin cannot say it: a controller with
    nothing to send closes it at once. ``wait``: seconds to wait for it (None: until then).
    False when stdout is no pipe or socket (not started by sshd)."""
    with contextlib.suppress(OSError):
        mode = os.fstat(1).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            poller = select.poll()
            poller.register(1, 0)  # no events asked for: only POLLERR (a pipe) or POLLHUP (a socket) comes
            events = poller.poll(None if wait is None else int(wait * 1000))
            return any(event & (select.POLLERR | select.POLLHUP) for _, event in events)
    return False


def end_with_the_session() -> None:
    """Make this agent end, with everything it started, once the controller's end of its
    stdout is closed: the SSH connection dropped, or the controller was interrupted and
    ended its ssh. sshd then closes the session's pipes but signals nothing, so an agent that
    reads no more input (a pull, an import, a start) would otherwise finish work nobody waits
    for. Under sshd the agent leads its own process group (the session's), and the group is
    ended; run otherwise (stdout a pipe of some other program), only the agent itself is."""
    with contextlib.suppress(OSError):
        mode = os.fstat(1).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            threading.Thread(target=_end_when_unread, daemon=True, name="session-watch").start()


def _end_when_unread() -> None:
    while not controller_gone(wait=None):
        pass
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the agent's main thread: ``end_with_the_session`` sends it when the
    controller is gone (as ``kill`` or systemd may). Python's default for SIGTERM ends the
    process where it stands, so no ``finally`` ran: an import's temporary directory, full of
    what podman had unpacked, stayed in /var/tmp. A KeyboardInterrupt, as the CLI's, so that
    no ``except Exception`` takes it for a failure of the step."""


EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process the signal ended


def _raise_terminated(signum: int, _frame: object) -> None:
    if interrupts.defer(signum):  # a step that must not be cut in half gets it when it ends
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: the way out is not cut short
    raise Terminated()


@contextlib.contextmanager
def _sigterm_raised() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the block (main thread only: the handler is put
    back after, for an agent run in-process by a test)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_protocol(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Run the handler ``argv`` (default: the command line) names; its exit status, or the
    refusal's; 143 when SIGTERM ended it (after the ``finally`` blocks on the way out ran;
    nothing more is written: the controller is most likely gone)."""
    args = parser.parse_args(argv)
    try:
        with _sigterm_raised():
            return int(args.handler(args))
    except Terminated:
        return EXIT_TERMINATED
    except SparkflakeError as exc:
        emit({"status": "failed", "message": str(exc), "check_id": exc.check_id})
        return exc.exit_code
    except OSError as exc:
        emit({"status": "failed", "message": f"{exc.filename or ''}: {exc.strerror or exc}"})
        return 1
