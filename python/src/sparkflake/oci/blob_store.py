"""A content-addressed blob directory (``blobs/sha256/<hex>``, as in an OCI layout).

Blobs are written to a temporary file beside the store and renamed into place once
their digest is known, so a present blob is always complete. Writers of layouts and
archives hardlink or copy from here instead of recompressing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .digests import digest_hex


class BlobStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.blob_dir = self.root / "blobs" / "sha256"

    def path(self, digest: str) -> Path:
        return self.blob_dir / digest_hex(digest)

    def has(self, digest: str, size: int | None = None) -> bool:
        try:
            found = self.path(digest).stat().st_size
        except FileNotFoundError:
            return False
        return size is None or found == size

    @contextlib.contextmanager
    def new_blob(self) -> Iterator[tuple[BinaryIO, Path]]:
        """Yield (handle, temporary path); the caller moves it in with ``commit``.
        On error the temporary file is removed."""
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".incoming.", dir=self.blob_dir)
        tmp_path = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle, tmp_path
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
            raise

    def commit(self, tmp_path: Path, digest: str) -> Path:
        target = self.path(digest)
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, target)
        return target

    def put_bytes(self, content: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        if not self.has(digest, len(content)):
            with self.new_blob() as (handle, tmp_path):
                handle.write(content)
            self.commit(tmp_path, digest)
        return digest


def link_or_copy(source: Path, target: Path) -> None:
    """Hardlink ``source`` to ``target`` (same filesystem), else copy it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
