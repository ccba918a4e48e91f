"""Forge archives of a commit (``git archive`` tarballs, as GitHub serves at
``/archive/<rev>.tar.gz``): downloaded with a size bound and unpacked safely, for
``fetch.git`` to admit by tree id when no git URL serves the commit."""

from __future__ import annotations

import errno
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path, PurePosixPath

from ..core.errors import InputError

# what the machine, not the archive, is at fault for: the fetch ends with it
_DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


class ArchiveRefused(Exception):
    """This archive URL did not give the commit's files; the reason is reported."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def checked_relative(path: str) -> PurePosixPath:
    """A tree entry's path as git stores it: relative, no empty, ".", ".." or ".git" part."""
    relative = PurePosixPath(path)
    if (
        not path
        or relative.is_absolute()
        or any(part in ("", ".", "..") or part.lower() == ".git" for part in path.split("/"))
    ):
        raise InputError(f"git tree entry {path!r}: not a plain relative path")
    return relative


ARCHIVE_LIMIT = 4 << 30  # bytes of one downloaded archive; vLLM's is ~40 MB


def download(url: str, target: Path, timeout: float) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "sparkflake-fetch/0.1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(target, "wb") as out:  # noqa: S310 (lock URLs)
            total = 0
            while chunk := response.read(1 << 20):
                total += len(chunk)
                if total > ARCHIVE_LIMIT:
                    raise ArchiveRefused(f"archive larger than {ARCHIVE_LIMIT} bytes")
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise ArchiveRefused(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ArchiveRefused(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None


def extract_archive(archive: Path, destination: Path, rev: str) -> int:
    """Regular files (git's two modes), symlinks (targets kept as text) and directories of
    a ``git archive`` tarball, below its one top directory, into ``destination``. Refused:
    another commit's archive, hard links, devices, paths leaving the top directory,
    writing through a symlink, and a member that cannot be written (a name part over 255
    bytes, a file where a directory is needed, any OSError), naming the member. Returns
    the number of files and links written."""
    written = 0
    destination.mkdir(parents=True)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            comment = tar.pax_headers.get("comment")
            if comment is not None and comment != rev:
                raise ArchiveRefused(f"an archive of commit {comment[:40]}, not {rev}")
            top: str | None = None
            for member in tar:
                parts = [part for part in member.name.split("/") if part not in ("", ".")]
                if member.type == tarfile.XGLTYPE or not parts:
                    continue
                if top is None:
                    top = parts[0]
                if parts[0] != top or ".." in parts or member.name.startswith("/"):
                    raise ArchiveRefused(f"archive member {member.name!r} is outside its top directory {top!r}")
                relative = parts[1:]
                if not relative:
                    continue
                checked_relative("/".join(relative))
                if any(len(os.fsencode(part)) > 255 for part in relative):
                    raise ArchiveRefused(f"archive member {member.name!r}: a name part longer than 255 bytes")
                try:
                    target = destination.joinpath(*relative)
                    for parent in list(target.parents)[: len(relative) - 1]:
                        if parent.is_symlink():
                            raise ArchiveRefused(f"archive member {member.name!r} is written through a symlink")
                    if member.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                    elif member.issym():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        os.symlink(member.linkname, target)
                        written += 1
                    elif member.isfile():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        source = tar.extractfile(member)
                        assert source is not None
                        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                        with source, os.fdopen(fd, "wb") as out:
                            shutil.copyfileobj(source, out, 1 << 20)
                        os.chmod(target, 0o755 if member.mode & 0o100 else 0o644)
                        written += 1
                    else:
                        raise ArchiveRefused(f"archive member {member.name!r} is not a file, directory or symlink")
                except OSError as exc:  # a file where a directory is needed, a name too long, ...
                    if exc.errno in _DISK_FAULTS:  # no other URL helps: the CLI names the file and reason
                        raise
                    raise ArchiveRefused(f"archive member {member.name!r}: {exc.strerror or exc}") from None
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise ArchiveRefused(f"not a readable .tar.gz archive: {exc}") from None
    except InputError as exc:
        raise ArchiveRefused(f"archive refused: {exc}") from None
    return written
