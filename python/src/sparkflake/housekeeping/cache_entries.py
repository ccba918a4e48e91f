"""What sparkflake's cache holds, entry by entry and by kind, and which entries are
leftovers (what an interrupted or finished run left and no running process uses).

Only names sparkflake makes are entries; anything else under the cache root is reported as
``not sparkflake's`` and never chosen for removal: a run or staging directory only under a
name ``core.atomic_write.generated_name`` made (its check holds), a quarantined entry only as
``core.blob_cache.move_to_quarantine`` names it, a runtime scratch only as ``runtime.scratch``
recognises one. gc, cleanup and verify act only on a root ``core.cache_root`` takes for
sparkflake's cache (``require_cache_root``). The layout (``core.blob_cache``,
``fetch.git``, ``compose.tree_cache``, ``oci.blob_store``/``oci.layer_cache``, the build's
work directories, the runtime check's scratch, ``quarantine/``, ``builds/``)::

    blobs/sha256/<hex>                 input blobs                partial/…      unfinished downloads
    git/trees/<id>, git/commits/<rev>  git sources                locks/<hex>    lock files
    trees/<key>/                       assembled trees            work/<run>/    build work trees
    oci/blobs/sha256/<hex>, oci/…      layer store                runtime/<p>/   runtime scratch
    quarantine/<kind>/<entry>          quarantine                 builds/<p>/…   build records
    capabilities/<hex>.json            image capabilities

Sizes are bytes on disk (allocated blocks), a file with several links counted once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core.atomic_write import generated_name_parts, host_tag, process_alive
from ..core.cache_root import CACHE_MARKER, cache_root_problem
from ..core.digest import GIT_OBJECT_ID_PATTERN, SHA256_HEX_PATTERN
from ..core.directory_lock import LOCK_NAME
from ..core.errors import InputError
from ..distribute.files import made_by_receiver
from ..fetch.git import STAGING_NAME
from ..runtime.scratch import is_scratch
from .build_record import BUILDS_DIR, RECORD_NAME

INPUT_BLOBS = "input blobs"
GIT_SOURCES = "git sources"
TREES = "assembled trees"
LAYER_STORE = "layer store"
WORK = "build work trees"
RUNTIME_SCRATCH = "runtime scratch"
QUARANTINE = "quarantine"
PARTIAL = "unfinished downloads"
LOCKS = "lock files"
RECORDS = "build records"
CAPABILITIES = "image capabilities"
INDEXES = "hash and fact indexes"
FOREIGN = "not sparkflake's"
KINDS = (INPUT_BLOBS, GIT_SOURCES, TREES, LAYER_STORE, WORK, RUNTIME_SCRATCH, QUARANTINE, PARTIAL, LOCKS,
         RECORDS, CAPABILITIES, INDEXES, FOREIGN)

QUARANTINE_DIR = "quarantine"
CAPABILITIES_DIR = "capabilities"
# A lock or temporary file untouched this long, held by no process, is a leftover: a run
# that is still writing touches its file far more often.
GRACE_SECONDS = 3600

# what core.blob_cache.move_to_quarantine names: quarantine/<kind>/<entry's hex name>.<UTC time>[-N], for
# the kinds it is called with (an input blob, cache_gc.verify_cache's layer-store blob)
QUARANTINE_KINDS = ("blobs", "oci-blobs")
_QUARANTINED = re.compile(r"^[0-9a-f]{64}\.[0-9]{8}T[0-9]{6}Z(-[0-9]+)?$")
_IMPORT = re.compile(r"^(?P<hex>[0-9a-f]{64})\.import\.(?P<pid>[0-9]+)\.[0-9]+$")
# a receiver's partial copy, its lock, and a wrong partial it moved aside (distribute/files)
_RECEIVE_TEMP = re.compile(r"^\.(?P<name>.+)\.(partial|lock)$")
_PARTIAL_ASIDE = re.compile(r"^\.(?P<name>.+)\.partial\.(mismatch|oversize)-[0-9]{8}T[0-9]{6}Z(-[0-9]+)?$")


@dataclass(frozen=True)
class CacheEntry:
    kind: str
    path: Path
    name: str  # what it is keyed by (a digest's hex, a tree key, a run directory's name)
    bytes: int
    leftover: str | None = None  # why cleanup may remove it; None: not a leftover


class DiskUsage:
    """Bytes on disk under paths, each inode counted once across every call."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, int]] = set()

    def of(self, path: Path) -> int:
        total = 0
        for status in _lstat_all(path):
            key = (status.st_dev, status.st_ino)
            if key in self._seen:
                continue
            self._seen.add(key)
            total += status.st_blocks * 512
        return total


def _lstat_all(path: Path) -> Iterator[os.stat_result]:
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    yield status
    if not stat.S_ISDIR(status.st_mode):
        return
    pending = [os.fspath(path)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                child = entry.stat(follow_symlinks=False)
                yield child
                if stat.S_ISDIR(child.st_mode):
                    pending.append(entry.path)


def lock_is_free(path: Path) -> bool:
    """No process holds an flock on ``path`` (a missing file is free)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _idle(path: Path, now: float) -> bool:
    try:
        return now - os.lstat(path).st_mtime >= GRACE_SECONDS
    except FileNotFoundError:
        return False


def _dead_here(host: str, pid: int) -> bool:
    return host == host_tag() and pid != os.getpid() and not process_alive(pid)


def _children(directory: Path) -> list[os.DirEntry[str]]:
    try:
        return sorted(os.scandir(directory), key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def scan_cache(root: Path) -> list[CacheEntry]:
    """Every entry of the cache at ``root``; what is not sparkflake's is one FOREIGN entry
    per top-level name (or per name inside a directory sparkflake owns)."""
    usage, now = DiskUsage(), time.time()
    entries: list[CacheEntry] = []

    def add(kind: str, path: str | Path, name: str, leftover: str | None = None) -> None:
        entries.append(CacheEntry(kind, Path(path), name, usage.of(Path(path)), leftover))

    def foreign(path: str | Path) -> None:
        add(FOREIGN, path, Path(path).name)

    for top in _children(root):
        if top.name == CACHE_MARKER and top.is_file(follow_symlinks=False):
            continue  # what says the root is sparkflake's cache (core.cache_root)
        scanner = _SCANNERS.get(top.name)
        if scanner is None or not top.is_dir(follow_symlinks=False):
            foreign(top.path)
            continue
        scanner(Path(top.path), add, foreign, now)
    return entries


class AddCallback(Protocol):
    """What a scanner calls for each entry it finds (``scan_cache``'s ``add``)."""

    def __call__(self, kind: str, path: str | Path, name: str, leftover: str | None = None) -> None: ...


ForeignCallback = Callable[[str | Path], None]  # a path that is not sparkflake's


def _sha256_entries(directory: Path, foreign: ForeignCallback) -> Iterator[os.DirEntry[str]]:
    """The entries of ``directory/sha256/``; anything else in ``directory`` is foreign."""
    for child in _children(directory):
        if child.name != "sha256" or not child.is_dir(follow_symlinks=False):
            foreign(child.path)
            continue
        yield from _children(Path(child.path))


def _scan_input_blobs(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for blob in _sha256_entries(directory, foreign):
        if SHA256_HEX_PATTERN.fullmatch(blob.name) and blob.is_file(follow_symlinks=False):
            add(INPUT_BLOBS, blob.path, blob.name)
        else:
            foreign(blob.path)


def _scan_two_levels(directory: Path, add: AddCallback, foreign: ForeignCallback, kind: str, *,
                     parents: Callable[[str], bool], names: Callable[[str], bool],
                     shape: Callable[[str, os.DirEntry[str]], bool] = lambda parent, item: True) -> None:
    """``directory/<parent>/<name>`` entries of ``kind``, named ``parent/name``; one that
    ``shape`` refuses (a FIFO where a file belongs, a symlink) is foreign."""
    for parent in _children(directory):
        if not parents(parent.name) or not parent.is_dir(follow_symlinks=False):
            foreign(parent.path)
            continue
        for item in _children(Path(parent.path)):
            if names(item.name) and shape(parent.name, item):
                add(kind, item.path, f"{parent.name}/{item.name}")
            else:
                foreign(item.path)


def _git_shape(parent: str, item: os.DirEntry[str]) -> bool:
    """fetch.git writes a checkout directory under trees/ and a small file under commits/;
    anything else there (a FIFO gc would hang reading, a symlink) is not its entry."""
    if parent == "trees":
        return item.is_dir(follow_symlinks=False)
    return item.is_file(follow_symlinks=False)


def _scan_git(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    _scan_two_levels(directory, add, foreign, GIT_SOURCES, parents=lambda name: name in ("trees", "commits"),
                     names=lambda name: bool(GIT_OBJECT_ID_PATTERN.fullmatch(name)), shape=_git_shape)


def _scan_trees(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for child in _children(directory):
        # an entry's staging or retired directory (compose.tree_cache through atomic_directory):
        # ``.<key>.<host>.pid<N>.<token><check>.partial|.old``, its check holding
        staged = generated_name_parts(child.name)
        if staged is not None and not (staged["suffix"] and staged["prefix"].startswith(".")
                                       and SHA256_HEX_PATTERN.fullmatch(staged["prefix"][1:])):
            staged = None
        if SHA256_HEX_PATTERN.fullmatch(child.name) and child.is_dir(follow_symlinks=False):
            add(TREES, child.path, child.name)
        elif staged:
            gone = _dead_here(staged["host"], int(staged["pid"]))
            add(TREES, child.path, child.name, "staging of a build that is gone" if gone else None)
        else:
            foreign(child.path)


_LAYER_STORE_PARTS = {"blobs", "verified", "layers", "fingerprints"}


def _scan_layer_store(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for child in _children(directory):
        path = Path(child.path)
        if child.name == "file-sha256.json" and child.is_file(follow_symlinks=False):
            add(INDEXES, path, "oci/file-sha256.json")
        elif child.name not in _LAYER_STORE_PARTS or not child.is_dir(follow_symlinks=False):
            foreign(path)
        elif child.name == "blobs":
            _scan_store_blobs(path, add, foreign, now)
        else:
            for item in _children(path):
                stem = item.name.removesuffix(".json") if child.name != "verified" else item.name
                partial = item.name.startswith(".") and item.name.endswith(".partial")
                if SHA256_HEX_PATTERN.fullmatch(stem) and item.is_file(follow_symlinks=False):
                    add(LAYER_STORE, item.path, f"{child.name}/{stem}")
                elif partial and _idle(Path(item.path), now):
                    add(LAYER_STORE, item.path, item.name, "an unfinished write, untouched for an hour")
                elif not partial:
                    foreign(item.path)


def _scan_store_blobs(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for blob in _sha256_entries(directory, foreign):
        if SHA256_HEX_PATTERN.fullmatch(blob.name) and blob.is_file(follow_symlinks=False):
            add(LAYER_STORE, blob.path, f"blobs/{blob.name}")
        elif blob.name.startswith(".incoming."):
            reason = "an unfinished blob, untouched for an hour" if _idle(Path(blob.path), now) else None
            add(LAYER_STORE, blob.path, blob.name, reason)
        else:
            foreign(blob.path)


def _scan_work(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for child in _children(directory):
        # a build's run directory (core.atomic_write.make_run_directory): <profile>.<host>.pid<N>.<token><check>
        run = generated_name_parts(child.name)
        if run is None or run["suffix"] or not child.is_dir(follow_symlinks=False):
            foreign(child.path)
            continue
        gone = _dead_here(run["host"], int(run["pid"]))
        add(WORK, child.path, child.name, "work trees of a build that is gone" if gone else None)


def _scan_runtime(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for child in _children(directory):
        path = Path(child.path)
        # a runtime check's scratch: its marker or lock file, and nothing it did not write (runtime.scratch)
        if not child.is_dir(follow_symlinks=False) or not is_scratch(path):
            foreign(path)
            continue
        free = lock_is_free(path / LOCK_NAME)
        add(RUNTIME_SCRATCH, path, child.name, "no runtime check uses it" if free else None)


def _scan_quarantine(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for kind in _children(directory):
        if kind.name not in QUARANTINE_KINDS or not kind.is_dir(follow_symlinks=False):
            foreign(kind.path)
            continue
        for item in _children(Path(kind.path)):
            if _QUARANTINED.fullmatch(item.name) and item.is_file(follow_symlinks=False):
                add(QUARANTINE, item.path, f"{kind.name}/{item.name}", "moved aside when its bytes differed from its name")
            else:
                foreign(item.path)


def _scan_partial(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    locks = directory.parent / "locks"
    for child in _children(directory):
        path = Path(child.path)
        stem = child.name.removesuffix(".partial")
        imported, git = _IMPORT.fullmatch(child.name), STAGING_NAME.match(child.name)
        if child.name.endswith(".partial") and SHA256_HEX_PATTERN.fullmatch(stem):
            idle = lock_is_free(locks / stem) and _idle(path, now)
            add(PARTIAL, path, child.name, "a download no fetch resumes, untouched for an hour" if idle else None)
        elif (staging := imported or git) is not None:
            pid = int(staging["pid"])
            add(PARTIAL, path, child.name, None if process_alive(pid) else "staging of a fetch that is gone")
        else:
            foreign(path)


def _scan_locks(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for child in _children(directory):
        path = Path(child.path)
        if not (SHA256_HEX_PATTERN.fullmatch(child.name) or GIT_OBJECT_ID_PATTERN.fullmatch(child.name)) or not child.is_file(follow_symlinks=False):
            foreign(path)
            continue
        stale = lock_is_free(path) and _idle(path, now)
        add(LOCKS, path, child.name, "held by no fetch, untouched for an hour" if stale else None)


def _scan_records(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    _scan_two_levels(directory, add, foreign, RECORDS, parents=lambda name: True,
                     names=lambda name: bool(RECORD_NAME.fullmatch(name)))


def _scan_capabilities(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for item in _children(directory):
        if SHA256_HEX_PATTERN.fullmatch(item.name.removesuffix(".json")) and item.name.endswith(".json"):
            add(CAPABILITIES, item.path, item.name.removesuffix(".json"))
        else:
            foreign(item.path)


_COMPOSE_INDEXES = {"file-sha256.json", "native-interface", "wheel-native", "python-scan"}


def _scan_compose(directory: Path, add: AddCallback, foreign: ForeignCallback, now: float) -> None:
    for item in _children(directory):
        if item.name in _COMPOSE_INDEXES:  # file hashes, facts read from wheels (compose/)
            add(INDEXES, item.path, f"compose/{item.name}")
        else:
            foreign(item.path)


_SCANNERS: dict[str, Callable[[Path, AddCallback, ForeignCallback, float], None]] = {
    "blobs": _scan_input_blobs, "git": _scan_git, "trees": _scan_trees, "oci": _scan_layer_store, "work": _scan_work,
    "runtime": _scan_runtime, QUARANTINE_DIR: _scan_quarantine, "partial": _scan_partial, "locks": _scan_locks,
    BUILDS_DIR: _scan_records, CAPABILITIES_DIR: _scan_capabilities, "compose": _scan_compose}
SCANNED_DIRECTORIES = frozenset(_SCANNERS)  # core.cache_root.CACHE_DIRECTORIES names the same (a test holds them equal)


def require_cache_root(root: Path, command: str) -> None:
    """Refuse (InputError) a root that is not sparkflake's cache (``core.cache_root``): ``command``
    removes or moves only what is in a cache sparkflake made."""
    problem = cache_root_problem(root)
    if problem is not None:
        raise InputError(f"{problem}; `sparkflake cache {command}` removes or moves entries only in a cache "
                         "sparkflake made: pass that cache's directory as --cache")


def scan_received(directory: Path) -> list[CacheEntry]:
    """A fan-out destination directory (``distribute.files``): a receiver's partial copies
    and locks no receiver holds, and the wrong partial copies it moved aside, each only where
    ``.NAME.lock`` is a receiver's (``made_by_receiver``: its record names NAME), so an
    operator's files of the same names are never entries. A wrong file found under the final
    name and moved aside (``NAME.mismatch-<UTC time>``) may be the operator's: never one."""
    usage, now = DiskUsage(), time.time()
    found = []
    for child in _children(directory):
        path = Path(child.path)
        if not child.is_file(follow_symlinks=False):
            continue
        aside, temporary = _PARTIAL_ASIDE.fullmatch(child.name), _RECEIVE_TEMP.fullmatch(child.name)
        match = aside or temporary
        if match is None or not made_by_receiver(directory / f".{match['name']}.lock"):
            continue
        if aside:
            found.append(CacheEntry(QUARANTINE, path, child.name, usage.of(path),
                                    "a wrong copy a receiver received and moved aside"))
        elif lock_is_free(directory / f".{match['name']}.lock") and _idle(path, now):
            found.append(CacheEntry(PARTIAL, path, child.name, usage.of(path), "a receiver's temporary, held by none"))
    return found
