"""sha256 of host files, remembered under their stat identity (as git's index does).

A file's identity is (device, inode, size, mtime_ns, ctime_ns). ctime cannot be set by an
ordinary program, so a file rewritten in place -- even with its mtime restored -- gets a
new identity and is read again. Only files whose identity changed since they were last
hashed are read; a warm build of a multi-GB composition re-reads nothing it did not change.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..atomic_write import write_bytes_atomic
from ..digest import sha256_file

TABLE_FORMAT = "sparkflake-file-sha256-v1"


def stat_identity(path: str | os.PathLike[str]) -> list[int]:
    status = os.stat(path)
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


class FileHashes:
    """path -> sha256, re-read only when the path's stat identity changed."""

    def __init__(self, table: str | os.PathLike[str] | None) -> None:
        self.table_path = Path(table) if table is not None else None
        self._table: dict[str, list] = {}
        self._dirty = False
        if self.table_path is not None:
            with contextlib.suppress(FileNotFoundError, ValueError):
                document = json.loads(self.table_path.read_bytes())
                if document.get("format") == TABLE_FORMAT:
                    self._table = document["files"]

    def sha256(self, path: str | os.PathLike[str]) -> str:
        key = os.path.abspath(path)
        identity = stat_identity(key)
        remembered = self._table.get(key)
        if remembered is not None and remembered[:-1] == identity:
            return remembered[-1]
        digest = sha256_file(key)
        if stat_identity(key) == identity:  # unchanged while it was read
            self._table[key] = [*identity, digest]
            self._dirty = True
        return digest

    def __call__(self, path: str | os.PathLike[str]) -> str:
        return self.sha256(path)

    def save(self) -> None:
        if self._dirty and self.table_path is not None:
            document = {"format": TABLE_FORMAT, "files": self._table}
            with contextlib.suppress(OSError):
                write_bytes_atomic(self.table_path, json.dumps(document, separators=(",", ":")).encode())
            self._dirty = False
