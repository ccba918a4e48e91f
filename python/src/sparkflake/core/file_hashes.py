"""sha256 of host files, remembered under their stat identity (as git's index does).

A file's identity is (device, inode, size, mtime_ns, ctime_ns). ctime cannot be set by an
ordinary program, so a file rewritten in place -- even with its mtime restored -- gets a
new identity and is read again. Only files whose identity changed since they were last
hashed are read; a warm build of a multi-GB composition re-reads nothing it did not change.

A file changed less than ``RACY_WINDOW_NS`` ago is hashed but neither looked up nor
remembered: on file systems with coarse timestamps a second write in the same tick can
keep size, mtime and ctime (git's "racy clean" case). Files under a directory given to
``never_remember`` (a build's work and scratch trees, deleted when it ends) are hashed
but not remembered either: on a loaded machine a build outlasts the racy window, and
each of its scratch files would otherwise grow the table and make every build rewrite it.

One table per cache (the compose stage's input files, the layer cache's tree files),
read on first use and written back only when something new was remembered.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .atomic_write import write_bytes_atomic
from .canonical_json import canonical_json_bytes
from .digest import sha256_file
from .errors import InputError

TABLE_FORMAT = "sparkflake-file-sha256-v2"
RACY_WINDOW_NS = 2_000_000_000


def stat_identity(status: os.stat_result) -> list[int]:
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


class FileHashes:
    """path -> sha256, re-read only when the path's stat identity changed. ``table`` None:
    nothing is kept between runs. ``racy_window_ns``: see the module docstring."""

    def __init__(self, table: str | os.PathLike[str] | None, *, racy_window_ns: int = RACY_WINDOW_NS) -> None:
        self.table_path = Path(table) if table is not None else None
        self.racy_window_ns = racy_window_ns
        self._table: dict[str, list[Any]] | None = None
        self._dirty = False
        self._transient: tuple[str, ...] = ()

    def never_remember(self, directory: str | os.PathLike[str]) -> None:
        """Hash files under ``directory`` but keep no record of them (see the module
        docstring)."""
        self._transient += (os.path.join(os.path.abspath(directory), ""),)

    def _files(self) -> dict[str, list[Any]]:
        if self._table is None:
            self._table = {}
            if self.table_path is not None:
                with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
                    document = json.loads(self.table_path.read_bytes())
                    if document.get("format") == TABLE_FORMAT and isinstance(document.get("files"), dict):
                        self._table = document["files"]
        return self._table

    def sha256(self, path: str | os.PathLike[str], identity: Sequence[int] | None = None) -> str:
        """sha256 hex of the file at ``path``; ``identity`` is its ``stat_identity`` when
        the caller has just taken it (else it is taken here)."""
        key = os.path.abspath(path)
        try:
            known = list(identity) if identity is not None else stat_identity(os.stat(key))
            settled = known[4] <= time.time_ns() - self.racy_window_ns and not key.startswith(self._transient)
            if settled:
                remembered = self._files().get(key)
                # a table is JSON on disk: a record whose digest is no string is not one
                if remembered is not None and remembered[:-1] == known and isinstance(remembered[-1], str):
                    return remembered[-1]
            digest = sha256_file(key)
            if settled and stat_identity(os.stat(key)) == known:  # unchanged while it was read
                self._files()[key] = [*known, digest]
                self._dirty = True
        except OSError as exc:
            raise InputError(f"{key}: cannot read: {exc.strerror}") from exc
        return digest

    def __call__(self, path: str | os.PathLike[str]) -> str:
        return self.sha256(path)

    def save(self) -> None:
        if self._dirty and self.table_path is not None and self._table is not None:
            document = {"format": TABLE_FORMAT, "files": self._table}
            with contextlib.suppress(OSError):
                write_bytes_atomic(self.table_path, canonical_json_bytes(document))
            self._dirty = False
