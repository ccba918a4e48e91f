"""The receiving end of one hop: append a byte stream to the partial copy, hash it in the
same pass, and publish it under the final name only when the sha256 matches.

Protocol (JSON lines on the reply channel): first ``{"offset": N}`` — how many bytes this
rank already holds, so the sender resumes there — or ``{"error": ...}``; last the result.
A receiver left behind by a dropped connection still holds the lock; a new one takes over
by ending it (it is the same program on the same file), so two writers never interleave.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..core.digest import READ_CHUNK
from ..core.documents import file_kind
from ..core.errors import InputError
from ..core.file_hashes import stat_identity
from ..core.own_files import held_bytes, open_own_file
from .files import (
    RECORD_LIMIT,
    fsync_directory,
    hash_prefix,
    lacking_space,
    lock_path,
    lock_record,
    move_aside,
    partial_path,
    record_pid,
)

# Result statuses; the controller decides from them whether to retry.
OK = "ok"
INCOMPLETE = "incomplete"  # the stream ended early: resumable
MISMATCH = "sha256-mismatch"  # received bytes were wrong: moved aside, fetch again
NO_SPACE = "no-space"  # permanent for this run
FAILED = "failed"

TAKEOVER_SECONDS = 15.0


def receive(
    final: Path,
    size: int,
    sha256: str,
    source: BinaryIO,
    reply: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    started = time.monotonic()
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _receive_locked(final, size, sha256, source, reply, started)
    except InputError as exc:  # a lock or partial copy that is no file of ours: nothing written
        reply({"error": FAILED, "message": str(exc)})
        return {"status": FAILED, "message": str(exc), "path": str(final)}


def _receive_locked(final: Path, size: int, sha256: str, source: BinaryIO,
                    reply: Callable[[dict[str, Any]], None], started: float) -> dict[str, Any]:
    with receiver_lock(final):
        partial = partial_path(final)
        moved_aside = None
        _check_final_name(final)
        if final.is_file():
            if final.stat().st_size == size and hash_prefix(final, size).hexdigest() == sha256:
                reply({"offset": size})
                result = _result(OK, final, size, offset=0, received=0, started=started, digest=sha256, reused=True)
                result["identity"] = stat_identity(os.stat(final))
                return result
            moved_aside = str(move_aside(final, "mismatch"))
        offset = held_bytes(partial)
        if offset > size:
            move_aside(partial, "oversize")
            offset = 0
        message = lacking_space(final, size - offset)
        if message is not None:
            reply({"error": NO_SPACE, "message": message})
            return {"status": NO_SPACE, "message": message, "path": str(final)}
        sink = open_own_file(partial, os.O_WRONLY | os.O_CREAT | os.O_APPEND, "a copy being received")
        try:
            hasher = hash_prefix(partial, offset) if offset else hashlib.sha256()
        except BaseException:
            os.close(sink)
            raise
        reply({"offset": offset})
        received = 0
        try:
            try:
                received = _copy_hashing(source, sink, size - offset, hasher)
                os.fsync(sink)
            finally:
                os.close(sink)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()
                message = f"no space left on device writing {partial} at byte {offset + received} of {size}"
                return {"status": NO_SPACE, "message": message, "path": str(final)}
            return {"status": FAILED, "message": f"cannot write {partial}: {exc.strerror}", "path": str(final)}
        if offset + received < size:
            return _result(INCOMPLETE, final, offset + received, offset=offset, received=received, started=started, digest=None)
        digest = hasher.hexdigest()
        if digest != sha256:
            aside = move_aside(partial, "mismatch")
            result = _result(MISMATCH, final, size, offset=offset, received=received, started=started, digest=digest)
            result["moved_aside"] = str(aside)
            result["message"] = f"{final}: sha256 {digest} does not match the expected {sha256}"
            return result
        os.replace(partial, final)
        fsync_directory(final.parent)
        result = _result(OK, final, size, offset=offset, received=received, started=started, digest=digest)
        # what the copy looked like once verified: a store trusts it later while it is unchanged
        result["identity"] = stat_identity(os.stat(final))
        if moved_aside:
            result["moved_aside_final"] = moved_aside
        return result


def _check_final_name(final: Path) -> None:
    """Refuse (InputError, before any byte is taken) a final name holding what a received
    copy must not replace: a directory (the rename failed only after the whole copy, naming
    the partial copy), a FIFO, a device or a socket, or a symlink to one or to nothing (the
    rename would delete what is not sparkflake's). A regular file, or a symlink to one, is
    reused when it matches and moved aside when it does not."""
    try:
        mode = os.stat(final).st_mode  # through a symlink: what the copy would stand in for
    except FileNotFoundError:
        if not os.path.islink(final):
            return
        raise InputError(f"{final}: is a symlink to {os.readlink(final)}, which does not exist; it is where the "
                         "received file goes (move it away, or send the file elsewhere)") from None
    except OSError as exc:
        raise InputError(f"{final}: cannot inspect what stands where the received file goes: "
                         f"{exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        link = " (through a symlink)" if os.path.islink(final) else ""
        raise InputError(f"{final}: is {file_kind(mode)}{link}, not a file a received copy may replace; it is "
                         "where the received file goes (move it away, or send the file elsewhere)")


def _copy_hashing(source: BinaryIO, sink: int, limit: int, hasher: Any) -> int:
    """Up to ``limit`` bytes from ``source`` to the ``sink`` fd, hashed on the way, through
    one reused buffer (no per-chunk allocation); a short count means the stream ended."""
    try:
        fd = source.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        fd = None
    if fd is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, READ_CHUNK)  # fewer wakeups when stdin is a pipe
    buffer = bytearray(READ_CHUNK)
    view = memoryview(buffer)
    copied = 0
    while copied < limit:
        window = view[: min(READ_CHUNK, limit - copied)]
        # typeshed's BinaryIO has no readinto, though every binary stream has (io.RawIOBase,
        # io.BufferedIOBase; sys.stdin.buffer, typed BinaryIO, is an io.BufferedReader)
        count = os.readv(fd, [window]) if fd is not None else source.readinto(window)  # type: ignore[attr-defined]
        if count == 0:
            break
        chunk = view[:count]
        written = 0
        while written < count:
            written += os.write(sink, chunk[written:])
        hasher.update(chunk)
        copied += count
    return copied


def _result(
    status: str,
    final: Path,
    size: int,
    *,
    offset: int,
    received: int,
    started: float,
    digest: str | None,
    reused: bool = False,
) -> dict[str, Any]:
    return {
        "status": status,
        "path": str(final),
        "size": size,
        "offset": offset,
        "received": received,
        "seconds": round(time.monotonic() - started, 6),
        "sha256": digest,
        "reused": reused,
    }


@contextlib.contextmanager
def receiver_lock(final: Path) -> Iterator[None]:
    """The one writer of ``final``'s partial copy: a receiver orphaned by a dropped
    connection is ended (it is our program on the same file) and its lock taken over."""
    path = lock_path(final)
    fd = open_own_file(path, os.O_RDWR | os.O_CREAT, "a receiver's lock")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _end_previous_holder(fd)
            deadline = time.monotonic() + TAKEOVER_SECONDS
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise OSError(errno.EBUSY, f"{path} is held by another receiver") from None
                    time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, lock_record(final, os.getpid()), 0)
        yield
    finally:
        os.close(fd)


def _end_previous_holder(fd: int) -> None:
    """The holder is a receiver orphaned by a dropped connection (its sshd session may not
    notice for minutes); it is ended only if its command line says it is our receiver."""
    pid = record_pid(os.pread(fd, RECORD_LIMIT, 0))
    if pid is None or pid <= 0 or pid == os.getpid():
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if b"sparkflake.distribute.agent" in cmdline or any(part.endswith(b"sparkflake") for part in cmdline):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
