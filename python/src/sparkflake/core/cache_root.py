"""Whether a directory is sparkflake's cache, and claiming one for it.

A cache root sparkflake made carries ``.sparkflake-cache`` (``CACHE_MARKER``): written when
sparkflake creates the root, or adopts a directory that was empty. A cache made before the
marker existed is recognised by what it holds: nothing at its top level but directories
named as sparkflake names them (``CACHE_DIRECTORIES``). Anything else is not sparkflake's:
a build refuses to keep its cache there, and ``sparkflake cache gc|cleanup|verify`` refuse
to remove or move anything in it (an operator's OCI layout given as ``--cache`` has
``blobs/sha256/<hex>`` files too, which a content-addressed scan would take for inputs).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .errors import InputError
from .own_files import directory_names, is_regular_file

CACHE_MARKER = ".sparkflake-cache"
# every name sparkflake makes at a cache root (housekeeping.cache_entries scans each)
CACHE_DIRECTORIES = frozenset({"blobs", "git", "trees", "oci", "work", "runtime", "quarantine", "partial", "locks",
                               "builds", "capabilities", "compose"})
_MARKER_TEXT = b"sparkflake cache: every entry here was written by sparkflake (`sparkflake cache du` lists them)\n"


def has_cache_marker(root: Path) -> bool:
    """``root`` holds the marker as a regular file (a symlink or anything else does not count)."""
    return is_regular_file(root / CACHE_MARKER)


def cache_root_problem(root: Path) -> str | None:
    """None when ``root`` is absent, empty, marked, or a cache of an earlier version (only
    sparkflake's own directories at its top level); else why it is not sparkflake's cache."""
    names = directory_names(root, "a sparkflake cache")
    if isinstance(names, str):
        return names
    if not names or has_cache_marker(root):
        return None
    foreign = [name for name in names if name not in CACHE_DIRECTORIES or not (root / name).is_dir()
               or (root / name).is_symlink()]
    if not foreign:
        return None
    shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
    return (f"{root}: not a sparkflake cache: it has no {CACHE_MARKER} and holds {shown}, which sparkflake "
            f"does not make there (a cache holds only {', '.join(sorted(CACHE_DIRECTORIES))})")


def claim_cache_root(root: Path) -> None:
    """Make ``root`` sparkflake's cache: created with the marker when absent, marked when
    empty, accepted when it is one already; refused (InputError) when it is a directory
    sparkflake did not make, before anything is written into it. A root that cannot be
    made or marked (no permission) is left for the cache's own writes to report."""
    problem = cache_root_problem(root)
    if problem is not None:
        raise InputError(f"{problem}; give --cache a new or empty directory, or the directory of a "
                         "sparkflake cache")
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        if not os.listdir(root):
            _write_marker(root)


def _write_marker(root: Path) -> None:
    try:
        fd = os.open(root / CACHE_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:  # another run claimed it meanwhile
        return
    try:
        os.write(fd, _MARKER_TEXT)
    finally:
        os.close(fd)
