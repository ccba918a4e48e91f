"""A content-addressed blob directory (``blobs/sha256/<hex>``, as in an OCI layout).

Blobs are written to a temporary file beside the store and renamed into place once
their digest is known, so a present blob is always complete. Writers of layouts and
archives take their blobs from here instead of recompressing: an archive copies them, a
layout shares them (``share_blob``, below).

A blob is handed out for reuse (``verified``) only after a check bound to that entry:
``verified/<hex>`` records the stat identity (device, inode, size, mtime_ns, ctime_ns) the
blob had when its bytes were last hashed -- by the writer that computed the digest
while writing them, or by a full streamed re-hash. The blob is trusted when it is still a
regular file with that identity: any write to it through the file system (in place, with
the mtime restored, by chmod then write) changes its ctime, which no ordinary program can
set back, and a replacement has another inode. That is as strong as hashing against
everything short of writing the disk behind the file system's back, and costs one
``lstat`` instead of reading gigabytes on every rebuild. A blob whose identity changed
is hashed again (streamed); if its bytes still match its name it is recorded anew,
otherwise it is evicted (blob and record removed, ``evicted`` names it) and the caller
rebuilds it. Blobs are made read-only (0444) so that a stray write by a non-root user
fails outright. The one gap: a write by another process within the same file-system
timestamp tick as the commit (a few milliseconds on ext4) keeps the identity.

An output's copy of a blob (``share_blob``: the OCI layout of a build) is a copy-on-write
clone where the file system has them (btrfs, xfs: its own inode, no bytes written), else a
hard link to the store's inode on the same file system, else a copy. A hard link is safe
for the store by the same record: the blob is read-only, and a write through the output's
name (root ignores the mode) changes the one inode's ctime, so the store hashes it again
before its next use and evicts it when its bytes changed; the linked output is then what
the operator made of it (an audit of it fails), as with any edited output. Linking and
unlinking change the ctime too: ``link_into`` records the identity again right after it
links a blob that was as recorded, and ``confirm_unlinked`` after an output's links are
removed, when nothing but the ctime changed. The gap is the commit's, widened to the time
between the check and the record (the link; the swap and removal of the previous output,
under a second), and only a write that also puts the mtime back goes unseen in it. Issue 31 measured what this saves: the glm53-dflash7 layout's 4.38 GB, a second
full copy of the image in ``out/`` (``bench/results/footprint-issue31.json``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..core.atomic_write import NamedWrites, copy_bytes, write_bytes_atomic
from ..core.digest import digest_hex
from ..core.direct_write import DirectWriter
from ..core.file_hashes import stat_identity
from ..core.interrupts import interrupts_held

RECORD_FORMAT = "sparkflake-blob-verified-v1"
READ_CHUNK = 1 << 20
_FICLONE = 0x40049409  # <linux/fs.h>: share the extents copy-on-write (btrfs, xfs)


@dataclass(frozen=True)
class Eviction:
    """A stored blob that was not what its digest names (not a regular file, a wrong size or
    hash) and was deleted; the caller makes it again and reports this."""

    digest: str
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"evicted {self.digest} from the blob store ({self.path}): {self.reason}; it is made again"


class BlobStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.blob_dir = self.root / "blobs" / "sha256"
        self.record_dir = self.root / "verified"
        self.evicted: list[Eviction] = []

    def path(self, digest: str) -> Path:
        return self.blob_dir / digest_hex(digest)

    def has(self, digest: str, size: int | None = None) -> bool:
        """Present (with ``size``): for writers deciding whether to write. Readers that
        reuse the bytes ask ``verified``."""
        try:
            found = self.path(digest).stat().st_size
        except FileNotFoundError:
            return False
        return size is None or found == size

    def verified(self, digest: str, size: int) -> Path | None:
        """The path of blob ``digest`` if it holds exactly ``size`` bytes hashing to
        ``digest`` (by its recorded identity, else by hashing it); else None, after
        evicting a blob that is there but wrong (see the module docstring)."""
        path = self.path(digest)
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(status.st_mode):
            self._evict(digest, path, "not a regular file")
            return None
        if status.st_size != size:
            self._evict(digest, path, f"{status.st_size} bytes, expected {size}")
            return None
        if self._recorded_identity(digest) == stat_identity(status):
            return path
        actual = _sha256_of(path)
        if actual is None:
            return None  # removed meanwhile (a concurrent eviction)
        if actual != digest_hex(digest):
            self._evict(digest, path, f"its bytes hash to sha256:{actual}")
            return None
        self._record(digest, path)
        return path

    def verified_all(self, blobs: Sequence[tuple[str, int]]) -> list[Path | None]:
        """``verified`` of each (digest, size), in order. A blob whose record went stale
        (an output's hard links removed by hand change its ctime) is hashed again; those
        are hashed on every core at once, the largest first, so re-checking a rebuild's
        lower layers costs about its largest blob rather than their sum (hashlib and the
        reads release the GIL)."""
        if len(blobs) < 2:
            return [self.verified(digest, size) for digest, size in blobs]
        largest_first = sorted(range(len(blobs)), key=lambda index: -blobs[index][1])
        with ThreadPoolExecutor(max_workers=min(len(blobs), os.cpu_count() or 1)) as pool:
            with interrupts_held():  # handed over whole (core.worker_processes says why)
                checks = {index: pool.submit(self.verified, *blobs[index]) for index in largest_first}
        return [checks[index].result() for index in range(len(blobs))]

    def link_into(self, digest: str, target: Path) -> bool:
        """Hard-link blob ``digest`` at ``target`` (which must not exist) when the blob is
        as its record says; its identity is then recorded again (the link changed its ctime
        and nothing else: checked). False, nothing done, when the blob is not as recorded
        or the file systems differ (the caller copies)."""
        path = self.path(digest)
        try:
            before = stat_identity(os.lstat(path))
        except FileNotFoundError:
            return False
        if self._recorded_identity(digest) != before:
            return False
        try:
            os.link(path, target)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOENT):
                return False
            raise
        self.confirm_unlinked({digest: before})
        return True

    def shared_blobs(self, layout: Path) -> dict[str, list[int]]:
        """The blobs of the layout at ``layout`` that are hard links to this store's blobs,
        still as recorded: digest -> identity now (for ``confirm_unlinked`` once the layout
        is removed)."""
        shared: dict[str, list[int]] = {}
        try:
            names = os.listdir(layout / "blobs" / "sha256")
        except OSError:
            return shared
        for name in names:
            digest = f"sha256:{name}"
            try:
                mine = os.lstat(self.path(digest))
                theirs = os.lstat(layout / "blobs" / "sha256" / name)
            except (OSError, ValueError):
                continue
            if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino) \
                    and self._recorded_identity(digest) == stat_identity(mine):
                shared[digest] = stat_identity(mine)
        return shared

    def confirm_unlinked(self, before: dict[str, list[int]]) -> None:
        """Record again the identity of each blob of ``before`` whose links sparkflake just
        made or removed: only when device, inode, size and mtime are still those of
        ``before`` (a write changes the mtime; the ctime, changed by the link count, is
        the one field taken anew)."""
        for digest, identity in before.items():
            path = self.path(digest)
            try:
                now = stat_identity(os.lstat(path))
            except FileNotFoundError:
                continue
            if now[:4] == identity[:4]:
                self._record(digest, path)

    def _recorded_identity(self, digest: str) -> list[int] | None:
        try:
            record = json.loads((self.record_dir / digest_hex(digest)).read_bytes())
        except (OSError, ValueError):
            return None
        identity = record.get("identity") if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else None
        return identity if isinstance(identity, list) else None

    def _record(self, digest: str, path: Path) -> None:
        record = {"format": RECORD_FORMAT, "identity": stat_identity(os.lstat(path))}
        with contextlib.suppress(OSError):  # no record: the next reuse hashes again
            write_bytes_atomic(self.record_dir / digest_hex(digest), json.dumps(record).encode())

    def _evict(self, digest: str, path: Path, reason: str) -> None:
        for stale in (path, self.record_dir / digest_hex(digest)):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        self.evicted.append(Eviction(digest, path, reason))
        return None

    @contextlib.contextmanager
    def new_blob(self) -> Iterator[tuple[BinaryIO, Path]]:
        """Yield (handle, temporary path); the caller moves it in with ``commit``.
        On error the temporary file is removed."""
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".incoming.", dir=self.blob_dir)
        tmp_path = Path(tmp_name)
        try:
            # a write error names the store's directory (what is full), not the file removed below
            with NamedWrites(fd, self.blob_dir, closefd=True) as handle:
                yield handle, tmp_path
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
            raise

    def commit(self, tmp_path: Path, digest: str) -> Path:
        """Move a blob whose digest the caller computed over the bytes it wrote into
        place, read-only, and record its identity as verified."""
        target = self.path(digest)
        os.chmod(tmp_path, 0o444)
        os.replace(tmp_path, target)
        self._record(digest, target)
        return target


def _sha256_of(path: Path) -> str | None:
    hasher = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as handle:
            while chunk := handle.read(READ_CHUNK):
                hasher.update(chunk)
    except FileNotFoundError:
        return None
    return hasher.hexdigest()


# Below this a blob is copied in the kernel (copy_bytes); above it past the page cache.
DIRECT_COPY_MIN = 1 << 20


def share_blob(store: BlobStore, digest: str, target: Path) -> None:
    """``target`` holds blob ``digest`` of ``store`` without a second copy of its bytes on
    disk where it can: a clone (own inode, shared extents), else a hard link (the store's
    inode, see the module docstring), else a copy (``copy_blob``)."""
    source = store.path(digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    if not (_clone(source, target) or store.link_into(digest, target)):
        _copy(source, target)


def _clone(source: Path, target: Path) -> bool:
    """A copy-on-write clone of ``source`` at ``target`` (FICLONE: btrfs, xfs), durable;
    False, and no ``target``, where the file system has none."""
    with open(source, "rb", buffering=0) as original, open(target, "xb", buffering=0) as copy:
        try:
            fcntl.ioctl(copy.fileno(), _FICLONE, original.fileno())
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.EBADF, errno.ENOSYS):
                raise
            cloned = False
        else:
            os.fsync(copy.fileno())
            cloned = True
    if not cloned:
        target.unlink()
    return cloned


def copy_blob(source: Path, target: Path) -> None:
    """``target`` becomes a durable (fsynced) copy of ``source`` with its own inode: a
    copy-on-write clone where the file system has them (FICLONE: btrfs, xfs), else a copy
    written past the page cache (``DirectWriter``, O_DIRECT), then fsynced. On this build
    machine's ext4 the 4.65 GB of the store's blobs took 5.65 s that way, as fast as ``dd
    oflag=direct`` writes zeros there (5.84 s), against 12.67 s with copy_file_range +
    fsync (buffered, so throttled on dirty pages) and 9.57 s with ``cp`` + ``sync``
    (``bench/bench_layout_copy.py``, medians of 3)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    if not _clone(source, target):
        _copy(source, target)


def _copy(source: Path, target: Path) -> None:
    """A durable copy past the page cache (see ``copy_blob``) at ``target`` (absent)."""
    with open(source, "rb", buffering=0) as original, open(target, "xb", buffering=0) as copy:
        size = os.fstat(original.fileno()).st_size
        if size < DIRECT_COPY_MIN:
            copied = copy_bytes(original.fileno(), copy.fileno(), size)
        else:
            writer = DirectWriter(copy.fileno(), os.fspath(target))
            try:
                copied = writer.copy_from(original.fileno(), size)
            except BaseException:
                writer.abort()
                raise
            writer.finish()
        if copied != size or original.read(1):
            raise OSError(errno.EIO, f"{source} changed size while it was copied", str(target))
        os.fsync(copy.fileno())
