"""The records that remember a file's sha256 by its stat identity: the fan-out store's
(``distribute.store.VerifiedRecord``) and the launch's (``launch.hashcache.VerifiedHashCache``).
What one saves the next reads back unchanged; a damaged or foreign record is read as empty
(never trusted, never a traceback), as is one nested past the JSON parser's recursion or one
that cannot be read (a directory, a FIFO, no permission, a symlink); the remembered digest
is the file's sha256."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.distribute.store import RECORD_FORMAT, RECORD_NAME, VerifiedRecord
from sparkflake.launch.hashcache import VerifiedHashCache

pytestmark = pytest.mark.distribute

HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
_identities = st.lists(st.integers(0, 1 << 62), min_size=5, max_size=5)
_remembered = st.dictionaries(HEX, _identities, max_size=8)
# documents that are JSON but not a record of ours, and bytes that are no JSON
_foreign = st.one_of(
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=8).map(lambda document: json.dumps(document).encode()),
    st.binary(max_size=64),
    st.just(b'{"format": "sparkflake-verified-blobs/v0", "blobs": {}}'),
)


@given(_remembered)
def test_the_store_record_reads_back_what_it_saved(remembered: dict[str, list[int]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        record = VerifiedRecord(root)
        for digest, identity in remembered.items():
            record.remember(f"sha256:{digest}", identity)
        record.save()
        assert (root / RECORD_NAME).exists() == bool(remembered)
        again = VerifiedRecord(root)
        assert again.blobs == remembered
        for digest, identity in remembered.items():
            assert again.trusted(f"sha256:{digest}", identity)
            assert not again.trusted(f"sha256:{digest}", [*identity[:4], identity[4] + 1])


@given(_foreign)
def test_a_foreign_store_record_trusts_nothing(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / RECORD_NAME).write_bytes(content)
        record = VerifiedRecord(root)
        assert record.blobs == {}  # (no draw is a record of RECORD_FORMAT)


@given(st.integers(1, 100_000), st.sampled_from([b"[", b'{"a":']))
def test_a_deeply_nested_store_record_trusts_nothing(depth: int, opener: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / RECORD_NAME).write_bytes(opener * depth)
        assert VerifiedRecord(Path(directory)).blobs == {}


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_a_store_record_that_cannot_be_read_trusts_nothing(tmp_path: Path, kind: str) -> None:
    path = tmp_path / RECORD_NAME
    good = json.dumps({"format": RECORD_FORMAT, "blobs": {"0" * 64: [1, 2, 3, 4, 5]}})
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opened without O_NONBLOCK, the read would block for ever
    else:
        (tmp_path / "elsewhere.json").write_text(good)
        path.symlink_to(tmp_path / "elsewhere.json")

    def blocked(signum: int, frame: object) -> None:
        raise AssertionError(f"reading the {kind} at the record's name blocked")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    try:
        assert VerifiedRecord(tmp_path).blobs == {}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_an_unreadable_store_record_trusts_nothing() -> None:
    """Read as nobody when the suite runs as root (root reads a file of mode 0), in a
    directory nobody may enter."""
    good = json.dumps({"format": RECORD_FORMAT, "blobs": {"0" * 64: [1, 2, 3, 4, 5]}})
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        os.chmod(scratch, 0o755)
        path = Path(scratch) / RECORD_NAME
        path.write_text(good)
        path.chmod(0)
        user = 65534 if os.geteuid() == 0 else None
        read = subprocess.run(
            [sys.executable, "-c", "import os, sys\nfrom pathlib import Path\n"
             "from sparkflake.distribute.store import RECORD_NAME, VerifiedRecord\n"
             "assert not os.access(Path(sys.argv[1]) / RECORD_NAME, os.R_OK)\n"
             "print(VerifiedRecord(Path(sys.argv[1])).blobs)", scratch],
            capture_output=True, text=True, cwd="/", user=user, group=user,
            extra_groups=[] if user is not None else None, timeout=60)
        assert read.returncode == 0, read.stderr
        assert read.stdout.strip() == "{}"


@given(_remembered, st.dictionaries(HEX, st.one_of(st.text(max_size=3), st.lists(st.text(max_size=2), min_size=1)),
                                    min_size=1, max_size=3))
def test_a_store_record_keeps_only_its_well_formed_entries(remembered, damaged) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        blobs = {**damaged, **remembered}
        (root / RECORD_NAME).write_text(json.dumps({"format": RECORD_FORMAT, "blobs": blobs}))
        assert VerifiedRecord(root).blobs == remembered


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_the_hash_cache_answers_the_files_sha256_and_remembers_it(contents: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        files = []
        for number, content in enumerate(contents):
            path = root / f"f{number}"
            path.write_bytes(content)
            files.append((str(path), hashlib.sha256(content).hexdigest()))
        cache = VerifiedHashCache(root / "cache.json")
        for path, expected in files:
            assert cache.sha256(path, os.stat(path)) == expected
        cache.save()
        again = VerifiedHashCache(root / "cache.json")

        def refuse(path: str) -> str:
            raise AssertionError(f"{path} hashed again though its stat is unchanged")

        for path, expected in files:
            assert again.sha256(path, os.stat(path), hasher=refuse) == expected
        assert again.hits == len(files)
        # a file whose stat changed is hashed again
        path, _ = files[0]
        Path(path).write_bytes(b"changed" + contents[0])
        assert again.sha256(path, os.stat(path)) == hashlib.sha256(b"changed" + contents[0]).hexdigest()


@given(st.one_of(_foreign, st.integers(1, 100_000).map(lambda depth: b"[" * depth)))
def test_a_damaged_hash_cache_is_empty(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cache.json"
        path.write_bytes(content)
        assert VerifiedHashCache(path).entries == {}
