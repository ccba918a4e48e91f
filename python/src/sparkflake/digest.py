"""Digests of files and trees.

File digests are streamed (fixed-size reads, one pass). NAR serialization, nix32/SRI
conversion and git object ids live here too.
"""

from __future__ import annotations

import hashlib
import os

from .errors import InputError

READ_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Lowercase hex sha256 of a file's bytes, streamed."""
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(READ_CHUNK):
                hasher.update(chunk)
    except OSError as exc:
        raise InputError(f"{os.fspath(path)}: cannot read: {exc.strerror}") from exc
    return hasher.hexdigest()
