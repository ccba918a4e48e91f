"""A small verified-hash cache for checkpoint files, kept under the rank's cache root.

Trust model: a file's sha256 is reused only while its stat key is unchanged — device,
inode, size, mtime_ns and ctime_ns. Rewriting a file in place changes mtime and ctime;
resetting mtime afterwards (``touch -d``) still changes ctime, which user space cannot
set; replacing it changes the inode. So any content change made through the filesystem
is re-hashed. What the cache does not defend against is someone who can write the block
device or the cache file itself — that person can also edit the profile; ``--rehash``
ignores the cache and hashes every file again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.digest import sha256_file
from ..core.documents import read_json_file
from ..core.errors import InputError
from ..core.file_hashes import stat_identity

SCHEMA = "sparkflake.verified-hashes/v1"
MAX_HASH_CACHE_BYTES = 64 << 20  # an entry per checkpoint file, ~200 bytes each


class VerifiedHashCache:
    def __init__(self, path: Path | None, *, rehash: bool = False) -> None:
        self.path = path
        self.rehash = rehash
        self.entries: dict[str, dict[str, Any]] = {}
        self.dirty = False
        self.hits = 0
        self.misses = 0
        if path is not None and not rehash:
            try:
                document = read_json_file(path, "the hash cache", MAX_HASH_CACHE_BYTES)
                if document.get("schema") == SCHEMA and isinstance(document.get("entries"), dict):
                    self.entries = document["entries"]
            except (InputError, AttributeError):
                self.entries = {}

    def sha256(self, file_path: str, stat: os.stat_result, hasher: Callable[[str], str] = sha256_file) -> str:
        real = os.path.realpath(file_path)
        key = stat_identity(stat)
        entry = self.entries.get(real)
        if not self.rehash and isinstance(entry, dict) and entry.get("stat") == key and isinstance(entry.get("sha256"), str):
            self.hits += 1
            remembered: str = entry["sha256"]
            return remembered
        self.misses += 1
        digest = hasher(file_path)
        # Stat again: a file changed while it was hashed must not be cached under
        # the old key.
        if stat_identity(os.stat(file_path)) == key:
            self.entries[real] = {"stat": key, "sha256": digest}
            self.dirty = True
        return digest

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        document = {"schema": SCHEMA, "entries": self.entries}
        try:
            write_bytes_atomic(self.path, canonical_json_bytes(document) + b"\n")
        except OSError:
            # The cache is an optimisation; failing to store it must not fail a launch.
            return
        self.dirty = False
