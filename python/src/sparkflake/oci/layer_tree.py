"""From host trees, generated files and deletions to the ordered entry list of a layer.

Determinism is decided here:
- entries are sorted bytewise by their UTF-8 path, which puts every parent directory
  before its children ("a" < "a-b" < "a/b" still has "a" before "a/b");
- modes are normalized: directories 0755, regular files 0755 if the owner may execute
  them else 0644, symlinks 0777; setuid/setgid/sticky bits and group/other write bits
  from the host are dropped (umask and ownership of the build machine must not leak);
  generated files keep the mode they are given;
- symlink targets are stored verbatim;
- files sharing an inode inside one layer become one regular entry (the first path in
  sort order) and tar hardlinks for the others;
- deletions become whiteout files ``.wh.<name>`` in the parent directory, and opaque
  directories ``.wh..wh..opq``, as the OCI image spec (layer.md) describes.
Sockets, devices and FIFOs cannot be part of an image and are refused with their path.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.errors import InputError
from ..core.file_names import require_utf8_names
from .entry_safety import DOT_DOT, OPAQUE_WHITEOUT, WHITEOUT_PREFIX, path_escape
from .layer_input import LayerInput, TreeSource
from .tar_stream import EntryKind, TarEntry, encode_name


@dataclass
class ScannedEntry:
    entry: TarEntry
    origin: str
    inode: tuple[int, int] | None = None
    stat_key: tuple[int, ...] | None = field(default=None)


def normalize_image_path(path: str, *, what: str) -> str:
    """Normalize an image path to relative form without a trailing slash ("" is root)."""
    if not isinstance(path, str) or not path:
        raise InputError(f"{what}: empty image path")
    normalized = posixpath.normpath("/" + path).lstrip("/")
    if normalized == ".":
        normalized = ""
    if path_escape(path.lstrip("/")) == DOT_DOT:  # an absolute image path is this spec's usual form
        raise InputError(f"{what}: image path {path!r} must not contain '..'")
    encode_name(normalized, what=what)
    return normalized


def normalized_mode(st_mode: int) -> int:
    if stat.S_ISDIR(st_mode):
        return 0o755
    if stat.S_ISLNK(st_mode):
        return 0o777
    return 0o755 if st_mode & stat.S_IXUSR else 0o644


class _EntrySet:
    def __init__(self) -> None:
        self.by_path: dict[str, ScannedEntry] = {}

    def add(self, scanned: ScannedEntry) -> None:
        path = scanned.entry.path
        existing = self.by_path.get(path)
        if existing is None:
            self.by_path[path] = scanned
            return
        both_dirs = (
            existing.entry.kind is EntryKind.DIRECTORY and scanned.entry.kind is EntryKind.DIRECTORY
        )
        if both_dirs and existing.entry.mode == scanned.entry.mode:
            return
        raise InputError(
            f"duplicate target path /{path} in one layer: from {existing.origin} and from "
            f"{scanned.origin}"
        )

    def add_parents(self, path: str, origin: str) -> None:
        parent = posixpath.dirname(path)
        while parent:
            current = self.by_path.get(parent)
            if current is None:
                self.by_path[parent] = ScannedEntry(
                    TarEntry(parent, EntryKind.DIRECTORY, 0o755), origin
                )
            elif current.entry.kind is not EntryKind.DIRECTORY:
                raise InputError(
                    f"target path /{parent} is a {current.entry.kind.value} from "
                    f"{current.origin} but {origin} needs it to be a directory"
                )
            parent = posixpath.dirname(parent)


def scan_layer_input(layer_input: LayerInput) -> list[ScannedEntry]:
    """All entries of one layer in archive order (see the module docstring)."""
    entries = _EntrySet()
    for source in layer_input.sources:
        _scan_tree(source, entries)
    for generated in layer_input.files:
        path = normalize_image_path(generated.target, what="generated file")
        if not path:
            raise InputError("generated file: target must not be the image root")
        origin = f"generated file /{path}"
        entries.add_parents(path, origin)
        entries.add(
            ScannedEntry(
                TarEntry(
                    path,
                    EntryKind.FILE,
                    generated.mode & 0o7777,
                    size=len(generated.content),
                    content=generated.content,
                ),
                origin,
            )
        )
    whiteouts = [(p, False) for p in layer_input.deletions] + [
        (p, True) for p in layer_input.opaque_dirs
    ]
    for raw_path, opaque in whiteouts:
        path = normalize_image_path(raw_path, what="deletion" if not opaque else "opaque directory")
        if not path and not opaque:
            raise InputError("deletion: cannot delete the image root")
        if opaque:
            marker = posixpath.join(path, OPAQUE_WHITEOUT) if path else OPAQUE_WHITEOUT
        else:
            if path in entries.by_path:
                raise InputError(
                    f"/{path} is both deleted and added ({entries.by_path[path].origin}) "
                    "in one layer"
                )
            marker = posixpath.join(
                posixpath.dirname(path), WHITEOUT_PREFIX + posixpath.basename(path)
            )
        origin = f"whiteout for /{path}"
        entries.add_parents(marker, origin)
        entries.add(ScannedEntry(TarEntry(marker, EntryKind.FILE, 0o644, content=b""), origin))
    ordered = [entries.by_path[path] for path in sorted(entries.by_path, key=_sort_key)]
    return _link_shared_inodes(ordered)


def _sort_key(path: str) -> bytes:
    return path.encode("utf-8")


def _scan_tree(source: TreeSource, entries: _EntrySet) -> None:
    host_dir = os.fspath(source.host_dir)
    target = normalize_image_path(source.target, what=f"target of tree {host_dir}")
    try:
        root_stat = os.stat(host_dir)
    except FileNotFoundError as exc:
        raise InputError(f"tree {host_dir} does not exist") from exc
    except OSError as exc:
        raise InputError(f"tree {host_dir}: cannot stat: {exc.strerror}") from exc
    if not stat.S_ISDIR(root_stat.st_mode):
        raise InputError(f"tree {host_dir} is not a directory")
    if target:
        entries.add_parents(target, f"tree {host_dir}")
        entries.add(ScannedEntry(TarEntry(target, EntryKind.DIRECTORY, 0o755), f"tree {host_dir}"))
    stack = [(host_dir, target)]
    while stack:
        directory, image_dir = stack.pop()
        try:
            with os.scandir(directory) as listing:
                children = list(listing)
        except OSError as exc:
            raise InputError(f"{directory}: cannot list directory: {exc.strerror}") from exc
        prefix = image_dir + "/" if image_dir else ""
        tree_origin = f"tree {host_dir} ("
        for child in children:
            host_path = child.path
            name = child.name
            if not name.isascii():  # ASCII names always encode; others may not be UTF-8
                require_utf8_names(f"file name in {directory} {os.fsencode(name)!r}")
                encode_name(name, what=f"file name in {directory}")
            path = prefix + name
            try:
                st = child.stat(follow_symlinks=False)
            except OSError as exc:
                raise InputError(f"{host_path}: cannot stat: {exc.strerror}") from exc
            origin = tree_origin + host_path + ")"
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                entries.add(ScannedEntry(TarEntry(path, EntryKind.DIRECTORY, 0o755), origin))
                stack.append((host_path, path))
            elif stat.S_ISREG(mode):
                if not os.access(host_path, os.R_OK):
                    raise InputError(f"{host_path}: file is not readable")
                entries.add(
                    ScannedEntry(
                        TarEntry(
                            path,
                            EntryKind.FILE,
                            normalized_mode(mode),
                            size=st.st_size,
                            source=host_path,
                        ),
                        origin,
                        inode=(st.st_dev, st.st_ino) if st.st_nlink > 1 else None,
                        stat_key=(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
                    )
                )
            elif stat.S_ISLNK(mode):
                try:
                    link_target = os.readlink(host_path)
                except OSError as exc:
                    raise InputError(f"{host_path}: cannot read link: {exc.strerror}") from exc
                if not link_target.isascii():
                    require_utf8_names(f"symlink target of {host_path} {os.fsencode(link_target)!r}")
                encode_name(link_target, what=f"symlink target of {host_path}")
                entries.add(
                    ScannedEntry(
                        TarEntry(path, EntryKind.SYMLINK, 0o777, link_target=link_target), origin
                    )
                )
            else:
                raise InputError(f"{host_path}: {_special_kind(mode)} cannot be stored in an image")


def _special_kind(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def _link_shared_inodes(ordered: Iterable[ScannedEntry]) -> list[ScannedEntry]:
    first_path: dict[tuple[int, int], str] = {}
    result = []
    for scanned in ordered:
        if scanned.inode is not None:
            first = first_path.get(scanned.inode)
            if first is None:
                first_path[scanned.inode] = scanned.entry.path
            else:
                scanned = ScannedEntry(
                    TarEntry(
                        scanned.entry.path,
                        EntryKind.HARDLINK,
                        scanned.entry.mode,
                        link_target=first,
                    ),
                    scanned.origin,
                )
        result.append(scanned)
    return result
