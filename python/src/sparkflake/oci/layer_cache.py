"""Content-addressed layer cache.

The key of a layer is the sha256 of everything its tar stream is a function of: each
entry's path, kind, normalized mode, size, link target and content sha256, in archive
order, plus the layer options (compression, level, SOURCE_DATE_EPOCH) and a format
version. So the key is the trees' content, not their location, mtimes or owners: a
copy of a tree elsewhere hits the same cache entry, and a changed byte misses it.

Computing a content sha256 of every file on each build would read every byte; instead a
per-file table (``file_hashes.FileHashes``) remembers the sha256 of a host file under its
stat identity (device, inode, size, mtime_ns, ctime_ns), as git's index does, and only
files whose identity changed are read again. ctime cannot be set by ordinary programs, so
a file rewritten in place with its mtime restored is still noticed.

A second, faster route maps the layer's *input fingerprint* to its key: one sorted walk
of the input trees taking every path's stat identity (``layer_input.walk_tree``: type,
mode, size, mtime_ns, ctime_ns, inode, link count; a symlink's target) plus the generated
files, deletions and options. A tree source that carries the walk its validator just
took (a caller's tree cache) is not walked again. An unchanged input gives the
same fingerprint and its recorded key without building the entry list or looking up a
content hash per file; any change (a write, chmod, rename, link, add or remove changes
ctime or the listing) gives another fingerprint and the full route. A fingerprint is recorded only when the input had it
both before and after the key was computed, and not while any of its paths changed less
than ``RACY_WINDOW_NS`` ago: on kernels whose timestamps are coarse, a second write in
the same tick could keep size, mtime and ctime (git's "racy clean" case), so a fresh
tree takes the full route until its timestamps are safely in the past.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.file_hashes import RACY_WINDOW_NS, FileHashes
from ..core.progress import ProgressCallback
from .layer_input import LayerInput, walk_tree
from .layer_tree import ScannedEntry
from .tar_stream import EntryKind

CACHE_FORMAT = "sparkflake-layer-cache-v1"


class InputFingerprint(NamedTuple):
    digest: str
    settled: bool  # no path changed within the racy window: safe to record


class LayerCache:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.layer_dir = self.root / "layers"
        self._hashes = FileHashes(self.root / "file-sha256.json")

    def never_remember(self, directory: str | os.PathLike[str]) -> None:
        """Files under ``directory`` (a build's work tree) are hashed, not remembered."""
        self._hashes.never_remember(directory)

    def file_sha256(self, scanned: ScannedEntry) -> str:
        entry = scanned.entry
        if entry.content is not None:
            return hashlib.sha256(entry.content).hexdigest()
        assert entry.source is not None
        return self._hashes.sha256(entry.source, scanned.stat_key)

    def key(
        self,
        entries: Sequence[ScannedEntry],
        options_record: dict[str, object],
        progress: ProgressCallback | None = None,
    ) -> str:
        hasher = hashlib.sha256(canonical_json_bytes({"format": CACHE_FORMAT, **options_record}))
        total = sum(s.entry.size for s in entries if s.entry.kind is EntryKind.FILE)
        done = 0
        records: list[str] = []
        for scanned in entries:
            entry = scanned.entry
            content = ""
            if entry.kind is EntryKind.FILE:
                content = self.file_sha256(scanned)
                done += entry.size
                if progress is not None:
                    progress(done, total, "hashing trees")
            records.append(
                f"{entry.kind.value}\0{entry.path}\0{entry.mode:o}\0{entry.size}\0{entry.link_target}\0{content}\n"
            )
            if len(records) >= 4096:  # the same bytes as one update per record
                hasher.update("".join(records).encode("utf-8"))
                records.clear()
        hasher.update("".join(records).encode("utf-8"))
        return hasher.hexdigest()

    def input_fingerprint(
        self, layer_input: LayerInput, options_record: dict[str, object], *, fresh: bool = False
    ) -> InputFingerprint | None:
        """The input fingerprint (see the module docstring), or None when a tree cannot
        be walked (the full route then reports what is wrong). A tree source's own
        ``walk`` (taken by its validator) stands for a walk unless ``fresh``."""
        parts = [canonical_json_bytes({"format": CACHE_FORMAT, **options_record}).decode(), "\n"]
        newest = 0
        for source in layer_input.sources:
            try:
                walk = source.walk if source.walk is not None and not fresh else walk_tree(source.host_dir)
            except OSError:
                return None
            newest = max(newest, walk.newest_ctime_ns)
            parts.append(f"tree\0{source.host_dir}\0{source.target}\0{walk.digest}\n")
        for generated in layer_input.files:
            digest = hashlib.sha256(generated.content).hexdigest()
            parts.append(f"file\0{generated.target}\0{generated.mode:o}\0{digest}\n")
        parts += [f"delete\0{path}\n" for path in layer_input.deletions]
        parts += [f"opaque\0{path}\n" for path in layer_input.opaque_dirs]
        return InputFingerprint(
            hashlib.sha256("".join(parts).encode("utf-8", "surrogateescape")).hexdigest(),
            settled=newest <= time.time_ns() - RACY_WINDOW_NS,
        )

    def key_for_fingerprint(self, fingerprint: str) -> str | None:
        try:
            key = json.loads((self.root / "fingerprints" / f"{fingerprint}.json").read_bytes())["key"]
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        return key if isinstance(key, str) else None

    def remember_fingerprint(self, fingerprint: str, key: str) -> None:
        with contextlib.suppress(OSError):
            write_bytes_atomic(self.root / "fingerprints" / f"{fingerprint}.json", canonical_json_bytes({"key": key}))

    def lookup(self, key: str) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads((self.layer_dir / f"{key}.json").read_bytes())
            return record
        except (FileNotFoundError, ValueError):
            return None

    def record(self, key: str, layer_record: dict[str, Any]) -> None:
        write_bytes_atomic(self.layer_dir / f"{key}.json", canonical_json_bytes(layer_record))

    def save(self) -> None:
        self._hashes.save()
