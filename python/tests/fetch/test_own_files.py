"""What stands at a name where the cache keeps its own file (a download's lock, its partial
copy, a git fetch's lock) is refused, never written through: a symlink to an operator's file,
a hard link to one, a FIFO (which would block the open for ever). The operator's file keeps
its bytes and the error names the path. ``core/own_files`` is the one opener."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from fixtures.inputs import fixture_server

from sparkflake.core.blob_cache import Artifact, BlobCache, fetch_artifact
from sparkflake.core.errors import InputError
from sparkflake.core.own_files import holding_lock, open_own_file
from sparkflake.fetch.git import GitCache, fetch_git
from sparkflake.lock.pins import GitPin

PAYLOAD = b"a locked wheel " * 1000
SHA = hashlib.sha256(PAYLOAD).hexdigest()
OPERATOR_BYTES = b"the operator's own notes\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "operator" / "notes.txt"
    victim.parent.mkdir()
    victim.write_bytes(OPERATOR_BYTES)
    return victim


def _artifact(url: str) -> Artifact:
    return Artifact("demo", "demo.whl", SHA, len(PAYLOAD), (url,))


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo", "dangling"])
def test_a_download_lock_that_is_not_the_caches_own_is_refused(tmp_path, kind):
    victim = _victim(tmp_path)
    cache = BlobCache(tmp_path / "cache")
    lock = cache.root / "locks" / SHA
    lock.parent.mkdir(parents=True)
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, lock)
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to(tmp_path / "operator" / "made-by-the-link")
    began = time.monotonic()
    with fixture_server() as server, pytest.raises(InputError) as refused:
        fetch_artifact(_artifact(server.serve("/demo.whl", PAYLOAD)), cache)
    assert time.monotonic() - began < 30  # a FIFO is refused, not waited on
    assert str(refused.value).startswith(f"{lock}: ") and "the lock of a download" in str(refused.value)
    assert victim.read_bytes() == OPERATOR_BYTES
    assert not (tmp_path / "operator" / "made-by-the-link").exists()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_partial_download_that_is_not_the_caches_own_is_refused(tmp_path, kind):
    victim = _victim(tmp_path)
    cache = BlobCache(tmp_path / "cache")
    partial = cache.partial_path(SHA)
    partial.parent.mkdir(parents=True)
    if kind == "symlink":
        partial.symlink_to(victim)
    else:
        os.link(victim, partial)
    with fixture_server() as server, pytest.raises(InputError) as refused:
        fetch_artifact(_artifact(server.serve("/demo.whl", PAYLOAD)), cache)
    assert str(refused.value).startswith(f"{partial}: ") and "a partial download" in str(refused.value)
    assert victim.read_bytes() == OPERATOR_BYTES and os.stat(victim).st_mode & 0o222  # not made read-only
    assert not cache.blob_path(SHA).exists()


def test_a_git_fetch_lock_that_is_a_symlink_is_refused(tmp_path):
    victim = _victim(tmp_path)
    cache = GitCache(tmp_path / "cache")
    rev = "a" * 40
    lock = cache.root / "locks" / f"git-{rev}"
    lock.parent.mkdir(parents=True)
    lock.symlink_to(victim)
    pin = GitPin(name="src", urls=("file:///nonexistent",), rev=rev, tree="b" * 40)
    with pytest.raises(InputError) as refused:
        fetch_git(pin, cache)
    assert str(refused.value).startswith(f"{lock}: is a symlink") and "the lock of a git fetch" in str(refused.value)
    assert victim.read_bytes() == OPERATOR_BYTES


def test_an_own_file_is_opened_created_and_truncated_only_after_its_checks(tmp_path):
    path = tmp_path / "own"
    descriptor = open_own_file(path, os.O_WRONLY | os.O_CREAT, "a test file")
    os.write(descriptor, b"kept bytes")
    os.close(descriptor)
    with holding_lock(path, "a test lock"):  # a lock never truncates what it locks
        assert path.read_bytes() == b"kept bytes"
    os.close(open_own_file(path, os.O_WRONLY | os.O_TRUNC, "a test file"))
    assert path.read_bytes() == b""
    (tmp_path / "dir").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        open_own_file(tmp_path / "dir", os.O_RDWR, "a test file")
