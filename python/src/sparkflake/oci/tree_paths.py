"""Paths inside an image tree being assembled on the build machine.

An archive member names a path inside the image; it must land inside the staging root.
Member names are normalized (``./`` stripped) and refused when absolute or when they
contain ``..``. Symlinks already in the tree are followed with image semantics: an
absolute target is relative to the image root, a relative one to its directory; a chain
that climbs above the root is an escape and refused, so a member can never be written
through a symlink to a place outside the tree.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.errors import CheckFailed
from .entry_safety import ABSOLUTE, DOT_DOT, path_escape

_MAX_SYMLINK_HOPS = 40


def normalize_member(name: str, *, source: str) -> str:
    """``./usr/bin/x`` → ``usr/bin/x``; ``""`` for the root itself; refuses escapes."""
    if "\x00" in name:
        raise CheckFailed(f"{source}: member name {name!r} contains NUL", check_id="path-escape")
    stripped = name
    while stripped.startswith("./"):
        stripped = stripped[2:]
    if stripped in (".", ""):
        return ""
    escape = path_escape(stripped)
    if escape == ABSOLUTE:
        raise CheckFailed(f"{source}: member {name!r} is an absolute path", check_id="path-escape")
    if escape == DOT_DOT:
        raise CheckFailed(f"{source}: member {name!r} contains '..'", check_id="path-escape")
    return "/".join(p for p in stripped.split("/") if p not in ("", "."))


def resolve_parent(root: Path, relative: str, *, source: str, create: bool = True) -> Path:
    """The real directory (inside ``root``) that will hold ``relative``'s last component.

    Intermediate symlinks are followed inside the image; missing directories are created
    (mode 0755) when ``create``.
    """
    parts = relative.split("/")[:-1]
    current: list[str] = []
    pending = list(parts)
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                raise CheckFailed(
                    f"{source}: {relative!r} resolves above the image root through a symlink",
                    check_id="path-escape",
                )
            current.pop()
            continue
        candidate = root.joinpath(*current, part)
        try:
            status = os.lstat(candidate)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(candidate, 0o755)
            current.append(part)
            continue
        if stat.S_ISLNK(status.st_mode):
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                raise CheckFailed(f"{source}: too many symlink levels under {relative!r}", check_id="path-escape")
            link = os.readlink(candidate)
            link_parts = link.split("/")
            if link.startswith("/"):
                current = []
            pending = [p for p in link_parts if p] + pending
            continue
        if not stat.S_ISDIR(status.st_mode):
            raise CheckFailed(
                f"{source}: {relative!r} needs {'/'.join(current + [part])!r} to be a directory, "
                "but a file is there",
                check_id="path-conflict",
            )
        current.append(part)
    return root.joinpath(*current)


def host_path_of(root: Path, relative: str, *, source: str) -> Path:
    """The build-machine path for image path ``relative`` (parent resolved, last not followed)."""
    parent = resolve_parent(root, relative, source=source)
    return parent / relative.split("/")[-1]


def check_link_target(relative: str, target: str, *, source: str) -> None:
    """A relative symlink target must not climb above the image root from where it sits."""
    if target.startswith("/"):
        return
    depth = len(relative.split("/")) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise CheckFailed(
                    f"{source}: symlink {relative!r} -> {target!r} points outside the image root",
                    check_id="path-escape",
                )
        elif part not in ("", "."):
            depth += 1


