"""Atomic outputs: write beside the target, fsync, rename. An interrupted run leaves the
previous good state, never a half-written file under the final name. Also the one
in-kernel byte copy between open files (``copy_bytes``) the writers share."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .direct_write import DirectWriter
from .errors import InputError


@contextlib.contextmanager
def _staged_fd(target: Path, mode: int) -> Iterator[int]:
    """A temporary file beside ``target``; on clean exit fsynced and renamed onto it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        try:
            yield fd
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """Yield a binary file object; on clean exit it replaces ``path`` atomically."""
    with _staged_fd(Path(path), mode) as fd, os.fdopen(fd, "wb", closefd=False) as handle:
        yield handle


@contextlib.contextmanager
def atomic_stream(path: str | os.PathLike[str], mode: int = 0o644, *, direct: bool = True) -> Iterator[DirectWriter]:
    """Like ``atomic_file`` for long sequential outputs: yields a ``DirectWriter`` (bytes
    and file ranges, written past the page cache unless ``direct`` is False). Errors
    writing, syncing or renaming are ``InputError``s naming ``path``."""
    target = Path(path)
    try:
        with _staged_fd(target, mode) as fd:
            writer = DirectWriter(fd, os.fspath(target), direct=direct)
            try:
                yield writer
            except BaseException:
                writer.abort()
                raise
            writer.finish()
    except OSError as exc:  # creating, fsyncing or renaming the staged file
        raise InputError(f"{target}: cannot write: {exc.strerror or exc}") from exc


def write_bytes_atomic(path: str | os.PathLike[str], content: bytes, mode: int = 0o644) -> None:
    with atomic_file(path, mode) as handle:
        handle.write(content)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh staging directory; on clean exit it replaces ``path``.

    The previous directory (if any) is moved aside first and removed only after the new
    one is in place, so at every instant either the old or the new tree is complete.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    retired = None
    if target.exists() or target.is_symlink():
        retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
        os.rmdir(retired)
        os.replace(target, retired)
    os.replace(staging, target)
    if retired is not None:
        if retired.is_dir() and not retired.is_symlink():
            shutil.rmtree(retired, ignore_errors=True)
        else:
            retired.unlink()


# copy_file_range refused: another file system (EXDEV before Linux 5.19, or between
# file system types), or no support; then the bytes go through plain reads and writes.
_NO_KERNEL_COPY = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def copy_bytes(source_fd: int, target_fd: int, size: int) -> int:
    """Copy up to ``size`` bytes from the current offset of ``source_fd`` to that of
    ``target_fd``, in the kernel where it can; returns the bytes copied (fewer if the
    source ended first). Other OS errors propagate."""
    remaining = size
    try:
        while remaining > 0:
            copied = os.copy_file_range(source_fd, target_fd, min(remaining, 1 << 30))
            if copied == 0:
                return size - remaining
            remaining -= copied
    except OSError as exc:
        if exc.errno not in _NO_KERNEL_COPY:
            raise
        while remaining > 0:
            chunk = os.read(source_fd, min(remaining, 1 << 20))
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(target_fd, view) :]
            remaining -= len(chunk)
    return size - remaining
