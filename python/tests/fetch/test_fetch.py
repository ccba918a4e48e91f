"""The content-addressed cache against a local HTTP server: resumes, mirrors, and every
kind of bad bytes refused before it can become a cache entry."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from fixtures.inputs import fixture_server
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.blob_cache import Artifact, BlobCache, fetch_artifact
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.fetch import fetch_all, import_from_dirs

PAYLOAD = os.urandom(256 * 1024 + 12345)
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def _artifact(*urls: str, content: bytes = PAYLOAD, size: int | None = None, name: str = "demo") -> Artifact:
    return Artifact(name, f"{name}.whl", hashlib.sha256(content).hexdigest(), len(content) if size is None else size, tuple(urls))


def _cache_is_clean(cache: BlobCache) -> bool:
    blobs = list(cache.blob_dir.glob("*")) if cache.blob_dir.exists() else []
    partials = list(cache.partial_dir.glob("*")) if cache.partial_dir.exists() else []
    return not blobs and not partials


def test_download_verifies_and_enters_cache(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    seen: list[tuple[int, int]] = []
    with fixture_server() as server:
        url = server.serve("/demo.whl", PAYLOAD)
        report = fetch_all([_artifact(url)], cache, progress=lambda done, total, _label: seen.append((done, total)))
    assert cache.blob_path(PAYLOAD_SHA).read_bytes() == PAYLOAD
    assert report.outcomes[0].source == "download" and report.downloaded_bytes == len(PAYLOAD)
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert all(total == len(PAYLOAD) for _done, total in seen)
    # a second run finds it in the cache (re-hashed)
    again = fetch_all([_artifact("http://127.0.0.1:9/unreachable")], cache)
    assert again.outcomes[0].source == "cache"


def test_resume_with_range(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    partial = cache.partial_path(PAYLOAD_SHA)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(PAYLOAD[:100_000])
    with fixture_server() as server:
        url = server.serve("/demo.whl", PAYLOAD, behaviour="range")
        outcome = fetch_artifact(_artifact(url), cache)
    assert outcome.source == "download"
    assert cache.blob_path(PAYLOAD_SHA).read_bytes() == PAYLOAD
    assert not partial.exists()


def test_server_ignoring_range_restarts_cleanly(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    partial = cache.partial_path(PAYLOAD_SHA)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"garbage prefix that is not the file")
    with fixture_server() as server:
        url = server.serve("/demo.whl", PAYLOAD, behaviour="ok")
        fetch_artifact(_artifact(url), cache)
    assert cache.blob_path(PAYLOAD_SHA).read_bytes() == PAYLOAD


def test_falls_back_to_the_next_mirror(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    with fixture_server() as server:
        gone = server.serve("/live/demo.whl", b"", behaviour="404")
        snapshot = server.serve("/snapshot/demo.whl", PAYLOAD)
        outcome = fetch_artifact(_artifact(gone, snapshot), cache)
    assert outcome.url == snapshot


def test_every_failure_is_named_with_every_url(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    with fixture_server() as server:
        gone = server.serve("/gone.whl", b"", behaviour="404")
        short = server.serve("/short.whl", PAYLOAD, behaviour="truncate")
        wrong = server.serve("/wrong.whl", PAYLOAD[::-1])
        with pytest.raises(InputError) as caught:
            fetch_all([_artifact(gone, short, wrong)], cache)
    message = str(caught.value)
    assert "demo: demo.whl (sha256 " + PAYLOAD_SHA in message
    assert f"tried {gone}: HTTP 404" in message
    assert f"tried {short}: truncated" in message or f"tried {short}: transfer interrupted" in message
    assert f"tried {wrong}: sha256 mismatch" in message
    assert "--from DIR" in message
    assert _cache_is_clean(cache)


def test_wrong_size_in_the_lock_is_refused(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    with fixture_server() as server:
        url = server.serve("/demo.whl", PAYLOAD)
        with pytest.raises(InputError, match="more than the locked size"):
            fetch_all([_artifact(url, size=len(PAYLOAD) - 1)], cache)
        with pytest.raises(InputError, match="truncated"):
            fetch_all([_artifact(url, size=len(PAYLOAD) + 1)], cache)
    assert _cache_is_clean(cache)


def test_operator_supplied_without_urls(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    supplied = tmp_path / "supplied"
    supplied.mkdir()
    content = b"patched NCCL library bytes"
    (supplied / "libnccl.so.2").write_bytes(content)
    (supplied / "unrelated.bin").write_bytes(b"x" * len(content))
    artifact = _artifact(content=content, name="nccl-switchless")
    with pytest.raises(InputError, match=r"(?s)nccl-switchless: .*no URL in the lock.*--from DIR"):
        fetch_all([artifact], cache)
    report = fetch_all([artifact], cache, from_dirs=[supplied])
    assert report.outcomes[0].source == "import"
    assert cache.verified_path(artifact).read_bytes() == content


def test_import_refuses_a_file_that_changes(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    source = tmp_path / "file"
    source.write_bytes(b"abc")
    artifact = _artifact(content=b"abd", name="x")
    with pytest.raises(CheckFailed, match="lock says sha256"):
        cache.import_file(source, artifact)
    assert _cache_is_clean(cache)
    assert import_from_dirs([tmp_path], [artifact], cache) == []


@given(position=st.integers(min_value=0, max_value=len(PAYLOAD) - 1), flip=st.integers(min_value=1, max_value=255))
def test_tampered_download_never_enters(tmp_path_factory: pytest.TempPathFactory, position: int, flip: int) -> None:
    cache = BlobCache(tmp_path_factory.mktemp("cache"))
    tampered = bytearray(PAYLOAD)
    tampered[position] ^= flip
    with fixture_server() as server:
        url = server.serve("/demo.whl", bytes(tampered))
        with pytest.raises(InputError, match="sha256 mismatch"):
            fetch_all([_artifact(url)], cache)
    assert _cache_is_clean(cache)


@given(cut=st.integers(min_value=0, max_value=len(PAYLOAD) - 1))
def test_truncated_download_never_enters(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    cache = BlobCache(tmp_path_factory.mktemp("cache"))
    with fixture_server() as server:
        url = server.serve("/demo.whl", PAYLOAD[:cut])
        with pytest.raises(InputError, match="truncated"):
            fetch_all([_artifact(url)], cache)
    assert _cache_is_clean(cache)


@given(position=st.integers(min_value=0, max_value=len(PAYLOAD) - 1))
def test_tampered_cache_entry_is_refused_and_evicted(tmp_path_factory: pytest.TempPathFactory, position: int) -> None:
    cache = BlobCache(tmp_path_factory.mktemp("cache"))
    artifact = _artifact()
    blob = cache.blob_path(artifact.sha256)
    blob.parent.mkdir(parents=True)
    tampered = bytearray(PAYLOAD)
    tampered[position] ^= 0x01
    blob.write_bytes(bytes(tampered))
    with pytest.raises(CheckFailed, match=r"demo: cache entry .* was altered .*moved to .*quarantine"):
        cache.verified_path(artifact)
    assert not blob.exists()
    [kept] = (cache.root / "quarantine" / "blobs").iterdir()  # moved aside, never dropped
    assert kept.read_bytes() == bytes(tampered) and kept.name.startswith(artifact.sha256 + ".")


def test_fetch_repairs_a_tampered_entry(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    blob = cache.blob_path(PAYLOAD_SHA)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"rotten")
    with fixture_server() as server:
        outcome = fetch_artifact(_artifact(server.serve("/demo.whl", PAYLOAD)), cache)
    assert outcome.altered is not None and outcome.source == "download"
    assert outcome.altered.moved_to.read_bytes() == b"rotten"
    assert blob.read_bytes() == PAYLOAD


def test_offline_fetch_names_the_altered_entry_instead_of_calling_it_missing(tmp_path: Path) -> None:
    """Issue 31's drift: an altered entry with no URL to repair it from was dropped and the
    input reported as missing; the refusal now names the entry, its hash and where it went."""
    cache = BlobCache(tmp_path / "cache")
    blob = cache.blob_path(PAYLOAD_SHA)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"rotten")
    with pytest.raises(InputError) as refused:
        fetch_all([_artifact()], cache)
    message = str(refused.value)
    rotten = hashlib.sha256(b"rotten").hexdigest()
    assert f"cache entry {blob} was altered (sha256 {rotten}, 6 bytes); moved to {cache.root}/quarantine/blobs/" in message
    [kept] = (cache.root / "quarantine" / "blobs").iterdir()
    assert kept.read_bytes() == b"rotten"


def test_parallel_many_inputs(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    contents = [os.urandom(10_000 + i) for i in range(24)]
    with fixture_server() as server:
        artifacts = [
            _artifact(server.serve(f"/f{i}", content), content=content, name=f"input-{i}")
            for i, content in enumerate(contents)
        ]
        report = fetch_all(artifacts + artifacts[:3], cache, workers=8)
    assert len(report.outcomes) == 24
    for content in contents:
        assert cache.blob_path(hashlib.sha256(content).hexdigest()).read_bytes() == content


def test_artifact_refuses_bad_hash() -> None:
    with pytest.raises(InputError, match="64 lowercase hex"):
        Artifact("x", "x.whl", "ABC", 1, ())


def _bytes_read() -> int:
    """This process's bytes read so far (read(2) and kin: every file read, every copy)."""
    with open("/proc/self/io") as report:
        return int(dict(line.split(": ") for line in report.read().splitlines())["rchar"])


def test_an_import_reads_each_supplied_file_once(tmp_path: Path) -> None:
    """A --from file of a locked size was hashed to find its input, then read again as it
    was copied in and hashed a second time: the Nix route imports every input so (GBs of
    wheels). Now the copy is the only read; a file of that size that is no input is left
    out and leaves nothing behind."""
    content = os.urandom(32 << 20)
    supplied = tmp_path / "supplied"
    supplied.mkdir()
    (supplied / "input.whl").write_bytes(content)
    (supplied / "same-size-other.bin").write_bytes(os.urandom(len(content)))
    artifact = _artifact(content=content, name="big")
    cache = BlobCache(tmp_path / "cache")
    before = _bytes_read()
    outcomes = import_from_dirs([supplied], [artifact], cache)
    read = _bytes_read() - before
    assert [(o.name, o.sha256, o.source) for o in outcomes] == [("big", artifact.sha256, "import")]
    assert read < 2.5 * len(content), f"importing read {read / len(content):.2f}x the input (and its same-size neighbour)"
    assert cache.verified_path(artifact).read_bytes() == content
    assert list(cache.partial_dir.glob("*")) == []


def test_an_import_of_an_input_with_no_locked_size_is_hashed_before_it_is_copied(tmp_path: Path) -> None:
    content = b"an operator's library"
    supplied = tmp_path / "supplied"
    supplied.mkdir()
    (supplied / "lib.so").write_bytes(content)
    (supplied / "other.so").write_bytes(b"not it")
    artifact = Artifact("lib", "lib.so", hashlib.sha256(content).hexdigest(), None, ())
    cache = BlobCache(tmp_path / "cache")
    outcomes = import_from_dirs([supplied], [artifact], cache)
    assert [(o.name, o.size) for o in outcomes] == [("lib", len(content))]
    assert cache.blob_path(artifact.sha256).read_bytes() == content
    assert list(cache.partial_dir.glob("*")) == []
