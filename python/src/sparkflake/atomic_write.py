"""Atomic outputs: write beside the target, fsync, rename. An interrupted run leaves the
previous good state, never a half-written file under the final name."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """Yield a binary file object; on clean exit it replaces ``path`` atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


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
