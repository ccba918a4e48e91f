"""The build's caches: stat-keyed file hashes and the assembled-tree cache."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sparkflake.compose.build import BuildRequest, build_profile
from sparkflake.compose.file_hashes import FileHashes
from sparkflake.compose.tree_cache import TreeCache, tree_identity

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "profiles" / "fixture"


def test_file_hashes_rehash_after_rewrite_with_same_mtime(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"one")
    hashes = FileHashes(tmp_path / "table.json")
    assert hashes.sha256(target) == hashlib.sha256(b"one").hexdigest()
    hashes.save()
    status = target.stat()
    target.write_bytes(b"two")
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))  # mtime restored, ctime not
    again = FileHashes(tmp_path / "table.json")
    assert again.sha256(target) == hashlib.sha256(b"two").hexdigest()


@given(st.binary(max_size=64))
def test_file_hashes_equal_sha256(tmp_path_factory, content: bytes) -> None:
    target = tmp_path_factory.mktemp("h") / "f"
    target.write_bytes(content)
    hashes = FileHashes(None)
    assert hashes.sha256(target) == hashes.sha256(target) == hashlib.sha256(content).hexdigest()


def test_tree_cache_reuses_intact_and_rebuilds_changed(tmp_path: Path) -> None:
    cache = TreeCache(tmp_path / "trees")
    builds = []

    def build(tree: Path) -> dict:
        builds.append(tree)
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "file").write_text("content")
        os.symlink("sub/file", tree / "link")
        return {"files": 1}

    first = cache.get_or_build({"kind": "t", "inputs": ["a"]}, build)
    assert not first.reused and first.manifest == {"files": 1}
    second = cache.get_or_build({"kind": "t", "inputs": ["a"]}, build)
    assert second.reused and second.tree == first.tree and len(builds) == 1
    (second.tree / "sub" / "file").write_text("CONTENT")
    third = cache.get_or_build({"kind": "t", "inputs": ["a"]}, build)
    assert not third.reused and len(builds) == 2
    assert (third.tree / "sub" / "file").read_text() == "content"
    (third.tree / "extra").write_text("x")
    assert not cache.get_or_build({"kind": "t", "inputs": ["a"]}, build).reused
    other = cache.get_or_build({"kind": "t", "inputs": ["b"]}, build)
    assert other.tree != third.tree
    assert "link" in tree_identity(other.tree)


def test_build_reuses_trees_and_refuses_nothing_when_intact(tmp_path: Path) -> None:
    request = BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "o", cache_root=tmp_path / "c", offline=True, keep_work=True)
    first = build_profile(request)
    assert first.assembly is not None and not any(first.assembly.trees_reused.values())
    second = build_profile(request)
    assert second.assembly is not None and all(second.assembly.trees_reused.values())
    assert second.image.manifest_digest == first.image.manifest_digest
    # A cached tree changed behind the build's back is assembled again, not trusted.
    so = second.assembly.vllm_tree / "opt/venv/lib/python3.11/site-packages/vllm/_C.abi3.so"
    so.write_bytes(so.read_bytes() + b"\0")
    third = build_profile(request)
    assert third.assembly is not None and third.assembly.trees_reused["vllm"] is False
    assert third.image.manifest_digest == first.image.manifest_digest
