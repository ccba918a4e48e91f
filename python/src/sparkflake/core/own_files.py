"""Files sparkflake keeps beside its work under names it chose (a lock, a partial download, a
receiver's copy): opened so that whatever else stands at such a name is refused, never
written through. A symlink there would redirect the write to its target, a hard link would
truncate or append to a file elsewhere, and a FIFO would block the open for ever; each is
an error naming the path instead."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .documents import parse_json
from .errors import InputError

# what the open's error says stands at the name
_REFUSED_OPENS = {errno.ELOOP: "a symlink", errno.ENXIO: "a FIFO or a device", errno.EISDIR: "a directory"}
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO refuses, never blocks


def open_own_file(path: Path, flags: int, what: str, mode: int = 0o644) -> int:
    """A descriptor of the regular file ``path`` opened with ``flags`` (``os.O_*``; add
    ``os.O_CREAT`` to create it). Refused as an ``InputError`` naming ``what`` the file is
    for: a symlink, anything but a regular file, or a file with other links (one name of it
    elsewhere). ``O_TRUNC`` is applied only after those checks, so a refused file keeps its
    bytes."""
    truncate = bool(flags & os.O_TRUNC)
    try:
        descriptor = os.open(path, (flags & ~os.O_TRUNC) | _FLAGS, mode)
    except OSError as exc:
        found = _REFUSED_OPENS.get(exc.errno or 0)
        if found is None:
            raise
        raise InputError(f"{path}: is {found}; it is where sparkflake keeps {what} (remove it)") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise InputError(f"{path}: not a regular file; it is where sparkflake keeps {what} (remove it)")
        if status.st_nlink != 1:
            raise InputError(f"{path}: has {status.st_nlink} links (another name of it elsewhere); it is where "
                             f"sparkflake keeps {what}, which it writes (remove it)")
        if truncate:
            os.ftruncate(descriptor, 0)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def is_regular_file(path: Path) -> bool:
    """A regular file stands at ``path`` itself (not a symlink to one, nothing else)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def held_bytes(path: Path) -> int:
    """How many bytes the partial file ``path`` holds: 0 when there is none, or when what
    stands there is no regular file (``open_own_file`` refuses it when it is opened)."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return 0
    return status.st_size if stat.S_ISREG(status.st_mode) else 0


def directory_names(directory: Path, what: str) -> list[str] | str:
    """The names in ``directory`` (none when it is absent), or why it cannot be taken as
    ``what`` ("a sparkflake cache"): it is no directory, or it cannot be read."""
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return f"{directory}: not a directory, so not {what}"
    except OSError as exc:
        return f"{directory}: cannot read it: {exc.strerror or exc}"


@contextlib.contextmanager
def holding_lock(path: Path, what: str) -> Iterator[int]:
    """``flock`` held on the lock file ``path`` (created if absent) for the block: its
    descriptor. The file is never truncated: its bytes are nobody's."""
    descriptor = open_own_file(path, os.O_RDWR | os.O_CREAT, what)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield descriptor
    finally:
        os.close(descriptor)


def read_own_bytes(path: Path, what: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the file sparkflake keeps at ``path`` (``what`` it is),
    opened by ``open_own_file``: a FIFO (the read would block), a symlink (to /dev/zero, to a
    host file) or a hard link left at the name is refused as an InputError naming it."""
    descriptor = open_own_file(path, os.O_RDONLY, what)
    try:
        with os.fdopen(descriptor, "rb") as handle:
            return handle.read(limit)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def read_own_json(path: Path, what: str, limit: int) -> Any:
    """The JSON document of a record sparkflake keeps at ``path`` (``what`` it is), or None
    when what stands there is none it could have written (``read_own_bytes`` refuses it, it
    is over ``limit`` bytes, or it is nested too deeply for the parser): the directory may
    be an operator's, or another run left anything at the name."""
    try:
        raw = read_own_bytes(path, what, limit + 1)
    except (OSError, InputError):
        return None
    if len(raw) > limit:
        return None
    try:  # parse_json turns RecursionError, bad UTF-8 and the rest into one InputError
        return parse_json(raw, str(path))
    except InputError:
        return None
