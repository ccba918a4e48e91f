"""What ``sparkflake cache gc|cleanup|verify`` would remove or move aside, and doing it.

Retention (gc): every build record of a profile names what that build used (inputs, git
sources, assembled trees, layer-store blobs); the last ``keep_builds`` records of each
profile, and every record of a deployed image (an image an evidence record, a profile's
qualified pin or the operator names), are kept with all they name. Everything else of those
kinds goes: assembled trees first (the largest, and made again from the inputs), then git
sources and input blobs, then the layer store, then the dropped records. Layer-cache records
and fingerprints go with the blobs they point to. Leftovers (cleanup) are what a run left
and no process uses (``cache_entries``). Verify re-hashes every content-addressed entry
and moves one whose bytes differ from its name into ``quarantine/`` (never drops it).

Only entries ``cache_entries`` recognises as sparkflake's are ever chosen; the plan is made
first and printed (dry run), then removed in the same order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.atomic_write import remove_tree
from ..core.blob_cache import move_to_quarantine
from ..core.digest import is_digest, sha256_file
from ..core.documents import parse_json_object, read_regular_file
from ..core.errors import InputError, SparkflakeError
from ..core.progress import ProgressCallback
from ..fetch.git import recorded_tree
from .build_record import StoredRecord, load_build_records
from .cache_entries import (
    GIT_SOURCES,
    INPUT_BLOBS,
    LAYER_STORE,
    RECORDS,
    TREES,
    CacheEntry,
    require_cache_root,
    scan_cache,
    scan_received,
)

_REMOVAL_ORDER = (TREES, GIT_SOURCES, INPUT_BLOBS, LAYER_STORE, RECORDS)


@dataclass(frozen=True)
class Retention:
    keep_builds: int = 3
    deployed: frozenset[str] = frozenset()  # manifest or config digests whose builds stay

    def __post_init__(self) -> None:
        if self.keep_builds < 1:
            raise InputError(f"--keep {self.keep_builds}: keep at least the last build of each profile")


@dataclass(frozen=True)
class Removal:
    """One cache entry a plan removes; ``reason`` is the line the operator reads for it."""

    entry: CacheEntry
    reason: str


@dataclass(frozen=True)
class Plan:
    """What ``gc`` or ``cleanup`` removes, in removal order, and the build records gc keeps
    (whose inputs stay)."""

    removals: tuple[Removal, ...]
    kept_builds: tuple[StoredRecord, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(removal.entry.bytes for removal in self.removals)


def _kept_records(records: Sequence[StoredRecord], retention: Retention) -> tuple[list[StoredRecord], list[StoredRecord]]:
    by_profile: dict[str, list[StoredRecord]] = {}
    for stored in records:  # oldest first within a profile (load_build_records)
        by_profile.setdefault(stored.record.profile, []).append(stored)
    kept: list[StoredRecord] = []
    dropped: list[StoredRecord] = []
    for builds in by_profile.values():
        recent = builds[-retention.keep_builds:]
        for stored in builds:
            record = stored.record
            deployed = {record.manifest_digest, record.config_digest} & retention.deployed
            (kept if stored in recent or deployed else dropped).append(stored)
    return kept, dropped


def _small_json(path: Path) -> dict[str, Any] | None:
    """A layer-cache record or fingerprint (sparkflake's own, small); None when unreadable."""
    try:
        return parse_json_object(read_regular_file(path, "a layer-cache record", 1 << 20), str(path))
    except SparkflakeError:
        return None


def plan_gc(root: Path, retention: Retention) -> Plan:
    """What the retention rule removes from the cache at ``root`` (nothing is removed)."""
    require_cache_root(root, "gc")
    records = load_build_records(root)
    if not records:
        # a cache from before builds recorded what they use: everything would look unused
        raise InputError(
            f"{root / 'builds'}: no build record, so gc cannot tell what any build uses (builds before this "
            "version recorded nothing); build each profile you keep once, then run gc again"
        )
    kept, dropped = _kept_records(records, retention)
    inputs = {name for stored in kept for name in stored.record.inputs}
    git_trees = {name for stored in kept for name in stored.record.git_trees}
    trees = {name for stored in kept for name in stored.record.trees}
    blobs = {digest.removeprefix("sha256:") for stored in kept for digest in stored.record.blobs}
    dropped_paths = {stored.path for stored in dropped}
    removals: list[Removal] = []
    gone_layer_keys: set[str] = set()
    entries = scan_cache(root)
    for entry in entries:
        reason = None
        if entry.kind == TREES and entry.leftover is None and entry.name not in trees and len(entry.name) == 64:
            reason = "no kept build assembled it"
        elif entry.kind == INPUT_BLOBS and entry.name not in inputs:
            reason = "no kept build used it"
        elif entry.kind == GIT_SOURCES:
            part, _, name = entry.name.partition("/")
            if part == "commits":
                document = recorded_tree(entry.path)
                name = document or ""
            if name not in git_trees:
                reason = "no kept build used it"
        elif entry.kind == LAYER_STORE and entry.leftover is None:
            reason = _layer_store_reason(entry, blobs, gone_layer_keys)
        elif entry.kind == RECORDS and entry.path in dropped_paths:
            reason = f"older than the last {retention.keep_builds} builds of its profile, and not deployed"
        if reason is not None:
            removals.append(Removal(entry, reason))
    # a fingerprint names a layer-cache record: it goes with the record
    for entry in entries:
        if entry.kind == LAYER_STORE and entry.name.startswith("fingerprints/"):
            key = (_small_json(entry.path) or {}).get("key")
            if not isinstance(key, str) or key in gone_layer_keys:
                removals.append(Removal(entry, "names a layer-cache record that goes"))
    removals.sort(key=lambda removal: _REMOVAL_ORDER.index(removal.entry.kind))
    return Plan(tuple(removals), tuple(kept))


def _layer_store_reason(entry: CacheEntry, blobs: set[str], gone_layer_keys: set[str]) -> str | None:
    part, _, name = entry.name.partition("/")
    if part in ("blobs", "verified"):
        return None if name in blobs else "no kept build's image holds it"
    if part == "layers":
        digest = (_small_json(entry.path) or {}).get("digest")
        if isinstance(digest, str) and digest.removeprefix("sha256:") in blobs:
            return None
        gone_layer_keys.add(name)
        return "its layer blob goes"
    return None


def plan_cleanup(root: Path, received: Iterable[Path] = ()) -> Plan:
    """The leftovers in the cache at ``root`` and in fan-out destination directories."""
    require_cache_root(root, "cleanup")
    entries = [entry for entry in scan_cache(root) if entry.leftover is not None]
    for directory in received:
        if not directory.is_dir():
            raise InputError(f"--received {directory}: not a directory")
        entries += scan_received(directory)
    return Plan(tuple(Removal(entry, entry.leftover or "") for entry in entries))


def remove_planned(plan: Plan, progress: ProgressCallback | None = None) -> int:
    """Remove what ``plan`` names, in its order; returns the bytes freed. An entry that is
    already gone is skipped (another cleanup ran)."""
    freed = 0
    for done, removal in enumerate(plan.removals, 1):
        path = removal.entry.path
        if path.is_dir() and not path.is_symlink():
            remove_tree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        freed += removal.entry.bytes
        if progress is not None:
            progress(done, len(plan.removals), str(path))
    return freed


@dataclass(frozen=True)
class Quarantined:
    entry: CacheEntry
    actual: str  # what its bytes hash to
    moved_to: Path


def verify_cache(root: Path, progress: ProgressCallback | None = None) -> tuple[int, list[Quarantined]]:
    """Re-hash every blob named by its sha256 (input blobs, layer-store blobs); one that
    differs is quarantined. Returns (entries checked, quarantined)."""
    require_cache_root(root, "verify")
    entries = [entry for entry in scan_cache(root)
               if entry.kind == INPUT_BLOBS or (entry.kind == LAYER_STORE and entry.name.startswith("blobs/"))]
    total = sum(entry.bytes for entry in entries)
    found: list[Quarantined] = []
    done = 0
    for entry in entries:
        expected = entry.name.rpartition("/")[2]
        try:
            actual = sha256_file(entry.path)
        except FileNotFoundError:
            continue  # removed meanwhile (a gc or an eviction)
        if actual != expected:
            kind = "blobs" if entry.kind == INPUT_BLOBS else "oci-blobs"
            moved = move_to_quarantine(root, entry.path, kind)
            if entry.kind == LAYER_STORE:  # its verified-identity record describes the moved file
                with contextlib.suppress(FileNotFoundError):
                    (root / "oci" / "verified" / expected).unlink()
            found.append(Quarantined(entry, actual, moved))
        done += entry.bytes
        if progress is not None:
            progress(done, total, entry.name)
    return len(entries), found


def deployed_from_json(paths: Iterable[Path]) -> set[str]:
    """Image digests named by deployment documents (``digests.json`` of a build, or any
    JSON object with ``manifest``/``config``/``manifest_digest``/``config_digest``); each of
    these keys present must hold a full digest (a mistyped one would keep nothing), or null
    as ``digests_record`` writes an image without a manifest."""
    found: set[str] = set()
    for path in paths:
        document = parse_json_object(read_regular_file(path, "a digests or deployment record"), str(path))
        digests = []
        for key in ("manifest", "config", "manifest_digest", "config_digest"):
            value = document.get(key)
            if value is None:
                continue
            if not is_digest(value):
                raise InputError(f"{path}: $.{key}: expected sha256:<64 lowercase hex digits> or null, got {value!r}")
            digests.append(value)
        if not digests:
            raise InputError(f"{path}: names no image: expected $.manifest or $.config (sha256:…)")
        found.update(digests)
    return found


