"""One user of a working directory at a time: a second run that is given the same directory
is refused at once, naming the process that holds it, instead of deleting the first run's
files under it (two runtime checks on one --scratch did exactly that).

The lock is ``flock`` on a file inside the directory: the kernel drops it when its holder
exits, however it exits, so a killed run never leaves the directory locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import InputError
from .own_files import open_own_file

LOCK_NAME = ".sparkflake-in-use"


class DirectoryInUse(InputError):
    """Another run holds the directory."""


@contextlib.contextmanager
def held_alone(directory: Path, what: str, instead: str = "give this one another directory") -> Iterator[None]:
    """Hold ``directory`` (created if absent) for the duration of the block; ``what`` names
    the other run in the refusal ("another runtime check"), ``instead`` what to do."""
    directory.mkdir(parents=True, exist_ok=True)
    # the pid is written into the lock file: open_own_file refuses (naming the path) a hard
    # link there, whose other name would be truncated and overwritten, a FIFO, which the
    # open would wait on, and a symlink
    descriptor = open_own_file(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT,
                               "its lock against a second run in this directory")
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise DirectoryInUse(
                f"{directory} is in use by {what} (pid {holder}); {instead}"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(descriptor)


UPDATE_LOCK_SUFFIX = ".sparkflake-lock"


@contextlib.contextmanager
def updating_file(target: Path) -> Iterator[None]:
    """Hold ``target``'s update lock for one read-modify-write of it: ``flock`` on the
    sidecar ``.NAME.sparkflake-lock`` beside it (``target`` itself is replaced by every
    atomic write, so it cannot carry the lock). A second run waits until the first has
    written, then reads what it wrote: two updates of one file both stay."""
    path = target.parent / f".{target.name}{UPDATE_LOCK_SUFFIX}"
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InputError(f"{path}: cannot lock {target} for an update: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise InputError(f"{path}: not a regular file; it is where sparkflake locks {target} (remove it)")
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def _directory_flock(directory: Path, operation: int, on_busy: Callable[[], None]) -> Iterator[None]:
    """An ``flock`` (``operation``: LOCK_SH or LOCK_EX) on ``directory`` itself for the
    block: tried at once; when another holds it, ``on_busy()`` (which may refuse, raising),
    then waited for."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(descriptor, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            on_busy()
            fcntl.flock(descriptor, operation)
        yield
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def using_cache(root: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """A build's hold on the cache at ``root`` (created if absent) for the block: a shared
    ``flock`` on the root directory itself, so any number of builds hold it at once and
    ``collecting_cache`` (``cache gc --apply``) refuses while one does. A build waits for a
    gc that holds the cache (``on_wait`` is called first, to say so)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{root}: cannot use it as the cache: {exc.strerror or exc}") from None
    with _directory_flock(root, fcntl.LOCK_SH, on_wait):
        yield


def _refuse_collecting(root: Path, command: str) -> None:
    raise DirectoryInUse(f"{root} is in use by a build; `sparkflake cache {command}` would remove what it uses "
                         "before its record names it: run it again once the build has finished")


@contextlib.contextmanager
def collecting_cache(root: Path, command: str) -> Iterator[None]:
    """``root``'s cache held by ``command`` alone (an exclusive ``flock`` on the directory,
    see ``using_cache``), or refused at once while a build uses it: a build takes inputs,
    trees and layers from the cache before its record names them, so a gc that ran beside
    it removed what it was using (the build failed copying a layer gc had just removed)."""
    with _directory_flock(root, fcntl.LOCK_EX, lambda: _refuse_collecting(root, command)):
        yield


@contextlib.contextmanager
def updating_output(directory: Path) -> Iterator[None]:
    """One writer at a time of what a later command adds to the output ``directory`` (an
    export's archive, the runtime check's capabilities, a publish record) and of its marker,
    from the marker's read to the file's rename: an ``flock`` on the directory itself (a lock
    file in it would be an entry its marker does not list). Two exports into one OUT, a
    docker-archive and an oci-archive, each rewrote the marker from what it read before
    the other wrote: one archive's entry went back to its earlier size and time, and every
    later build into OUT and export of that archive was refused ('changed since sparkflake
    wrote it'). Held around the marker's write (``record_written_entry``), which does not
    take it itself."""
    with _directory_flock(directory, fcntl.LOCK_EX, lambda: None):
        yield
