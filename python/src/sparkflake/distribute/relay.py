"""The sending end of one hop, run on rank i: stream rank i's copies of a list of files to
rank i+1's receiver, over one connection.

Rank i's copies may still be arriving (pipelining): the relay follows a partial file as it
grows, so rank i forwards while it receives. Each file starts at the offset rank i+1
reports, which is how a hop resumes after a dropped connection. The bytes go through
``sendfile`` into the ssh client's stdin: no copy through Python buffers. One connection
carries every file of the batch (one request/response turn per file, no new ssh session and
no new agent per file): that is what makes a 50-file checkpoint cost what its bytes cost.

The connection to rank i+1 is made before the source has verified (so the handshakes overlap
rank 0's hashing); the receiver changes nothing until it reads the plan line (see
``plan_line`` / ``read_plan_line``), which the relay sends only once its own plan has come.

Wire protocol, relay -> receiver: the plan line, then for each file the bytes from the
offset the receiver asked for. Receiver -> relay, per file: ``{"offset": N}`` (or
``{"error": ...}``), then that file's result.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import io
import json
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..core.bounded_lines import bounded_lines, keep_tail, read_line
from ..core.canonical_json import canonical_json_bytes
from ..core.digest import is_sha256_hex
from ..core.records import describe, field_record
from ..core.watchdog import Watchdog
from . import receive
from .agent_protocol import LINE_LIMIT
from .files import partial_path

# Statuses besides the receiver's own (see receive.py).
DONE = "done"  # every file of the batch got a result from the receiver
CONNECT_FAILED = "connect-failed"  # no handshake from the receiver: ssh could not start it
CANCELLED = "cancelled"  # the plan never came (rank 0's source did not verify)
TRANSPORT_ERROR = "transport-error"  # the stream broke after the handshake: resumable
SOURCE_WITHDRAWN = "source-withdrawn"  # rank i's partial copy was removed or stalled

POLL_SECONDS = 0.02
REPORT_SECONDS = 0.5
SEND_CHUNK = 4 << 20
PLAN_LIMIT = 16 << 20  # a plan of a few thousand files fits many times over
# how long a source may grow no more, or a receiver say nothing, before the hop ends
STALL_SECONDS = 600.0
STDERR_LINE_LIMIT = 4096  # the receiver's stderr: its last lines, each cut here, go into the last line


@dataclass(frozen=True)
class PlannedFile:
    """One file of a hop: ``source`` on the sending rank (empty on the receiving side, which
    never needs it), ``path`` on the receiving rank."""

    path: str
    sha256: str
    size: int
    source: str = ""

    def as_record(self) -> dict[str, Any]:
        return field_record(self)


def plan_line(files: Sequence[PlannedFile]) -> bytes:
    return canonical_json_bytes({"files": [item.as_record() for item in files]}) + b"\n"


def read_plan_line(fd: int) -> list[PlannedFile] | None:
    """The files of a plan line read from ``fd``; None at end of stream (cancelled) or on
    anything that is not a well-formed plan. Read in chunks: the sender writes nothing
    after the line before the receiver has answered it."""
    line = bytearray()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk or len(line) + len(chunk) > PLAN_LIMIT:
            return None
        line += chunk
        end = line.find(b"\n")
        if end == len(line) - 1:
            break
        if end >= 0:
            return None  # bytes after the plan line: not our sender
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):  # not a plan (or nested past the parser)
        return None
    return parse_plan(document)


def parse_plan(document: Any) -> list[PlannedFile] | None:
    if not isinstance(document, dict) or set(document) != {"files"} or not isinstance(document["files"], list):
        return None
    planned = []
    for raw in document["files"]:
        if not isinstance(raw, dict) or set(raw) != {"path", "sha256", "size", "source"}:
            return None
        path, digest, size, source = raw["path"], raw["sha256"], raw["size"], raw["source"]
        if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
            return None
        if not isinstance(source, str) or "\x00" in source:
            return None
        if not is_sha256_hex(digest):
            return None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None
        planned.append(PlannedFile(path=path, sha256=digest, size=size, source=source))
    return planned


def relay(
    files: Sequence[PlannedFile] | Callable[[], Sequence[PlannedFile] | None],
    downstream_argv: list[str],
    *,
    stall_seconds: float = STALL_SECONDS,
    progress: Callable[[int, int], None] | None = None,
    on_result: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Forward each planned file's ``source`` to the receiver ``downstream_argv`` starts.
    ``files`` is the plan, or a callable that blocks until the go and returns it (None:
    cancelled); ``progress(index, position)`` comes about twice a second and
    ``on_result(index, result)`` as each file's result arrives. The returned ``results``
    hold one entry per file that got one, in plan order."""
    started = time.monotonic()
    process = subprocess.Popen(
        downstream_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stderr_tail: deque[bytes] = deque(maxlen=20)
    stderr_reader = threading.Thread(target=keep_tail, args=(process.stderr, stderr_tail, STDERR_LINE_LIMIT), daemon=True)
    stderr_reader.start()
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError):
        fcntl.fcntl(process.stdin.fileno(), fcntl.F_SETPIPE_SZ, SEND_CHUNK)  # larger sendfile bursts
    planned = files() if callable(files) else files
    if planned is None:
        process.kill()
        process.wait()
        return {"status": CANCELLED, "message": "the source did not verify; nothing was sent", "results": []}
    receiving = [PlannedFile(item.path, item.sha256, item.size) for item in planned]  # sources stay here
    with contextlib.suppress(OSError):
        process.stdin.write(plan_line(receiving))
        process.stdin.flush()
    results: list[dict[str, Any]] = []
    offsets: list[int] = []
    sent = 0
    status: str | None = None
    message = ""
    # A receiver that stops answering without closing its end (its process hung while the
    # link's keepalives still answer) would block the read of its next line, or sendfile into
    # a full pipe, for ever: silent for stall_seconds, it is ended (a resumable transport error).
    watchdog = Watchdog(stall_seconds, process.kill)
    for index, item in enumerate(planned):
        watchdog.feed()
        handshake = _read_json_line(process.stdout)
        if handshake is None or "offset" not in handshake:
            if handshake is not None and "error" in handshake:
                status, message = _text(handshake["error"]), _text(handshake.get("message", ""))
            else:
                status = CONNECT_FAILED if index == 0 else TRANSPORT_ERROR
            break
        offset = handshake["offset"]
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= item.size:
            # a receiver of another version (or a damaged one): sending from it would raise
            # here, a traceback on this rank and no last line; asking again gets the same
            status = receive.FAILED
            message = (f"{item.path}: the receiver's handshake gave offset {describe(offset)}, expected a "
                       f"whole number from 0 to {item.size} (does the receiving rank run this version "
                       "of sparkflake?)")
            break
        offsets.append(offset)
        try:
            sent += _send(Path(item.source), offset, item.size, process.stdin.fileno(), stall_seconds=stall_seconds,
                          progress=functools.partial(progress, index) if progress else None, on_step=watchdog.feed)
        except _Withdrawn as exc:
            status, message = SOURCE_WITHDRAWN, str(exc)
            process.kill()
            break
        except (BrokenPipeError, ConnectionResetError):
            status = TRANSPORT_ERROR  # the receiver's last word (if any) is read below
        watchdog.feed()
        result = _read_json_line(process.stdout)
        if result is None or "status" not in result:
            status = TRANSPORT_ERROR
            break
        if not _writable(result):
            # NaN, Infinity or a lone surrogate: Python reads them, but this relay's own lines
            # (canonical JSON) cannot carry them on, and writing them would end it in a traceback
            status = receive.FAILED
            message = (f"{item.path}: the receiver's result holds NaN, Infinity or text that is not "
                       "Unicode, which JSON does not (does the receiving rank run this version of sparkflake?)")
            break
        results.append(result)
        if on_result:
            on_result(index, result)
        if status is not None:
            break
        if result["status"] not in ("ok", "sha256-mismatch"):
            status, message = _text(result["status"]), _text(result.get("message", ""))
            break
    with contextlib.suppress(OSError):
        process.stdin.close()
    watchdog.feed()  # its last lines, until it ends: silent that long, it is ended too
    for _ in bounded_lines(process.stdout, LINE_LIMIT):
        pass
    returncode = process.wait()
    watchdog.stop()
    stderr_reader.join(timeout=2)
    if watchdog.fired and len(results) < len(planned):  # ended before every file's result
        status = status or TRANSPORT_ERROR
        message = message or f"the receiver said nothing for {stall_seconds:g}s: its connection was ended"
    return {
        "status": status or DONE,
        "message": message,
        "offsets": offsets,
        "sent": sent,
        "seconds": round(time.monotonic() - started, 6),
        "results": results,
        "returncode": returncode,
        "stderr": "\n".join(raw.decode("utf-8", "replace").rstrip() for raw in stderr_tail),
    }


class _Withdrawn(Exception):
    pass


def _send(
    source: Path,
    offset: int,
    size: int,
    sink: int,
    *,
    stall_seconds: float,
    progress: Callable[[int], None] | None,
    on_step: Callable[[], None],
) -> int:
    """Send ``source`` from ``offset`` to ``size`` into ``sink``; ``on_step`` after each step
    that did not block on the sink (a chunk sent, a wait for the source to appear or grow)."""
    if offset >= size:
        return 0
    handle = _open_growing(source, stall_seconds, on_step)
    sent = 0
    position = offset
    last_progress = last_report = time.monotonic()
    try:
        while position < size:
            count = os.sendfile(sink, handle.fileno(), position, min(SEND_CHUNK, size - position))
            on_step()
            if count:
                position += count
                sent += count
                last_progress = time.monotonic()
                if progress and last_progress - last_report >= REPORT_SECONDS:
                    progress(position)
                    last_report = last_progress
                continue
            if not _still_published(source, handle):
                raise _Withdrawn(f"{source}: the copy being forwarded was removed")
            if time.monotonic() - last_progress > stall_seconds:
                raise _Withdrawn(f"{source}: no new bytes for {stall_seconds:.0f}s")
            time.sleep(POLL_SECONDS)
    finally:
        handle.close()
    return sent


def _open_growing(source: Path, stall_seconds: float, on_step: Callable[[], None]) -> io.BufferedReader:
    """The final copy if present, else the partial one that is arriving; the partial is
    renamed to the final name once verified, which keeps the open handle valid."""
    deadline = time.monotonic() + stall_seconds
    partial = partial_path(source)
    while True:
        for candidate in (source, partial):
            with contextlib.suppress(FileNotFoundError):
                return open(candidate, "rb")
        if time.monotonic() > deadline:
            raise _Withdrawn(f"{source}: nothing arrived for {stall_seconds:.0f}s")
        time.sleep(POLL_SECONDS)
        on_step()


def _still_published(source: Path, handle: io.BufferedReader) -> bool:
    mine = os.fstat(handle.fileno())
    if mine.st_nlink == 0:
        return False
    for candidate in (source, partial_path(source)):
        with contextlib.suppress(FileNotFoundError):
            found = os.stat(candidate)
            if (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino):
                return True
    return False


def _read_json_line(stream: IO[bytes]) -> dict[str, Any] | None:
    line = read_line(stream, LINE_LIMIT)  # a longer line is cut: no JSON, this hop's transport error
    if not line:
        return None
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # not a line of the protocol (or nested past the parser)
        return None
    return parsed if isinstance(parsed, dict) else None


def _writable(document: dict[str, Any]) -> bool:
    """Can this relay's last line (canonical JSON, as ``emit`` writes it) carry ``document``?"""
    try:
        canonical_json_bytes(document)
    except (ValueError, RecursionError):  # NaN/Infinity; a lone surrogate (UnicodeEncodeError)
        return False
    return True


def _text(value: object) -> str:
    """A receiver's word (a status, a message) as text this relay's last line can carry."""
    return str(value).encode("utf-8", "replace").decode("utf-8")
