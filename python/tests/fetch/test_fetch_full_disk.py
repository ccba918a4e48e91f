"""Fetching into a cache on a full disk (a real tmpfs filled up): the error names the cache
file that could not be written and says why, never a transfer interrupted or a URL that
failed; nothing unverified becomes an entry, and with room again the same fetch completes
with the locked bytes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from fixtures.full_disk import fill, small_disk
from fixtures.inputs import fixture_server

from sparkflake.core.blob_cache import Artifact, BlobCache
from sparkflake.core.errors import InputError
from sparkflake.fetch import fetch_all, import_from_dirs

PAYLOAD = os.urandom(3 << 20)
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def _artifact(*urls: str) -> Artifact:
    return Artifact("demo", "demo.whl", PAYLOAD_SHA, len(PAYLOAD), tuple(urls))


def test_a_download_onto_a_full_disk_names_the_partial_file_not_the_url(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "8m") as disk, fixture_server() as server:
        cache = BlobCache(disk / "cache")
        urls = (server.serve("/live/demo.whl", PAYLOAD), server.serve("/snapshot/demo.whl", PAYLOAD))
        cache.partial_dir.mkdir(parents=True)
        filler = fill(disk, leave=1 << 20)
        with pytest.raises(InputError) as raised:
            fetch_all([_artifact(*urls)], cache)
        assert str(raised.value).startswith(f"{cache.partial_path(PAYLOAD_SHA)}: cannot write: No space left on device")
        assert "transfer interrupted" not in str(raised.value) and "could not be fetched" not in str(raised.value)
        assert not cache.contains(PAYLOAD_SHA)
        filler.unlink()
        fetch_all([_artifact(*urls)], cache)
        assert cache.blob_path(PAYLOAD_SHA).read_bytes() == PAYLOAD


def test_an_import_onto_a_full_disk_names_the_cache(tmp_path: Path) -> None:
    supplied = tmp_path / "supplied"
    supplied.mkdir()
    (supplied / "demo.whl").write_bytes(PAYLOAD)
    with small_disk(tmp_path / "disk", "8m") as disk:
        cache = BlobCache(disk / "cache")
        cache.partial_dir.mkdir(parents=True)
        filler = fill(disk, leave=1 << 20)
        with pytest.raises(OSError) as raised:
            import_from_dirs([supplied], [_artifact()], cache)
        assert raised.value.strerror == "No space left on device" and raised.value.filename == str(cache.partial_dir)
        assert os.listdir(cache.partial_dir) == [] and not cache.contains(PAYLOAD_SHA)
        filler.unlink()
        import_from_dirs([supplied], [_artifact()], cache)
        assert cache.blob_path(PAYLOAD_SHA).read_bytes() == PAYLOAD
