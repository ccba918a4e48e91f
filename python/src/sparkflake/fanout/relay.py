"""The sending end of one hop, run on rank i: stream rank i's copy to rank i+1's receiver.

Rank i's copy may still be arriving (pipelining): the relay follows the partial file as it
grows, so rank i forwards while it receives. It starts at the offset rank i+1 reports,
which is how a hop resumes after a dropped connection. The bytes go through ``sendfile``
into the ssh client's stdin: no copy through Python buffers.

The connection to rank i+1 is made before the source has verified (so the handshakes overlap
rank 0's hashing); the receiver changes nothing until it reads the go line ``go SIZE``, which
the relay sends only once its own go has come (see ``go_line`` / ``read_go_line``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import partial_path

# Statuses besides the receiver's own (see receive.py).
CONNECT_FAILED = "connect-failed"  # no handshake from the receiver: ssh could not start it
CANCELLED = "cancelled"  # the go never came (rank 0's archive did not verify)
TRANSPORT_ERROR = "transport-error"  # the stream broke after the handshake: resumable
SOURCE_WITHDRAWN = "source-withdrawn"  # rank i's partial copy was removed or stalled

POLL_SECONDS = 0.02
REPORT_SECONDS = 0.5
SEND_CHUNK = 4 << 20


def go_line(size: int) -> bytes:
    return f"go {size}\n".encode()


def read_go_line(fd: int) -> int | None:
    """The size from a ``go SIZE`` line on ``fd``, read byte by byte so that nothing after
    the line is consumed; None at end of stream (cancelled) or on anything else."""
    line = bytearray()
    while len(line) < 32:
        byte = os.read(fd, 1)
        if not byte:
            return None
        if byte == b"\n":
            break
        line += byte
    words = line.decode("ascii", "replace").split()
    if len(words) != 2 or words[0] != "go" or not words[1].isdigit():
        return None
    return int(words[1])


def relay(
    source: Path,
    size: int | Callable[[], int | None],
    downstream_argv: list[str],
    *,
    stall_seconds: float = 600.0,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Forward ``source`` to the receiver ``downstream_argv`` starts. ``size`` is the byte
    count, or a callable that blocks until the go and returns it (None: cancelled);
    ``progress`` gets the position reached about twice a second."""
    started = time.monotonic()
    process = subprocess.Popen(
        downstream_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stderr_tail: deque[str] = deque(maxlen=20)
    stderr_reader = threading.Thread(target=_drain, args=(process.stderr, stderr_tail), daemon=True)
    stderr_reader.start()
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError):
        fcntl.fcntl(process.stdin.fileno(), fcntl.F_SETPIPE_SZ, SEND_CHUNK)  # larger sendfile bursts
    total = size() if callable(size) else size
    if total is None:
        process.kill()
        process.wait()
        return {"status": CANCELLED, "message": "the source did not verify; nothing was sent"}
    size = total
    with contextlib.suppress(OSError):
        process.stdin.write(go_line(size))
        process.stdin.flush()
    handshake = _read_json_line(process.stdout)
    if handshake is None or "offset" not in handshake:
        with contextlib.suppress(OSError):
            process.stdin.close()
        returncode = process.wait()
        stderr_reader.join(timeout=2)
        if handshake is not None and "error" in handshake:
            return {
                "status": handshake["error"],
                "message": handshake.get("message", ""),
                "returncode": returncode,
            }
        return {
            "status": CONNECT_FAILED,
            "returncode": returncode,
            "stderr": "\n".join(stderr_tail),
        }
    offset = int(handshake["offset"])
    sent = 0
    status = None
    message = ""
    try:
        sent = _send(source, offset, size, process.stdin.fileno(), stall_seconds, progress)
    except _Withdrawn as exc:
        status, message = SOURCE_WITHDRAWN, str(exc)
        process.kill()
    except (BrokenPipeError, ConnectionResetError):
        status = TRANSPORT_ERROR
    with contextlib.suppress(OSError):
        process.stdin.close()
    result = _read_last_json(process.stdout)
    returncode = process.wait()
    stderr_reader.join(timeout=2)
    if status is None:
        status = result.get("status", TRANSPORT_ERROR) if result else TRANSPORT_ERROR
    return {
        "status": status,
        "message": message or (result or {}).get("message", ""),
        "offset": offset,
        "sent": sent,
        "seconds": round(time.monotonic() - started, 6),
        "downstream": result,
        "returncode": returncode,
        "stderr": "\n".join(stderr_tail),
    }


class _Withdrawn(Exception):
    pass


def _send(
    source: Path,
    offset: int,
    size: int,
    sink: int,
    stall_seconds: float,
    progress: Callable[[int], None] | None,
) -> int:
    if offset >= size:
        return 0
    handle = _open_growing(source, stall_seconds)
    sent = 0
    position = offset
    last_progress = last_report = time.monotonic()
    try:
        while position < size:
            count = os.sendfile(sink, handle.fileno(), position, min(SEND_CHUNK, size - position))
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


def _open_growing(source: Path, stall_seconds: float):  # type: ignore[no-untyped-def]
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


def _still_published(source: Path, handle) -> bool:  # type: ignore[no-untyped-def]
    mine = os.fstat(handle.fileno())
    if mine.st_nlink == 0:
        return False
    for candidate in (source, partial_path(source)):
        with contextlib.suppress(FileNotFoundError):
            found = os.stat(candidate)
            if (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino):
                return True
    return False


def _drain(stream, tail: deque[str]) -> None:  # type: ignore[no-untyped-def]
    for raw in stream:
        tail.append(raw.decode("utf-8", "replace").rstrip())


def _read_json_line(stream) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
    line = stream.readline()
    if not line:
        return None
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _read_last_json(stream) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
    last = None
    for line in stream:
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict):
                last = parsed
    return last
