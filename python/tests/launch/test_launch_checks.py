"""Checks before start: verified-hash cache trust model, cache root, ports, plan report."""

from __future__ import annotations

import json
import os
import socket

from fixtures.launch import bound_contract, fabric_host, site_env, write_env

from sparkflake.launch.checks import (
    check_cache_root_dedicated,
    check_checkpoint,
    check_ports,
    filesystem_type,
)
from sparkflake.launch.hashcache import VerifiedHashCache
from sparkflake.launch.plan import plan_launch


def test_hash_cache_hits_only_while_the_stat_key_is_unchanged(tmp_path):
    contract = bound_contract("glm53-dflash7", tmp_path)
    cache_path = tmp_path / "hashes.json"
    calls = []

    def counting(path):
        calls.append(path)
        from sparkflake.core.digest import sha256_file

        return sha256_file(path)

    first = VerifiedHashCache(cache_path)
    check = check_checkpoint("checkpoint.draft", str(tmp_path / "draft"), contract.draft_files, first)
    assert check.status == "pass"
    first.save()
    warm = VerifiedHashCache(cache_path)
    for entry in contract.draft_files:
        path = tmp_path / "draft" / entry.path
        assert warm.sha256(str(path), os.stat(path), counting) == entry.sha256
    assert calls == [] and warm.hits == len(contract.draft_files)
    # same size, content changed, mtime put back: ctime still moves, so it is re-hashed
    weights = tmp_path / "draft" / "model.safetensors"
    stat = weights.stat()
    content = weights.read_bytes()
    weights.write_bytes(bytes([content[0] ^ 0xFF]) + content[1:])
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    tampered = check_checkpoint("checkpoint.draft", str(tmp_path / "draft"), contract.draft_files, VerifiedHashCache(cache_path))
    assert tampered.status == "fail" and "model.safetensors: sha256" in tampered.detail
    # --rehash ignores the cache entirely
    rehash = VerifiedHashCache(cache_path, rehash=True)
    rehash.sha256(str(tmp_path / "draft" / "config.json"), os.stat(tmp_path / "draft" / "config.json"), counting)
    assert len(calls) == 1
    # a corrupt cache file is ignored, not trusted
    cache_path.write_text("{not json")
    assert VerifiedHashCache(cache_path).entries == {}


def test_checkpoint_size_and_missing_files(tmp_path):
    contract = bound_contract("glm53-dflash7", tmp_path)
    (tmp_path / "target" / "tokenizer.json").unlink()
    with open(tmp_path / "target" / "config.json", "ab") as handle:
        handle.write(b" ")
    check = check_checkpoint("checkpoint.target", str(tmp_path / "target"), contract.target_files, VerifiedHashCache(None))
    assert check.status == "fail"
    assert "tokenizer.json: No such file" in check.detail and "config.json: size" in check.detail


def test_cache_root_dedicated(tmp_path):
    marker = {"schema": "sparkflake.cache-root/v1", "profile": "glm53-dflash7", "physical_rank": 0, "node_address": "10.0.0.1"}
    allowed = {".sparkflake-cache-root.json", ".sparkflake", "quarantine", "glm53-dflash7"}
    root = tmp_path / "cache"
    assert check_cache_root_dedicated(root, marker, allowed).status == "pass"
    root.mkdir()
    (root / "someone-elses-data").mkdir()
    foreign = check_cache_root_dedicated(root, marker, allowed)
    assert foreign.status == "fail" and "someone-elses-data" in foreign.detail
    (root / "someone-elses-data").rmdir()
    (root / ".sparkflake-cache-root.json").write_text(json.dumps({**marker, "physical_rank": 2}))
    other = check_cache_root_dedicated(root, marker, allowed)
    assert other.status == "fail" and "rank 2" in other.detail
    (root / ".sparkflake-cache-root.json").write_text(json.dumps(marker))
    assert check_cache_root_dedicated(root, marker, allowed).status == "pass"
    assert check_cache_root_dedicated(tmp_path / "no" / "parent", marker, allowed).status == "fail"
    assert filesystem_type(tmp_path) is not None


def test_ports():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert check_ports(0, [("API_PORT", port)]).status == "fail"
        assert check_ports(1, [("API_PORT", port)]).status == "pass"


def test_plan_report_without_engine(tmp_path):
    contract = bound_contract("glm53-dflash7", tmp_path)
    env_file = write_env(tmp_path, site_env(tmp_path, 0, API_PORT="18461", MASTER_PORT="18462"))
    plan = plan_launch(rank=0, env_file=env_file, contract=contract, engine=None, check_engine=False,
                       host_root=fabric_host(tmp_path / "host"))
    report = plan.report(explain=True)
    assert {c["id"] for c in report["checks"]} == {
        "cache-root.dedicated", "cache-root.local", "checkpoint.target", "checkpoint.draft", "cache-root.state",
        "ports.free", "fabric.rdma-devices", "fabric.hca", "fabric.interface"}
    assert plan.ok, report["checks"]
    assert report["explain"]["CP_KV_INTERLEAVE"].startswith("auto:")
    assert isinstance(report["argv"], list) and report["resolved"]["KV_CACHE_GIB"] == 26
    assert not (tmp_path / "cache").exists()  # a dry run creates no state
