"""What a layer is built from: host trees placed at a target, generated files, deletions and
opaque directories; and the one stat walk of a tree that the caches use as its identity
(contents are not read)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple


class TreeWalk(NamedTuple):
    """One lstat walk of a tree (``walk_tree``): the sha256 of every path's stat identity,
    and the newest ctime seen."""

    digest: str
    newest_ctime_ns: int


@dataclass(frozen=True)
class TreeSource:
    """A host directory whose contents appear under ``target`` in the image. ``walk``:
    the tree's ``walk_tree`` taken by whoever just validated it (a caller's tree cache,
    such as the compose stage's), used by the layer cache's input fingerprint instead of
    walking again."""

    host_dir: str
    target: str = "/"
    walk: TreeWalk | None = field(default=None, compare=False)


@dataclass(frozen=True)
class GeneratedFile:
    """A file made by the build (not copied from a tree), at ``target`` in the image."""

    target: str
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class LayerInput:
    sources: tuple[TreeSource, ...] = ()
    files: tuple[GeneratedFile, ...] = ()
    deletions: tuple[str, ...] = ()
    opaque_dirs: tuple[str, ...] = ()


def walk_lstat(root: str | os.PathLike[str]) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, host path, lstat) of every path under ``root``: each directory's
    entries sorted by name, depth first, symlinked directories not followed. The one
    stat walk of the caches' validity checks (tree cache identity, layer input
    fingerprint)."""
    stack: list[tuple[str, str]] = [(os.fspath(root), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as listing:
            children = sorted(listing, key=lambda child: child.name)
        subdirectories = []
        for child in children:
            status = child.stat(follow_symlinks=False)
            relative = prefix + child.name
            if stat.S_ISDIR(status.st_mode):
                subdirectories.append((child.path, relative + "/"))
            yield relative, child.path, status
        stack.extend(reversed(subdirectories))


def walk_tree(root: str | os.PathLike[str], statuses: dict[str, os.stat_result] | None = None) -> TreeWalk:
    """The stat identity of every path under ``root`` (``walk_lstat`` order), hashed: a
    directory's mode and inode; a symlink's target and ctime; a file's mode, size,
    mtime, ctime, inode and link count. Any write, chmod, rename, link, addition or
    removal under ``root`` changes it (ctime cannot be set by ordinary programs); the
    contents are not read. The one validity check of the caches: the tree cache's entry
    and the layer cache's input fingerprint. ``statuses`` (when given) receives every
    path's lstat, by relative path."""
    hasher = hashlib.sha256()
    lines: list[str] = []
    newest = 0
    for relative, host_path, status in walk_lstat(root):
        if statuses is not None:
            statuses[relative] = status
        mode = status.st_mode
        newest = max(newest, status.st_ctime_ns)
        if stat.S_ISDIR(mode):
            lines.append(f"d\0{relative}\0{mode:o}\0{status.st_ino}\n")
        elif stat.S_ISLNK(mode):
            lines.append(f"l\0{relative}\0{os.readlink(host_path)}\0{status.st_ctime_ns}\n")
        else:
            lines.append(
                f"f\0{relative}\0{mode:o}\0{status.st_size}\0{status.st_mtime_ns}\0"
                f"{status.st_ctime_ns}\0{status.st_ino}\0{status.st_nlink}\n"
            )
        if len(lines) >= 4096:
            hasher.update("".join(lines).encode("utf-8", "surrogateescape"))
            lines.clear()
    hasher.update("".join(lines).encode("utf-8", "surrogateescape"))
    return TreeWalk(hasher.hexdigest(), newest)
