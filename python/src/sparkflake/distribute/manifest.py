"""A checkpoint's manifest: every regular file's relative path, size and sha256.

Computed once at rank 0; each rank compares its own files against it, so a file whose size
and sha256 already match is reused and only the rest travel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.digest import is_sha256_hex, sha256_file
from ..core.errors import InputError
from ..core.records import field_record

RECORD_NAME = ".sparkflake-manifest.json"


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, POSIX separators, no "..", no leading "/"
    size: int
    sha256: str

    def as_record(self) -> dict[str, Any]:
        return field_record(self)


def build_manifest(root: Path) -> list[FileEntry]:
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    entries = []
    for path, relative in _copied_files(root):
        if path.is_symlink() or not path.is_file():
            raise InputError(f"{path}: only regular files can be replicated")
        entries.append(FileEntry(relative, path.stat().st_size, sha256_file(path)))
    entries.sort(key=lambda entry: entry.path.encode())
    return entries


def _copied_files(root: Path) -> Iterator[tuple[Path, str]]:
    """Every file below ``root`` (path, relative POSIX path) but the ones replication itself
    keeps there: the manifest record, and partial copies and lock files in progress. A
    symlink to a directory is not followed: it is yielded like a symlink to a file (which
    ``build_manifest`` refuses by name), never skipped with the files below it."""
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        linked = [name for name in subdirs if os.path.islink(os.path.join(directory, name))]
        for name in sorted(names + linked):
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            if relative == RECORD_NAME or (name.startswith(".") and name.endswith((".partial", ".lock"))):
                continue
            yield path, relative


def manifest_from_document(document: Any, origin: str = "manifest") -> list[FileEntry]:
    if not isinstance(document, dict) or not isinstance(document.get("files"), list):
        raise InputError(f"{origin}: expected an object with a files array")
    entries = []
    seen: set[str] = set()
    for index, raw in enumerate(document["files"]):
        where = f"{origin}: files[{index}]"
        if not isinstance(raw, dict) or set(raw) != {"path", "size", "sha256"}:
            raise InputError(f"{where}: expected exactly path, size, sha256")
        path, size, digest = raw["path"], raw["size"], raw["sha256"]
        if not isinstance(path, str) or not safe_relative(path):
            raise InputError(f"{where}.path: expected a relative path without '..', got {path!r}")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 1 << 63:  # a file's st_size
            raise InputError(f"{where}.size: expected a non-negative integer below 2^63, got {size!r}")
        if not is_sha256_hex(digest):
            raise InputError(f"{where}.sha256: expected 64 lowercase hex digits, got {digest!r}")
        if path in seen:
            raise InputError(f"{where}.path: duplicate {path!r}")
        seen.add(path)
        entries.append(FileEntry(path, size, digest))
    return entries


def manifest_bytes(entries: list[FileEntry]) -> bytes:
    document = {"files": [entry.as_record() for entry in entries]}
    return readable_json_bytes(document)


def safe_relative(path: str) -> bool:
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    parts = PurePosixPath(path).parts
    return all(part not in ("..", ".", "") for part in parts) and "/".join(parts) == path


def compare_directory(root: Path, entries: list[FileEntry], *, sizes_only: bool = False) -> dict[str, Any]:
    """Which manifest files ``root`` already holds correctly (size, then sha256), which are
    missing or differ, and which files it has that the manifest does not list."""
    matching, missing, mismatch = [], [], []
    for entry in entries:
        path = root / entry.path
        if not path.is_file():
            missing.append(entry.path)
        elif path.stat().st_size != entry.size or (not sizes_only and sha256_file(path) != entry.sha256):
            mismatch.append(entry.path)
        else:
            matching.append(entry.path)
    listed = {entry.path for entry in entries}
    extra = []
    if root.is_dir():
        extra = [entry.path for entry in build_manifest_paths(root) if entry.path not in listed]
    return {"matching": matching, "missing": missing, "mismatch": mismatch, "extra": extra}


def build_manifest_paths(root: Path) -> list[FileEntry]:
    """Like build_manifest, without hashing (sizes only): for listing what a copy holds."""
    return [FileEntry(relative, path.lstat().st_size, "")
            for path, relative in _copied_files(root) if ".mismatch-" not in path.name]


def record_manifest(root: Path, entries: list[FileEntry]) -> None:
    write_bytes_atomic(root / RECORD_NAME, manifest_bytes(entries))
