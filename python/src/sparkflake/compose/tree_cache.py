"""Assembled trees kept between builds, keyed by what they are made from.

The key is the sha256 of the canonical JSON of the tree's recipe: its kind, the sha256 of
every input it is assembled from, the target, and the sparkflake version (the assembler's
code). An entry holds the tree, ``recipe.json`` (the recipe and the assembler's manifest)
and ``entry.json``: the tree's ``walk_tree`` digest taken right after it was made (the
stat identity of every path: type, mode, size, mtime, ctime, inode, link count; symlinks'
targets).

An entry is used only if a walk of the tree now gives the same digest: a tree changed in
any way since it was made is discarded and assembled again. This costs one lstat per path,
not a read of the tree; the walk is handed on (``CachedTree.walk``) so that the layer
cache's input fingerprint of the same tree does not walk it again, and so are the lstat
results it took (``CachedTree.statuses``, read through ``WalkedTrees``): the build's
later listings and file-hash lookups inside the tree use them instead of asking again. (An entry written by
an earlier version, with every path's identity listed, is checked against that list once
and then given its digest.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from .. import __version__
from ..core.atomic_write import atomic_directory, write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.interrupts import interrupts_held
from ..core.own_files import holding_lock
from ..oci.layer_input import TreeWalk, walk_lstat, walk_tree

ENTRY_FORMAT = "sparkflake-tree-cache-v1"
ENTRY_FILE = "entry.json"
TREE_DIR = "tree"

FactT = TypeVar("FactT")


def recipe_key(recipe: Mapping[str, object]) -> str:
    material = {"format": ENTRY_FORMAT, "sparkflake": __version__, **recipe}
    return hashlib.sha256(canonical_json_bytes(material, ascii_only=True)).hexdigest()


def _listed_identity(root: Path) -> dict[str, list[Any]]:
    """The per-path identity list of entries written by an earlier version."""
    identity: dict[str, list[Any]] = {}
    for relative, host_path, status in walk_lstat(root):
        record: list[Any] = [status.st_mode, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]
        if stat.S_ISLNK(status.st_mode):
            record.append(os.readlink(host_path))
        identity[relative] = record
    return identity


@dataclass(frozen=True)
class CachedTree:
    tree: Path
    manifest: Mapping[str, object]
    reused: bool
    walk: TreeWalk  # the walk that validated (or recorded) the tree in this build
    statuses: Mapping[str, os.stat_result] = field(default_factory=dict, repr=False)  # that walk's lstat of every path

    def fact(self, name: str, compute: Callable[[Path], FactT]) -> FactT:
        """A fact derived from the tree's bytes only (for example the ELF machine of every
        file), computed once per entry and kept beside it. The entry was just validated
        path by path (or made), so a kept fact is as current as the tree; an entry that
        changed is discarded with its facts. ``compute`` returns what JSON gives back as
        it was (lists, strings, numbers), so a kept fact has the type of a computed one."""
        path = self.tree.parent / f"fact-{name}.json"
        try:
            return cast(FactT, json.loads(path.read_bytes())["value"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        value = compute(self.tree)
        write_bytes_atomic(path, canonical_json_bytes({"value": value}))
        return value


class TreeCache:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def get_or_build(
        self,
        recipe: Mapping[str, object],
        build: Callable[[Path], Mapping[str, object]],
    ) -> CachedTree:
        """The cached tree for ``recipe`` if intact, else ``build(tree_path)`` (which
        returns the assembler's manifest) into a fresh entry."""
        key = recipe_key(recipe)
        # One build of an entry at a time, across processes: without the lock a second build
        # found the first's entry swapped in but not yet given its entry.json, removed it as
        # unfinished, and swapped its own in over it (the first then failed writing entry.json
        # into the removed tree); now the second waits and reuses the first's entry.
        lock_dir = self.root.parent / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with holding_lock(lock_dir / key, "the lock of an assembled tree"):
            return self._get_or_build_locked(key, recipe, build)

    def _get_or_build_locked(
        self, key: str, recipe: Mapping[str, object], build: Callable[[Path], Mapping[str, object]],
    ) -> CachedTree:
        entry_dir = self.root / key
        reused = self._load(entry_dir)
        if reused is not None:
            return reused
        with atomic_directory(entry_dir) as staging:
            manifest = build(staging / TREE_DIR)
            # Identities are taken after the staging directory has its final name: renaming
            # the parent does not change any identity below it.
            document = {"format": ENTRY_FORMAT, "recipe": dict(recipe), "manifest": dict(manifest)}
            write_bytes_atomic(staging / "recipe.json", canonical_json_bytes(document))
        statuses: dict[str, os.stat_result] = {}
        try:
            walk = walk_tree(entry_dir / TREE_DIR, statuses)
            write_bytes_atomic(entry_dir / ENTRY_FILE, json.dumps({"walk": walk.digest}).encode())
        except BaseException:
            # an entry without its walk is never reused (``_load``): not left taking the room
            # of a whole tree (a full disk is what failed the write, most likely)
            with interrupts_held():
                shutil.rmtree(entry_dir, ignore_errors=True)
            raise
        return CachedTree(entry_dir / TREE_DIR, manifest, reused=False, walk=walk, statuses=statuses)

    def _load(self, entry_dir: Path) -> CachedTree | None:
        try:
            recorded = json.loads((entry_dir / ENTRY_FILE).read_bytes())
            document = json.loads((entry_dir / "recipe.json").read_bytes())
            if not isinstance(recorded, dict) or not isinstance(document, dict):
                raise ValueError("not an object")
        except (FileNotFoundError, ValueError):
            if entry_dir.exists():
                shutil.rmtree(entry_dir, ignore_errors=True)
            return None
        tree = entry_dir / TREE_DIR
        intact = False
        statuses: dict[str, os.stat_result] = {}
        if tree.is_dir():
            if "walk" in recorded:
                walk = walk_tree(tree, statuses)
                intact = walk.digest == recorded["walk"]
            elif "identity" in recorded:  # an entry of an earlier version
                intact = _listed_identity(tree) == recorded["identity"]
                walk = walk_tree(tree, statuses)
                if intact:
                    write_bytes_atomic(entry_dir / ENTRY_FILE, json.dumps({"walk": walk.digest}).encode())
        if not intact:
            shutil.rmtree(entry_dir, ignore_errors=True)
            return None
        return CachedTree(tree, document.get("manifest", {}), reused=True, walk=walk, statuses=statuses)


class WalkedTrees:
    """The lstat of a path inside one of this build's cached trees, from the walk that
    validated the tree (``CachedTree.statuses``) instead of a system call.

    Safe because that walk is the tree cache's validity check: it took every path's type,
    mode, size, mtime, ctime, inode and link count this build and found them as recorded
    when the tree was made, the same walk the layer cache's fingerprint stands on. A file
    hash looked up under such a status is a record bound to that identity (see
    ``core.file_hashes``); the build trusts its cached trees from that walk on, as it
    already does for their layers and kept facts."""

    def __init__(self, entries: Iterable[CachedTree]) -> None:
        self._trees = [(os.path.join(entry.tree, ""), entry.statuses) for entry in entries if entry.statuses]

    def _inside(self, path: str | os.PathLike[str]) -> tuple[str, Mapping[str, os.stat_result]] | None:
        text = os.fspath(path)
        for prefix, statuses in self._trees:
            if text.startswith(prefix):
                return text[len(prefix):], statuses
        return None

    def status(self, path: str | os.PathLike[str]) -> os.stat_result | None:
        """The walk's lstat of ``path``; None when no walked tree holds it (absent from a
        walked tree included: the caller's own system call then says why)."""
        inside = self._inside(path)
        return None if inside is None else inside[1].get(inside[0])

    def under(self, directory: str | os.PathLike[str]) -> dict[str, os.stat_result] | None:
        """Every path below ``directory`` (relative to it) with its lstat, in the walk's
        order; None when ``directory`` is not a directory of a walked tree."""
        inside = self._inside(directory)
        if inside is None:
            return None
        relative, statuses = inside
        if not stat.S_ISDIR(getattr(statuses.get(relative), "st_mode", 0)):
            return None
        prefix = relative + "/"
        return {path[len(prefix):]: status for path, status in statuses.items() if path.startswith(prefix)}
