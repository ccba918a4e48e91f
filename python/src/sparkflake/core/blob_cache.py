"""The content-addressed cache and the download of one artifact into it, every byte verified
before it enters (the fetch stage fetches a lock's whole set; resolution fetches indices).

Layout under the cache root (``$XDG_CACHE_HOME/sparkflake``, default ``~/.cache/sparkflake``)::

    blobs/sha256/<hex>          complete, verified blobs (read-only by convention)
    partial/<hex>.partial       downloads in progress; resumed with an HTTP Range request
    locks/<hex>                 advisory locks: one fetch per blob at a time, across processes
    quarantine/blobs/<hex>.<UTC time>  entries found altered, moved aside (``sparkflake cache
                                cleanup`` removes them), never silently dropped

A blob is renamed into ``blobs/`` only after its size and sha256 matched the lock in the
same pass that wrote it, so a truncated, oversized or altered download never becomes a
cache entry. An entry altered later (disk fault, a hand edit) is detected when it is used
(``BlobCache.verified_path``) or fetched again, moved into ``quarantine/`` and named.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from .atomic_write import NamedWrites
from .cache_root import claim_cache_root
from .digest import is_sha256_hex, sha256_file
from .errors import CheckFailed, InputError
from .own_files import held_bytes, holding_lock, open_own_file
from .progress import ProgressCallback

COPY_CHUNK = 1 << 20
USER_AGENT = "sparkflake-fetch/0.1"


@dataclass(frozen=True)
class Artifact:
    """One locked file: what it is called in the lock, where it may come from, its bytes."""

    name: str
    filename: str
    sha256: str
    size: int | None
    urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not is_sha256_hex(self.sha256):
            raise InputError(f"{self.name}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")


QUARANTINE_DIR = "quarantine"


def move_to_quarantine(root: Path, path: Path, kind: str) -> Path:
    """Move ``path`` (a cache entry found altered) to ``root/quarantine/<kind>/`` under its
    own name and the UTC time, so an operator can see what was there."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    directory = root / QUARANTINE_DIR / kind
    directory.mkdir(parents=True, exist_ok=True)
    target, serial = directory / f"{path.name}.{stamp}", 1
    while os.path.lexists(target):
        serial += 1
        target = directory / f"{path.name}.{stamp}-{serial}"
    os.rename(path, target)
    return target


@dataclass(frozen=True)
class Altered:
    """A cache entry whose bytes were not its name's: what they were and where they went."""

    path: Path
    size: int
    sha256: str
    moved_to: Path

    def __str__(self) -> str:
        return (f"cache entry {self.path} was altered (sha256 {self.sha256}, {self.size} bytes); "
                f"moved to {self.moved_to}")


@dataclass(frozen=True)
class FetchOutcome:
    name: str
    sha256: str
    size: int
    source: str  # "cache", "download", "import"
    url: str | None = None
    altered: Altered | None = None  # the cache held other bytes under this name before the download


def default_cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "sparkflake"


class BlobCache:
    """The content-addressed store. Paths only; every entry's bytes match its name."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_root()
        claim_cache_root(self.root)  # refuses a directory that is not sparkflake's cache
        self.blob_dir = self.root / "blobs" / "sha256"
        self.partial_dir = self.root / "partial"

    def blob_path(self, sha256: str) -> Path:
        return self.blob_dir / sha256

    def partial_path(self, sha256: str) -> Path:
        return self.partial_dir / f"{sha256}.partial"

    def contains(self, sha256: str) -> bool:
        return self.blob_path(sha256).is_file()

    def check_entry(self, sha256: str, size: int | None) -> Altered | None:
        """None when the entry is absent or its bytes hash to its name (and have ``size``);
        else the entry is moved into quarantine and described."""
        path = self.blob_path(sha256)
        if not path.is_file():
            return None
        actual_size = path.stat().st_size
        actual = sha256_file(path)
        if actual == sha256 and (size is None or actual_size == size):
            return None
        return Altered(path, actual_size, actual, move_to_quarantine(self.root, path, "blobs"))

    def verified_path(self, artifact: Artifact) -> Path:
        """The blob for ``artifact`` after re-hashing it; refuses (and evicts) a tampered entry."""
        path = self.blob_path(artifact.sha256)
        if not path.is_file():
            raise InputError(
                f"{artifact.name}: {artifact.filename} (sha256 {artifact.sha256}) is not in the "
                f"cache {self.blob_dir}; run `sparkflake fetch` first",
                check_id="fetch-missing",
            )
        altered = self.check_entry(artifact.sha256, artifact.size)
        if altered is not None:
            raise CheckFailed(
                f"{artifact.name}: {altered} (the lock says sha256 {artifact.sha256}, size {artifact.size}); "
                "run `sparkflake fetch` again",
                check_id="cache-entry",
            )
        return path

    def admit(self, source: Path, artifact: Artifact) -> None:
        """Move an already-verified partial file into the store (atomic rename)."""
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        descriptor = open_own_file(source, os.O_RDONLY, "a download being admitted")  # chmod no link's target
        try:
            os.fchmod(descriptor, 0o444)
        finally:
            os.close(descriptor)
        os.replace(source, self.blob_path(artifact.sha256))

    def import_file(self, path: Path, artifact: Artifact) -> None:
        """Copy an operator-supplied file in, hashing in the same pass; refuse on mismatch."""
        staging, digest, size = self._staged_copy(path, artifact)
        try:
            if digest != artifact.sha256 or (artifact.size is not None and size != artifact.size):
                raise CheckFailed(
                    f"{artifact.name}: {path} has sha256 {digest} size {size}, "
                    f"lock says sha256 {artifact.sha256} size {artifact.size}",
                    check_id="fetch-hash",
                )
            self.admit(staging, artifact)
        finally:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()

    def import_matching(self, path: Path, wanted: Mapping[str, Artifact], staged_as: Artifact) -> Artifact | None:
        """Copy ``path`` in when its bytes are one of ``wanted`` (sha256 -> artifact; the
        size too where one is locked), else keep nothing: the one read of the file both
        identifies and copies it. ``staged_as`` names the staging file (the artifact of its
        size it most likely is)."""
        staging, digest, size = self._staged_copy(path, staged_as)
        try:
            artifact = wanted.get(digest)
            if artifact is None or (artifact.size is not None and size != artifact.size):
                return None
            self.admit(staging, artifact)
            return artifact
        finally:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()

    def _staged_copy(self, path: Path, artifact: Artifact) -> tuple[Path, str, int]:
        """``path`` copied into the partial directory, hashed in the same pass: the
        staging file, its sha256 and size (the caller admits or removes it)."""
        self.partial_dir.mkdir(parents=True, exist_ok=True)
        staging = self.partial_dir / f"{artifact.sha256}.import.{os.getpid()}.{threading.get_ident()}"
        hasher = hashlib.sha256()
        size = 0
        try:
            # a write error names the partial directory (what is full), not the file removed below
            with open(path, "rb") as src, NamedWrites(
                open_own_file(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "an import being staged"),
                self.partial_dir, closefd=True,
            ) as dst:
                while chunk := src.read(COPY_CHUNK):
                    hasher.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()
            raise
        return staging, hasher.hexdigest(), size


class _DownloadRefused(Exception):
    """One URL did not give the locked bytes; the reason goes into the final report."""

    def __init__(self, reason: str, *, resumable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.resumable = resumable


class ByteMeter:
    """Thread-safe running total for the progress callback: bytes held per input."""

    def __init__(self, total: int, progress: ProgressCallback | None) -> None:
        self.total = total
        self.progress = progress
        self._held: dict[str, int] = {}
        self._done = 0
        self._lock = threading.Lock()

    def set(self, artifact: Artifact, held: int) -> None:
        if self.progress is None:
            return
        with self._lock:
            self._done += held - self._held.get(artifact.sha256, 0)
            self._held[artifact.sha256] = held
            self.progress(self._done, self.total, artifact.filename)


# what urllib.request.urlopen returns (an HTTP response or a file URL's response), or a test's stand-in
Opener = Callable[[urllib.request.Request, float], Any]


def offline_opener(request: urllib.request.Request, timeout: float) -> object:
    """The opener of an offline run: every URL fails, so only the cache and imports count."""
    raise urllib.error.URLError("offline (--offline): no network access")


def default_opener(request: urllib.request.Request, timeout: float) -> object:
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 (https/file URLs from the lock)


def _download_once(
    url: str,
    artifact: Artifact,
    cache: BlobCache,
    meter: ByteMeter,
    opener: Opener,
    timeout: float,
) -> None:
    """Append to the partial file from ``url`` and verify; raises _DownloadRefused."""
    partial = cache.partial_path(artifact.sha256)
    partial.parent.mkdir(parents=True, exist_ok=True)
    have = held_bytes(partial)
    if artifact.size is not None and have > artifact.size:
        partial.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have and url.startswith(("http://", "https://")):
        request.add_header("Range", f"bytes={have}-")
    try:
        response = opener(request, timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            # The server says our partial already covers the whole file; verify it as is.
            response = None
        else:
            raise _DownloadRefused(f"HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        # A host that cannot be reached is not retried; the next mirror is.
        raise _DownloadRefused(f"{type(exc).__name__}: {reason}") from exc

    hasher = hashlib.sha256()
    if response is not None:
        status = getattr(response, "status", 200) or 200
        append = have and status == 206
        if append:
            content_range = response.headers.get("Content-Range", "")
            match = re.match(r"bytes (\d+)-", content_range)
            if not match or int(match.group(1)) != have:
                append = False
        mode = "ab" if append else "wb"
        if append:
            with _open_partial(partial, os.O_RDONLY, "rb") as existing:
                while chunk := existing.read(COPY_CHUNK):
                    hasher.update(chunk)
        else:
            have = 0
        written = have
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        try:
            with response, _open_partial(partial, flags, mode) as out:
                while True:
                    chunk = response.read(COPY_CHUNK)
                    if not chunk:
                        break
                    written += len(chunk)
                    if artifact.size is not None and written > artifact.size:
                        out.close()
                        partial.unlink()
                        raise _DownloadRefused(
                            f"server sent more than the locked size {artifact.size} bytes"
                        )
                    hasher.update(chunk)
                    _append(out, chunk, partial)
                    meter.set(artifact, written)
                _append(out, b"", partial)  # what the close would write
        except _DownloadRefused:
            raise
        except (OSError, ValueError) as exc:
            # http.client.IncompleteRead and resets land here: keep the prefix for a Range resume.
            raise _DownloadRefused(
                f"transfer interrupted after {written} bytes: {type(exc).__name__}", resumable=True
            ) from exc
    else:
        with _open_partial(partial, os.O_RDONLY, "rb") as existing:
            while chunk := existing.read(COPY_CHUNK):
                hasher.update(chunk)

    size = partial.stat().st_size
    if artifact.size is not None and size < artifact.size:
        raise _DownloadRefused(
            f"truncated: got {size} of {artifact.size} bytes", resumable=True
        )
    digest = hasher.hexdigest()
    if digest != artifact.sha256 or (artifact.size is not None and size != artifact.size):
        partial.unlink()
        meter.set(artifact, 0)
        raise _DownloadRefused(f"sha256 mismatch: got {digest} ({size} bytes)")
    cache.admit(partial, artifact)


def _append(out: BinaryIO, chunk: bytes, partial: Path) -> None:
    """Write ``chunk`` to the partial download (flush it when empty). An error writing (a
    full disk) is this machine's, not the URL's: it ends the fetch, naming the file, rather
    than the next attempt or mirror downloading onto the same disk and the report blaming
    the transfer."""
    try:
        if chunk:
            out.write(chunk)
        else:
            out.flush()
    except OSError as exc:
        raise InputError(f"{partial}: cannot write: {exc.strerror or exc} (what was downloaded stays there; "
                         "the next fetch resumes it)") from exc


def _open_partial(partial: Path, flags: int, mode: str) -> BinaryIO:
    return cast("BinaryIO", os.fdopen(open_own_file(partial, flags, "a partial download"), mode))


def fetch_artifact(
    artifact: Artifact,
    cache: BlobCache,
    *,
    meter: ByteMeter | None = None,
    opener: Opener = default_opener,
    timeout: float = 60.0,
    attempts_per_url: int = 3,
) -> FetchOutcome:
    """Make ``artifact`` a verified cache entry, trying each mirror URL in order.

    An advisory lock per blob keeps two fetches (two processes) off one partial file.
    """
    meter = meter or ByteMeter(0, None)
    lock_dir = cache.root / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with holding_lock(lock_dir / artifact.sha256, "the lock of a download"):
        return _fetch_locked(artifact, cache, meter, opener, timeout, attempts_per_url)


def _fetch_locked(
    artifact: Artifact,
    cache: BlobCache,
    meter: ByteMeter,
    opener: Opener,
    timeout: float,
    attempts_per_url: int,
) -> FetchOutcome:
    altered = None
    if cache.contains(artifact.sha256):
        altered = cache.check_entry(artifact.sha256, artifact.size)
        if altered is None:
            return FetchOutcome(artifact.name, artifact.sha256, artifact.size or 0, "cache")
    tried: list[str] = []
    for url in artifact.urls:
        for attempt in range(attempts_per_url):
            try:
                _download_once(url, artifact, cache, meter, opener, timeout)
            except _DownloadRefused as refusal:
                if refusal.resumable and attempt + 1 < attempts_per_url:
                    continue
                tried.append(f"{url}: {refusal.reason}")
                break
            size = cache.blob_path(artifact.sha256).stat().st_size
            return FetchOutcome(artifact.name, artifact.sha256, size, "download", url, altered)
    with contextlib.suppress(FileNotFoundError):
        cache.partial_path(artifact.sha256).unlink()
    raise MissingInput(artifact, tried, altered)


class MissingInput(Exception):
    def __init__(self, artifact: Artifact, tried: list[str], altered: Altered | None = None) -> None:
        super().__init__(artifact.name)
        self.artifact = artifact
        self.tried = tried
        self.altered = altered

    def describe(self, cache: BlobCache) -> str:
        artifact = self.artifact
        lines = [
            f"{artifact.name}: {artifact.filename} (sha256 {artifact.sha256}, "
            f"{artifact.size if artifact.size is not None else 'unknown'} bytes) could not be fetched"
        ]
        if self.altered is not None:
            lines.append(f"    the {self.altered}")
        if self.tried:
            lines += [f"    tried {entry}" for entry in self.tried]
        else:
            lines.append("    no URL in the lock (operator-supplied input)")
        lines.append(
            f"    supply it: put the file in a directory DIR and run `sparkflake fetch PROFILE "
            f"--from DIR` (matched by sha256), or place it at {cache.blob_path(artifact.sha256)}"
        )
        return "\n".join(lines)
