"""Rank 0 fetching the archive from a URL: resumable (HTTP Range from the partial copy's
size), hashed in the same pass, published under the final name only when sha256 matches."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..core.counts import COUNT_PATTERN, ascii_count
from ..core.digest import READ_CHUNK
from ..core.errors import InputError
from ..core.own_files import held_bytes, open_own_file
from ..core.urls import redacted
from .files import (
    free_bytes,
    fsync_directory,
    hash_prefix,
    lacking_space,
    move_aside,
    partial_path,
)
from .receive import INCOMPLETE, MISMATCH, NO_SPACE, OK, receiver_lock

# What a download leaves free on its disk: a server that sends without a length it keeps to
# (a chunked body without end, a body ended only by the connection) fills it only to here.
FREE_RESERVE = 1 << 30

_CONTENT_RANGE = re.compile(rf"^bytes ({COUNT_PATTERN})-({COUNT_PATTERN})/({COUNT_PATTERN}|\*)$")


def download(url: str, final: Path, sha256: str, *, timeout: float = 60.0) -> dict[str, Any]:
    if not url.startswith(("https://", "http://")):
        raise InputError(f"{redacted(url)}: expected an http(s) URL")
    started = time.monotonic()
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.is_file() and hash_prefix(final, final.stat().st_size).hexdigest() == sha256:
        return {"status": OK, "path": str(final), "size": final.stat().st_size, "received": 0,
                "offset": 0, "seconds": 0.0, "sha256": sha256, "reused": True}
    if final.exists():
        move_aside(final, "mismatch")
    with receiver_lock(final):  # the lock a hop's receiver takes: one writer, and its record says whose
        return _download_locked(url, final, sha256, timeout, started)


def _download_locked(url: str, final: Path, sha256: str, timeout: float, started: float) -> dict[str, Any]:
    shown = redacted(url)  # what messages say: a presigned URL's query is a credential
    partial = partial_path(final)
    offset = held_bytes(partial)
    request = urllib.request.Request(url)
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - scheme checked
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            # the partial copy already holds everything the server has
            response = None
        else:
            raise InputError(f"{shown}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(f"{shown}: cannot connect: {getattr(exc, 'reason', exc)}") from exc
    received = 0
    expected_total = None
    interrupted = False
    overflowed = False
    if response is not None:
        with response:
            if offset and response.status == 206:
                match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
                if not match or int(match.group(1)) != offset:
                    raise InputError(f"{shown}: server answered Range bytes={offset}- with "
                                     f"Content-Range {response.headers.get('Content-Range')!r}")
                expected_total = None if match.group(3) == "*" else int(match.group(3))
                hasher = hash_prefix(partial, offset)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            else:
                offset = 0  # the server ignored Range: start over
                length = response.headers.get("Content-Length")
                expected_total = ascii_count(length) if length else None
                hasher = hashlib.sha256()
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            lacking = lacking_space(final, expected_total - offset) if expected_total is not None else None
            if lacking is not None:  # refused before the first byte, as a hop's receiver does
                return {"status": NO_SPACE, "message": lacking, "path": str(final)}
            with os.fdopen(open_own_file(partial, flags, "a copy being downloaded"), "wb") as sink:
                while True:
                    try:
                        chunk = response.read(READ_CHUNK)
                    except (http.client.IncompleteRead, ConnectionError, TimeoutError):
                        interrupted = True
                        break
                    if not chunk:
                        break
                    if free_bytes(final.parent) - len(chunk) < FREE_RESERVE:
                        overflowed = True
                        break
                    sink.write(chunk)
                    hasher.update(chunk)
                    received += len(chunk)
                sink.flush()
                os.fsync(sink.fileno())
    else:
        hasher = hash_prefix(partial, offset)
    size = offset + received
    if overflowed:
        partial.unlink()  # bytes past any length the server gave: no copy to resume
        return {"status": NO_SPACE, "path": str(final), "size": size, "offset": offset, "received": received,
                "reused": False, "seconds": round(time.monotonic() - started, 6),
                "message": f"{shown}: {size} bytes and no end, {FREE_RESERVE} bytes left free in {final.parent}: "
                           "the download was ended and its partial copy removed"}
    if interrupted or (expected_total is not None and size < expected_total):
        return {"status": INCOMPLETE, "path": str(final), "size": size, "offset": offset,
                "received": received, "reused": False, "seconds": round(time.monotonic() - started, 6),
                "message": f"{shown}: connection ended after {size} of {expected_total} bytes; resumable"}
    digest = hasher.hexdigest()
    result: dict[str, Any] = {"path": str(final), "size": size, "offset": offset,
                              "received": received, "sha256": digest, "reused": False,
                              "seconds": round(time.monotonic() - started, 6)}
    if digest != sha256:
        result.update(status=MISMATCH, moved_aside=str(move_aside(partial, "mismatch")),
                      message=f"{shown}: sha256 {digest} does not match the expected {sha256}")
        return result
    os.replace(partial, final)
    fsync_directory(final.parent)
    result["status"] = OK
    return result
