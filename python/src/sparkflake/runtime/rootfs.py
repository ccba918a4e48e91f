"""The image's root filesystem, unpacked from its verified layers into a scratch directory.

One streaming pass per layer, through the project's OCI reader and ``oci.layer_stream``:
the compressed bytes are hashed (blob digest), decompressed, hashed again (diffID) and
extracted as they pass. A layer whose digests differ from the manifest or the config
fails the check and the partial root is removed; nothing of a root is used before every
layer of it verified.

Entries are extracted as a container runtime would see them, and no further: paths are
resolved inside the root (a symlink cannot lead a later entry out of it), OCI whiteouts
remove what lower layers wrote, device nodes and FIFOs are skipped (the sandbox gives its
own /dev), set-id bits are dropped, nothing is chowned. ``entry_problem`` is the one
place that decides whether an entry is refused, so the layer-entry safety check of the
OCI reader can replace it.

A root is reused only after ``verify_root`` found every entry's stat identity (device,
inode, size, mtime, ctime: any write changes ctime) equal to what the unpacking recorded.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.errors import CheckFailed, InputError
from ..core.file_hashes import stat_identity
from ..core.own_files import read_own_json
from ..core.progress import ProgressCallback
from ..oci.layer_scan import TarElfScanner
from ..oci.layer_stream import LayerStream
from ..oci.reader import ImageReader
from ..oci.tree_paths import host_path_of, normalize_member, resolve_parent
from ..oci.types import BlobRef

READ_CHUNK = 1 << 20
RECORD_NAME = "unpacked-root.json"
RECORD_SCHEMA = "sparkflake.unpacked-root/v1"
RECORD_LIMIT = 1 << 16  # the unpacked root's record: a few hundred bytes
WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"
# where the sandbox mounts its own /dev, /proc, /sys and the writable /tmp and /root (sandbox.py)
MOUNT_POINTS = ("dev", "proc", "sys", "tmp", "root")


def entry_problem(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` must not be extracted, or None. Skipped kinds are not problems."""
    try:
        normalize_member(member.name, source="entry")
        if member.islnk():
            if not normalize_member(member.linkname, source="hard link"):
                return f"a hard link to {member.linkname!r}"
    except CheckFailed as exc:
        return exc.message
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()
            or member.ischr() or member.isblk() or member.isfifo()):
        return f"an entry of unknown type {member.type!r}"
    return None


def _remove(path: Path) -> None:
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(status.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _remove_lower(directory: Path, relative: str, unpacked: set[str]) -> None:
    """Remove what ``directory`` (image path ``relative``) holds from lower layers: every
    entry below it but those this layer has unpacked already, as containers/storage and
    moby's UnpackLayer (pkg/archive/diff.go: its walk keeps ``unpackedPaths``) apply an
    opaque marker; the OCI layer spec lets a whiteout hide only what lower layers hold."""
    for child in os.listdir(directory):
        path = f"{relative}/{child}" if relative else child
        if path not in unpacked:
            _remove(directory / child)
        elif os.path.isdir(directory / child) and not os.path.islink(directory / child):
            _remove_lower(directory / child, path, unpacked)


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path, where: str, unpacked: set[str]) -> bool:
    """Extract one entry; False if it was skipped (device node, FIFO). ``unpacked``: the
    image paths this layer has extracted so far (an opaque marker keeps them)."""
    problem = entry_problem(member)
    if problem is not None:
        raise CheckFailed(f"{where}: entry {member.name!r} refused: {problem}", check_id="runtime.layer-entry")
    relative = normalize_member(member.name, source=where)
    if not relative:
        return True  # the root directory itself
    if member.ischr() or member.isblk() or member.isfifo():
        return False
    parent = resolve_parent(root, relative, source=where)
    leaf = relative.split("/")[-1]
    if leaf == OPAQUE_WHITEOUT:
        _remove_lower(parent, posixpath.dirname(relative), unpacked)
        return True
    if leaf.startswith(WHITEOUT_PREFIX):
        _remove(parent / leaf[len(WHITEOUT_PREFIX):])
        return True
    unpacked.add(relative)
    path = parent / leaf
    mode = member.mode & 0o777
    if member.isdir():
        if os.path.lexists(path) and not path.is_dir() or path.is_symlink():
            _remove(path)
        if not path.exists():
            os.mkdir(path, 0o755)
        os.chmod(path, mode | 0o700)
        return True
    _remove(path)
    if member.issym():
        os.symlink(member.linkname, path)
        return True
    if member.islnk():
        source = host_path_of(root, normalize_member(member.linkname, source=where), source=where)
        if not os.path.isfile(source) or os.path.islink(source):
            raise CheckFailed(f"{where}: hard link {member.name!r} -> {member.linkname!r}: no such regular file "
                              "earlier in the image", check_id="runtime.layer-entry")
        os.link(source, path)
        return True
    source_handle = tar.extractfile(member)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "wb") as target:
        if source_handle is not None:
            shutil.copyfileobj(source_handle, target, READ_CHUNK)
    os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
    return True


def extract_members(tar: tarfile.TarFile, root: Path, where: str) -> tuple[int, int]:
    """A layer's entries extracted over ``root`` in stream order: how many, how many of
    them skipped (device nodes, FIFOs)."""
    unpacked: set[str] = set()
    entries = skipped = 0
    for member in tar:
        entries += 1
        if not _extract(tar, member, root, where, unpacked):
            skipped += 1
    return entries, skipped


@dataclass(frozen=True)
class UnpackedRoot:
    path: Path
    manifest_digest: str | None
    layer_digests: tuple[str, ...]
    entries: int
    skipped: int


def unpack_layer(reader: ImageReader, ref: BlobRef, diff_id: str, root: Path,
                 on_bytes: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Extract one layer over ``root``, verifying its blob digest and diffID."""
    where = reader.files.describe(ref.name)
    with reader.open_blob(ref) as handle, LayerStream(handle, on_bytes=on_bytes) as stream:
        scanned = _ScannedStream(stream)
        try:
            with tarfile.open(fileobj=scanned, mode="r|") as tar:  # type: ignore[call-overload]  # typeshed has no overload for a stream mode over a fileobj
                entries, skipped = extract_members(tar, root, where)
            while scanned.read(READ_CHUNK):  # what follows the end is hashed and scanned too
                pass
        except (tarfile.TarError, ValueError, EOFError) as exc:
            raise InputError(f"{ref.role} blob {where}: {exc}") from None
        problem = scanned.scanner.error or scanned.scanner.unsafe
        if problem is not None:
            raise InputError(f"{ref.role} blob {where}: {problem}")
        digests = stream.digests()
    digests.refuse_difference(ref, where, diff_id)
    return entries, skipped


class _ScannedStream:
    """The layer's tar stream as tarfile reads it, also fed to the audit's tar scanner:
    tarfile stops at the first zero block, so what Go's archive/tar refuses there (a header
    after a lone zero block) or ``tar --ignore-zeros`` would find after the end is refused
    here as the audit refuses it (``layer_scan.TarElfScanner``)."""

    def __init__(self, stream: LayerStream) -> None:
        self.stream = stream
        self.scanner = TarElfScanner()

    def read(self, size: int = -1) -> bytes:
        if self.scanner.error is not None:
            # tarfile gathers a PAX or GNU long-name header whole, whatever its size: stop
            # it before it holds one the scanner refused (over Go's 1 MiB)
            raise ValueError(self.scanner.error)
        data = self.stream.read(size)
        self.scanner.feed(data)
        return data


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda item: item.name):
                status = entry.stat(follow_symlinks=False)
                yield os.path.relpath(entry.path, root), status
                if stat.S_ISDIR(status.st_mode):
                    stack.append(Path(entry.path))


def tree_identity(root: Path) -> str:
    """sha256 over every entry's path, mode and stat identity."""
    hasher = hashlib.sha256()
    for relative, status in _walk(root):
        hasher.update(json.dumps([relative, status.st_mode, *stat_identity(status)]).encode() + b"\n")
    return "sha256:" + hasher.hexdigest()


def unpack_image(reader: ImageReader, scratch: Path, *, progress: ProgressCallback | None = None) -> UnpackedRoot:
    """Unpack every layer of ``reader`` into ``scratch/root``; reuse a verified earlier one.

    ``scratch`` is sparkflake's own directory (created if absent; ``check.run_check`` uses
    only one ``scratch.py`` takes for the check's): ``root/`` and the record
    ``unpacked-root.json`` binding it to the layer digests and its tree identity.
    """
    config = reader.config
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != len(reader.layer_refs):
        raise InputError(f"{reader.files.describe(reader.config_ref.name)}: rootfs.diff_ids does not list "
                         f"one diffID per layer of the manifest ({len(reader.layer_refs)})")
    layer_digests = tuple(str(ref.digest) for ref in reader.layer_refs)
    root = scratch / "root"
    record_path = scratch / RECORD_NAME
    for ref in reader.layer_refs:
        # a reused root stands for these blobs: they must still be there, at their size
        size = reader.files.size(ref.name)
        if size is None:
            raise InputError(f"{ref.role} blob {ref.digest} is missing: {reader.files.describe(ref.name)} "
                             "does not exist")
        if ref.size is not None and size != ref.size:
            raise CheckFailed(f"{ref.role} {ref.digest}: {reader.files.describe(ref.name)} is {size} bytes, "
                              f"the descriptor says {ref.size}", check_id="oci.blob-size")
    reused = _reusable(root, record_path, layer_digests)
    if reused is not None:
        return UnpackedRoot(root, _manifest_digest(reader), layer_digests, reused, 0)
    if root.exists():
        shutil.rmtree(root)
    scratch.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # a root being written has no record
        os.unlink(record_path)
    root.mkdir()
    total = sum(ref.size or 0 for ref in reader.layer_refs)
    done = [0]

    def tick(count: int) -> None:
        done[0] += count
        if progress is not None:
            progress(min(done[0], total), total, "unpacking layers")

    entries = skipped = 0
    try:
        for ref, diff_id in zip(reader.layer_refs, diff_ids, strict=True):
            count, skip = unpack_layer(reader, ref, str(diff_id), root, tick)
            entries += count
            skipped += skip
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    for name in MOUNT_POINTS:
        # as a container runtime creates its mount points: bwrap cannot make one in the
        # read-only root, and an image need not have them (a minimal one has no /dev)
        if not os.path.lexists(root / name):
            (root / name).mkdir(mode=0o755)
    record = {"schema": RECORD_SCHEMA, "layers": list(layer_digests), "entries": entries,
              "tree": tree_identity(root)}
    write_bytes_atomic(record_path, canonical_json_bytes(record) + b"\n")
    return UnpackedRoot(root, _manifest_digest(reader), layer_digests, entries, skipped)


def read_record(record_path: Path) -> dict[str, Any] | None:
    """The unpacked root's record at ``record_path`` (``own_files.read_own_json``: the
    scratch may be an operator's directory), or None."""
    record = read_own_json(record_path, "a runtime check's record of its unpacked root", RECORD_LIMIT)
    return record if isinstance(record, dict) and record.get("schema") == RECORD_SCHEMA else None


def _reusable(root: Path, record_path: Path, layer_digests: tuple[str, ...]) -> int | None:
    record = read_record(record_path)
    if record is None:
        return None
    if record.get("layers") != list(layer_digests) or not root.is_dir():
        return None
    try:
        if tree_identity(root) != record.get("tree"):
            return None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    entries = record.get("entries")
    return entries if isinstance(entries, int) else 0


def _manifest_digest(reader: ImageReader) -> str | None:
    return reader.manifest_ref.digest if reader.manifest_ref is not None else None
