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
cache's input fingerprint of the same tree does not walk it again. (An entry written by
an earlier version, with every path's identity listed, is checked against that list once
and then given its digest.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..core.atomic_write import atomic_directory, write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from .layer_input import TreeWalk, walk_lstat, walk_tree

ENTRY_FORMAT = "sparkflake-tree-cache-v1"
ENTRY_FILE = "entry.json"
TREE_DIR = "tree"


def recipe_key(recipe: Mapping[str, object]) -> str:
    material = {"format": ENTRY_FORMAT, "sparkflake": __version__, **recipe}
    return hashlib.sha256(canonical_json_bytes(material, ascii_only=True)).hexdigest()


def _listed_identity(root: Path) -> dict[str, list]:
    """The per-path identity list of entries written by an earlier version."""
    identity: dict[str, list] = {}
    for relative, host_path, status in walk_lstat(root):
        record: list = [status.st_mode, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]
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

    def fact(self, name: str, compute: Callable[[Path], object]) -> object:
        """A fact derived from the tree's bytes only (for example the ELF machine of every
        file), computed once per entry and kept beside it. The entry was just validated
        path by path (or made), so a kept fact is as current as the tree; an entry that
        changed is discarded with its facts."""
        path = self.tree.parent / f"fact-{name}.json"
        try:
            return json.loads(path.read_bytes())["value"]
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        value = compute(self.tree)
        write_bytes_atomic(path, json.dumps({"value": value}, sort_keys=True).encode())
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
        entry_dir = self.root / key
        reused = self._load(entry_dir)
        if reused is not None:
            return reused
        with atomic_directory(entry_dir) as staging:
            manifest = build(staging / TREE_DIR)
            # Identities are taken after the staging directory has its final name: renaming
            # the parent does not change any identity below it.
            document = {"format": ENTRY_FORMAT, "recipe": dict(recipe), "manifest": dict(manifest)}
            write_bytes_atomic(staging / "recipe.json", json.dumps(document, sort_keys=True).encode())
        walk = walk_tree(entry_dir / TREE_DIR)
        write_bytes_atomic(entry_dir / ENTRY_FILE, json.dumps({"walk": walk.digest}).encode())
        return CachedTree(entry_dir / TREE_DIR, manifest, reused=False, walk=walk)

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
        if tree.is_dir():
            if "walk" in recorded:
                walk = walk_tree(tree)
                intact = walk.digest == recorded["walk"]
            elif "identity" in recorded:  # an entry of an earlier version
                intact = _listed_identity(tree) == recorded["identity"]
                walk = walk_tree(tree)
                if intact:
                    write_bytes_atomic(entry_dir / ENTRY_FILE, json.dumps({"walk": walk.digest}).encode())
        if not intact:
            shutil.rmtree(entry_dir, ignore_errors=True)
            return None
        return CachedTree(tree, document.get("manifest", {}), reused=True, walk=walk)
