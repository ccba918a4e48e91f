"""Tree digests: the NAR serialization of a path and its hash (`nar_serialize`,
`nar_digest`, `nar_hash`), equal to ``nix hash path``; and git object ids (`git_blob_id`,
`git_tree_id`), equal to what ``git add -A && git write-tree`` stores; both of a directory
from one read of each file (`nar_digest_and_git_tree`).

Tree walks read each file once, in `READ_CHUNK` pieces, and feed the hash directly: the
NAR framing and the file bytes go through one hasher in the same pass, nothing is
serialized to a buffer first. Paths are handled as bytes end to end so names that are not
valid UTF-8 hash exactly as the file system holds them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .digest import (
    READ_CHUNK,
    SMALL_FILE,
    Hash,
    changed_while_read,
    lstat_mode,
    new_hasher,
    open_regular,
    read_exactly,
    readv_into,
    unreadable,
    unsupported_file,
)
from .errors import InputError

# ---------------------------------------------------------------------------------------
# NAR serialization
#
# A NAR is a sequence of strings, each an 8-byte little-endian length, the bytes, and
# zero padding to a multiple of 8. Directory entries come sorted by name bytes (Nix keeps
# them in a std::map<std::string>). Only the owner-execute bit of a file is kept.

NarSink = Callable[[bytes | bytearray | memoryview], object]


def _nar_string(value: bytes) -> bytes:
    return len(value).to_bytes(8, "little") + value + bytes(-len(value) % 8)


_PADDING = bytes(8)
_NAR_MAGIC = _nar_string(b"nix-archive-1")
_NAR_OPEN = _nar_string(b"(")
_NAR_CLOSE = _nar_string(b")")
_NAR_REGULAR = _NAR_OPEN + _nar_string(b"type") + _nar_string(b"regular") + _nar_string(b"contents")
_NAR_EXECUTABLE = (
    _NAR_OPEN
    + _nar_string(b"type")
    + _nar_string(b"regular")
    + _nar_string(b"executable")
    + _nar_string(b"")
    + _nar_string(b"contents")
)
_NAR_SYMLINK = _NAR_OPEN + _nar_string(b"type") + _nar_string(b"symlink") + _nar_string(b"target")
_NAR_DIRECTORY = _NAR_OPEN + _nar_string(b"type") + _nar_string(b"directory")
_NAR_ENTRY_NAME = _nar_string(b"entry") + _NAR_OPEN + _nar_string(b"name")
_NAR_NODE = _nar_string(b"node")
_NAR_ENTRY_END = _NAR_CLOSE + _NAR_CLOSE  # closes the node, then the entry

_MAX_DEPTH = 2000


@dataclass(frozen=True)
class NarDigest:
    """NAR hash of a path and the NAR's length, as ``nix path-info`` reports them."""

    nar_hash: Hash
    nar_size: int


def nar_serialize(path: str | os.PathLike[str] | bytes, sink: NarSink) -> int:
    """Write the NAR serialization of ``path`` to ``sink`` piece by piece; return its size.

    ``sink`` must consume each piece before returning (pieces may be views of a reused
    read buffer). The root is not followed if it is a symlink, as in Nix. Sockets,
    devices and FIFOs are refused with their path.
    """
    walker = _NarWalker(sink)
    walker.dump_root(os.fsencode(path))
    return walker.size


def nar_digest(path: str | os.PathLike[str] | bytes, algorithm: str = "sha256") -> NarDigest:
    """NAR hash and NAR size of ``path`` in one streaming pass."""
    hasher = new_hasher(algorithm)
    size = nar_serialize(path, hasher.update)
    return NarDigest(Hash(algorithm, hasher.digest()), size)


def nar_hash(path: str | os.PathLike[str] | bytes, algorithm: str = "sha256") -> Hash:
    """What ``nix hash path --type <algorithm> PATH`` prints (as a `Hash`)."""
    return nar_digest(path, algorithm).nar_hash


class _NarWalker:
    def __init__(self, sink: NarSink) -> None:
        self._sink = sink
        self.size = 0
        self._buffer = memoryview(bytearray(READ_CHUNK))

    def _write(self, piece: bytes | bytearray | memoryview) -> None:
        self.size += len(piece)
        self._sink(piece)

    def dump_root(self, path: bytes) -> None:
        try:
            status = os.lstat(path)
        except OSError as exc:
            raise unreadable(path, exc) from exc
        self._write(_NAR_MAGIC)
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            self._dump_directory(path, 0)
        elif stat.S_ISLNK(mode):
            self._dump_symlink(path)
        elif stat.S_ISREG(mode):
            self._dump_file(path)
        else:
            raise unsupported_file(path, mode)

    def _dump_directory(self, path: bytes, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise InputError(f"{os.fsdecode(path)}: directory nesting deeper than {_MAX_DEPTH}")
        entries = _sorted_entries(path)
        self._write(_NAR_DIRECTORY)
        write = self._write
        for entry in entries:
            name = entry.name
            write(_NAR_ENTRY_NAME + _nar_string(name) + _NAR_NODE)
            if entry.is_dir(follow_symlinks=False):
                self._dump_directory(entry.path, depth + 1)
            elif entry.is_symlink():
                self._dump_symlink(entry.path)
            elif entry.is_file(follow_symlinks=False):
                self._dump_file(entry.path)
            else:
                raise unsupported_file(entry.path, lstat_mode(entry.path))
            write(_NAR_CLOSE)
        write(_NAR_CLOSE)

    def _dump_symlink(self, path: bytes) -> None:
        try:
            target = os.readlink(path)
        except OSError as exc:
            raise unreadable(path, exc) from exc
        self._write(_NAR_SYMLINK + _nar_string(target) + _NAR_CLOSE)

    def _dump_file(self, path: bytes) -> None:
        fd, status = _open_file(path)
        try:
            size = status.st_size
            header = _NAR_EXECUTABLE if status.st_mode & stat.S_IXUSR else _NAR_REGULAR
            self._write(header + size.to_bytes(8, "little"))
            _stream_file(fd, size, path, self._buffer, self._write)
            self._write(_PADDING[: -size % 8] + _NAR_CLOSE)
        finally:
            os.close(fd)


def _open_file(path: bytes) -> tuple[int, os.stat_result]:
    """An fd of the regular file ``path`` (never through a symlink) and its status."""
    fd = open_regular(path)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise unsupported_file(path, status.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def _stream_file(
    fd: int, size: int, path: bytes, buffer: memoryview, consume: Callable[[bytes | memoryview], object]
) -> None:
    """Hand the ``size`` bytes of ``fd`` to ``consume`` in order: a small file in one read, a
    larger one through ``buffer``; a file that ends early changed while it was read."""
    if size <= SMALL_FILE:
        consume(read_exactly(fd, size, path))
        return
    remaining = size
    while remaining:
        view = buffer[: min(remaining, READ_CHUNK)]
        count = readv_into(fd, view, path)
        if count == 0:
            raise changed_while_read(path)
        consume(view[:count])
        remaining -= count


def _sorted_entries(path: bytes) -> list[os.DirEntry[bytes]]:
    try:
        with os.scandir(path) as iterator:
            entries = list(iterator)
    except OSError as exc:
        raise unreadable(path, exc) from exc
    entries.sort(key=_entry_name)
    return entries


def _entry_name(entry: os.DirEntry[bytes]) -> bytes:
    return entry.name


# ---------------------------------------------------------------------------------------
# Git object ids
#
# A blob id is H("blob <size>\0" + content); a tree id is H("tree <size>\0" + entries),
# each entry "<mode> <name>\0<raw id>". Modes: 100644, 100755 (owner-execute bit set),
# 120000 (symlink; the blob holds the target), 40000 (tree). Entries sort by name bytes,
# a tree's name compared as if it ended in "/". Directories with nothing to store are
# absent, as git's index cannot hold them. Every file is hashed as-is: no .gitignore, no
# .gitattributes conversion (what `git add --force` with no attributes stores, and what
# a clean checkout of a commit holds).

GitObjectFormat = Literal["sha1", "sha256"]
GIT_OBJECT_FORMATS: tuple[str, ...] = ("sha1", "sha256")

_GIT_HASHERS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256}
_GIT_MODE_FILE = b"100644 "
_GIT_MODE_EXECUTABLE = b"100755 "
_GIT_MODE_SYMLINK = b"120000 "
_GIT_MODE_TREE = b"40000 "


def git_blob_id(path: str | os.PathLike[str] | bytes, object_format: str = "sha1") -> str:
    """Hex blob id git stores for ``path``: a file's bytes, or a symlink's target."""
    new_hasher = _git_hasher(object_format)
    encoded = os.fsencode(path)
    mode = lstat_mode(encoded)
    if stat.S_ISLNK(mode):
        return _git_symlink_blob(encoded, new_hasher).hex()
    if stat.S_ISREG(mode):
        return _git_file_blob(encoded, new_hasher, memoryview(bytearray(READ_CHUNK)))[1].hex()
    if stat.S_ISDIR(mode):
        raise InputError(f"{os.fsdecode(encoded)}: is a directory; use the git tree id")
    raise unsupported_file(encoded, mode)


def git_tree_id(path: str | os.PathLike[str] | bytes, object_format: str = "sha1") -> str:
    """Hex tree id of a directory as ``git add -A && git write-tree`` would store it.

    ``.git`` entries are excluded at every level. Names git refuses to store (``.GIT``,
    ``git~1``, a symlink named ``.gitmodules``, …) and nested repositories (which git
    records as submodule links, not as their files) are refused with their path.
    """
    new_hasher = _git_hasher(object_format)
    encoded = os.fsencode(path)
    mode = lstat_mode(encoded)
    if not stat.S_ISDIR(mode):
        raise InputError(f"{os.fsdecode(encoded)}: is not a directory; a git tree id needs one")
    walker = _GitTreeWalker(new_hasher)
    raw = walker.tree(encoded, 0)
    if raw is None:
        raw = _git_object(new_hasher, b"tree", b"")
    return raw.hex()


def _git_hasher(object_format: str) -> Callable[..., hashlib._Hash]:
    new_hasher = _GIT_HASHERS.get(object_format)
    if new_hasher is None:
        raise InputError(
            f"unknown git object format {object_format!r}; known: {', '.join(GIT_OBJECT_FORMATS)}"
        )
    return new_hasher


def _git_object(new_hasher: Callable[..., hashlib._Hash], kind: bytes, body: bytes) -> bytes:
    hasher = new_hasher(kind + b" %d\0" % len(body))
    hasher.update(body)
    return hasher.digest()


def _git_symlink_blob(path: bytes, new_hasher: Callable[..., hashlib._Hash]) -> bytes:
    try:
        target = os.readlink(path)
    except OSError as exc:
        raise unreadable(path, exc) from exc
    return _git_object(new_hasher, b"blob", target)


def _git_file_blob(
    path: bytes, new_hasher: Callable[..., hashlib._Hash], buffer: memoryview
) -> tuple[bytes, bytes]:
    fd, status = _open_file(path)
    try:
        mode = _GIT_MODE_EXECUTABLE if status.st_mode & stat.S_IXUSR else _GIT_MODE_FILE
        hasher = new_hasher(b"blob %d\0" % status.st_size)
        _stream_file(fd, status.st_size, path, buffer, hasher.update)
        return mode, hasher.digest()
    finally:
        os.close(fd)


class _GitTreeWalker:
    def __init__(self, new_hasher: Callable[..., hashlib._Hash]) -> None:
        self.new_hasher = new_hasher
        self._buffer = memoryview(bytearray(READ_CHUNK))

    def tree(self, path: bytes, depth: int) -> bytes | None:
        """Raw tree id of ``path``, or None when git would store nothing for it."""
        if depth > _MAX_DEPTH:
            raise InputError(f"{os.fsdecode(path)}: directory nesting deeper than {_MAX_DEPTH}")
        new_hasher = self.new_hasher
        keyed: list[tuple[bytes, bytes]] = []
        for entry in _sorted_entries(path):
            name = entry.name
            if name == b".git":
                if depth > 0:
                    _refuse_nested_repository(entry)
                continue
            if _git_refuses_name(name):
                raise InputError(
                    f"{os.fsdecode(entry.path)}: git refuses to store a path named "
                    f"{os.fsdecode(name)!r} (it aliases .git)"
                )
            if entry.is_dir(follow_symlinks=False):
                raw = self.tree(entry.path, depth + 1)
                if raw is not None:
                    keyed.append((name + b"/", _GIT_MODE_TREE + name + b"\0" + raw))
            elif entry.is_symlink():
                if _git_refuses_symlink_name(name):
                    raise InputError(
                        f"{os.fsdecode(entry.path)}: git refuses a symlink named "
                        f"{os.fsdecode(name)!r} (it aliases .gitmodules)"
                    )
                raw = _git_symlink_blob(entry.path, new_hasher)
                keyed.append((name, _GIT_MODE_SYMLINK + name + b"\0" + raw))
            elif entry.is_file(follow_symlinks=False):
                mode, raw = _git_file_blob(entry.path, new_hasher, self._buffer)
                keyed.append((name, mode + name + b"\0" + raw))
            else:
                raise unsupported_file(entry.path, lstat_mode(entry.path))
        if not keyed:
            return None
        keyed.sort()
        return _git_object(new_hasher, b"tree", b"".join(record for _, record in keyed))


def _refuse_nested_repository(entry: os.DirEntry[bytes]) -> None:
    """git records a nested repository as a submodule link to its HEAD commit, which is
    not a function of the files; refuse rather than give a different id. A ``.git``
    that is no repository (no HEAD) is skipped by git, and by us."""
    is_repository = entry.is_file(follow_symlinks=False) or os.path.lexists(
        os.path.join(entry.path, b"HEAD")
    )
    if is_repository:
        parent = os.fsdecode(os.path.dirname(entry.path))
        raise InputError(
            f"{parent}: is a nested git repository; git stores it as a submodule link, "
            f"not as files, so its tree id is not a function of the directory"
        )


def _only_ntfs_suffix(rest: bytes, *, backslash: bool) -> bool:
    """NTFS ignores trailing dots and spaces, and ':' starts an alternate data stream."""
    for byte in rest:
        if byte == 0x3A or (backslash and byte == 0x5C):
            return True
        if byte not in (0x20, 0x2E):
            return False
    return True


def _git_refuses_name(name: bytes) -> bool:
    """git's is_ntfs_dotgit (core.protectNTFS is on by default): ".git" in any case, or
    its 8.3 short name "git~1", followed only by dots/spaces or by ':' or '\\'."""
    lowered = name.lower()
    return any(
        lowered.startswith(stem) and _only_ntfs_suffix(lowered[len(stem) :], backslash=True)
        for stem in (b".git", b"git~1")
    )


def _git_refuses_symlink_name(name: bytes) -> bool:
    """git's is_ntfs_dotgitmodules: a symlink may not alias ".gitmodules"."""
    lowered = name.lower()
    if lowered.startswith(b".gitmodules"):
        return _only_ntfs_suffix(lowered[11:], backslash=False)
    if lowered[:7] == b"gitmod~" and lowered[7:8] in (b"1", b"2", b"3", b"4"):
        return _only_ntfs_suffix(lowered[8:], backslash=False)
    return _is_fallback_short_name(lowered, b"gi7eba") and _only_ntfs_suffix(
        lowered[8:], backslash=False
    )


def _is_fallback_short_name(lowered: bytes, prefix: bytes) -> bool:
    """The 8.3 fallback form NTFS derives from a hash: up to 6 characters of ``prefix``,
    '~', a digit 1-9, then digits up to 8 characters in all."""
    if len(lowered) < 8:
        return False
    saw_tilde = False
    index = 0
    while index < 8:
        byte = lowered[index]
        if saw_tilde:
            if not 0x30 <= byte <= 0x39:
                return False
        elif byte == 0x7E:
            index += 1
            if not 0x31 <= lowered[index] <= 0x39:
                return False
            saw_tilde = True
        elif index >= 6 or byte & 0x80 or byte != prefix[index]:
            return False
        index += 1
    return True


# ---------------------------------------------------------------------------------------
# Both at once: one walk, each file opened and read once, its bytes fed to the NAR hash
# and to its git blob id. The NAR holds every entry (``.git`` too); git's tree leaves out
# ``.git`` and what is below it, and refuses what `git_tree_id` refuses.


def nar_digest_and_git_tree(
    path: str | os.PathLike[str] | bytes, algorithm: str = "sha256", object_format: str = "sha1"
) -> tuple[NarDigest, str]:
    """``(nar_digest(path, algorithm), git_tree_id(path, object_format))`` of a directory."""
    new_git_hasher = _git_hasher(object_format)
    encoded = os.fsencode(path)
    if not stat.S_ISDIR(lstat_mode(encoded)):
        raise InputError(f"{os.fsdecode(encoded)}: is not a directory; a git tree id needs one")
    nar_hasher = new_hasher(algorithm)
    walker = _NarGitWalker(nar_hasher.update, new_git_hasher)
    walker._write(_NAR_MAGIC)
    raw = walker.both(encoded, 0, in_git=True)
    if raw is None:
        raw = _git_object(new_git_hasher, b"tree", b"")
    return NarDigest(Hash(algorithm, nar_hasher.digest()), walker.size), raw.hex()


class _NarGitWalker(_NarWalker):
    def __init__(self, sink: NarSink, new_git_hasher: Callable[..., hashlib._Hash]) -> None:
        super().__init__(sink)
        self.new_git_hasher = new_git_hasher

    def both(self, path: bytes, depth: int, *, in_git: bool) -> bytes | None:
        """NAR-serialize the directory ``path``; return its raw git tree id (None when git
        stores nothing for it, or when ``in_git`` is False: below a ``.git``)."""
        if depth > _MAX_DEPTH:
            raise InputError(f"{os.fsdecode(path)}: directory nesting deeper than {_MAX_DEPTH}")
        write = self._write
        write(_NAR_DIRECTORY)
        keyed: list[tuple[bytes, bytes]] = []
        for entry in _sorted_entries(path):
            name = entry.name
            tracked = in_git and name != b".git"
            if in_git and name == b".git" and depth > 0:
                _refuse_nested_repository(entry)
            if tracked and _git_refuses_name(name):
                raise InputError(
                    f"{os.fsdecode(entry.path)}: git refuses to store a path named "
                    f"{os.fsdecode(name)!r} (it aliases .git)"
                )
            write(_NAR_ENTRY_NAME + _nar_string(name) + _NAR_NODE)
            record: tuple[bytes, bytes] | None = None
            if entry.is_dir(follow_symlinks=False):
                raw = self.both(entry.path, depth + 1, in_git=tracked)
                if raw is not None:
                    record = (name + b"/", _GIT_MODE_TREE + name + b"\0" + raw)
            elif entry.is_symlink():
                if tracked and _git_refuses_symlink_name(name):
                    raise InputError(
                        f"{os.fsdecode(entry.path)}: git refuses a symlink named "
                        f"{os.fsdecode(name)!r} (it aliases .gitmodules)"
                    )
                try:
                    target = os.readlink(entry.path)
                except OSError as exc:
                    raise unreadable(entry.path, exc) from exc
                write(_NAR_SYMLINK + _nar_string(target) + _NAR_CLOSE)
                record = (name, _GIT_MODE_SYMLINK + name + b"\0" + _git_object(self.new_git_hasher, b"blob", target))
            elif entry.is_file(follow_symlinks=False):
                mode, raw = self._file(entry.path)
                record = (name, mode + name + b"\0" + raw)
            else:
                raise unsupported_file(entry.path, lstat_mode(entry.path))
            write(_NAR_CLOSE)
            if tracked and record is not None:
                keyed.append(record)
        write(_NAR_CLOSE)
        if not in_git or not keyed:
            return None
        keyed.sort()
        return _git_object(self.new_git_hasher, b"tree", b"".join(record for _, record in keyed))

    def _file(self, path: bytes) -> tuple[bytes, bytes]:
        fd, status = _open_file(path)
        try:
            size = status.st_size
            executable = status.st_mode & stat.S_IXUSR
            self._write((_NAR_EXECUTABLE if executable else _NAR_REGULAR) + size.to_bytes(8, "little"))
            blob = self.new_git_hasher(b"blob %d\0" % size)

            def both(piece: bytes | memoryview) -> None:
                self._write(piece)
                blob.update(piece)

            _stream_file(fd, size, path, self._buffer, both)
            self._write(_PADDING[: -size % 8] + _NAR_CLOSE)
            return (_GIT_MODE_EXECUTABLE if executable else _GIT_MODE_FILE), blob.digest()
        finally:
            os.close(fd)
