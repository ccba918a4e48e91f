"""Where a rank keeps a copy while it arrives, and what happens to a copy that is wrong.

A copy of ``DIR/NAME`` grows in ``DIR/.NAME.partial`` and becomes ``DIR/NAME`` only by an
atomic rename after its sha256 matched, so the final name never holds unverified bytes.
A wrong file found under the final name is moved aside to ``NAME.mismatch-<UTC time>``,
never overwritten, so an operator can look at what was there; it may be the operator's own
file, so nothing of sparkflake's ever removes it. A receiver holds ``DIR/.NAME.lock`` while
it writes, and the lock's record names the file it is for (``lock_record``): that record is
how a clean-up knows ``.NAME.lock``, ``.NAME.partial`` and a wrong partial moved aside
(``.NAME.partial.mismatch-<UTC time>``) are a receiver's and not an operator's files of
the same names. Each is opened by ``core/own_files``: a symlink, FIFO or hard link standing
at such a name is refused, never written through.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.digest import READ_CHUNK
from ..core.records import field_record
from .agent_reply import count_at, flag_at, optional_text_at, text_at


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


def lock_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.lock")


_RECEIVER_MARK = b"sparkflake receiver of "
RECORD_LIMIT = 4096  # a lock's record: a pid and a file name


def lock_record(final: Path, pid: int) -> bytes:
    """What a receiver's lock holds: the pid a new receiver ends (when its own transfer was
    orphaned), then the mark that says whose file this is and for which copy."""
    return f"{pid}\n".encode() + _RECEIVER_MARK + os.fsencode(final.name) + b"\n"


def record_pid(record: bytes) -> int | None:
    """The pid a lock's record names (its first line), or None."""
    first = record.split(b"\n", 1)[0].strip()
    return int(first) if first.isdigit() else None


def made_by_receiver(lock: Path) -> bool:
    """Whether ``lock`` (``DIR/.NAME.lock``) is a receiver's: a regular file whose record
    names NAME. A missing, foreign or unreadable file is not."""
    name = lock.name
    if not (name.startswith(".") and name.endswith(".lock")):
        return False
    try:
        descriptor = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        record = os.pread(descriptor, RECORD_LIMIT, 0)
    finally:
        os.close(descriptor)
    lines = record.split(b"\n")
    return len(lines) >= 2 and lines[1] == _RECEIVER_MARK + os.fsencode(name[1:].removesuffix(".lock"))


def move_aside(path: Path, reason: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = path.with_name(f"{path.name}.{reason}-{stamp}")
    serial = 1
    while candidate.exists():
        serial += 1
        candidate = path.with_name(f"{path.name}.{reason}-{stamp}-{serial}")
    os.rename(path, candidate)
    return candidate


def hash_prefix(path: Path, length: int) -> hashlib._Hash:
    """A sha256 state over the first ``length`` bytes, so a resumed copy is hashed in one
    pass overall (the received prefix once, the rest as it arrives)."""
    hasher = hashlib.sha256()
    remaining = length
    with open(path, "rb") as handle:
        while remaining > 0:
            chunk = handle.read(min(READ_CHUNK, remaining))
            if not chunk:
                break
            hasher.update(chunk)
            remaining -= len(chunk)
    return hasher


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


def lacking_space(final: Path, needed: int) -> str | None:
    """Why ``needed`` more bytes of ``final`` cannot be written in its directory, or None."""
    available = free_bytes(final.parent)
    if available >= needed:
        return None
    return f"no space left for {final}: needs {needed} more bytes, {available} free in {final.parent}"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class CopyState:
    """What a rank holds for one expected file."""

    path: str
    exists: bool
    size: int | None
    sha256: str | None
    matches: bool
    partial_size: int

    def as_record(self) -> dict[str, object]:
        return field_record(self)

    @classmethod
    def from_reply(cls, document: dict[str, Any] | None, where: str) -> CopyState:
        """The agent's ``status`` reply (``as_record`` on the rank) read back by the
        controller, each field in its shape (``agent_reply``)."""
        size = None if (document or {}).get("size") is None else count_at(document, "size", where)
        return cls(path=text_at(document, "path", where), exists=flag_at(document, "exists", where), size=size,
                   sha256=optional_text_at(document, "sha256", where), matches=flag_at(document, "matches", where),
                   partial_size=count_at(document, "partial_size", where))


def inspect_copy(final: Path, expected_sha256: str, expected_size: int | None) -> CopyState:
    """Hash the copy under the final name (if any), read-only: a wrong copy is moved aside
    only by the receiver that replaces it, so a check never changes what a rank holds."""
    exists = final.is_file()
    size = digest = None
    matches = False
    if exists:
        size = final.stat().st_size
        if expected_size is None or size == expected_size:
            digest = hash_prefix(final, size).hexdigest()
            matches = digest == expected_sha256
    partial = partial_path(final)
    partial_size = partial.stat().st_size if partial.is_file() else 0
    return CopyState(
        path=str(final),
        exists=exists,
        size=size,
        sha256=digest,
        matches=matches,
        partial_size=partial_size,
    )
