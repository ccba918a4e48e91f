"""Checks before start: verified-hash cache trust model, cache root, ports, plan report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from fixtures.launch import (
    bound_contract,
    site_env,
    write_bound_profile,
    write_checkpoint,
    write_env,
)

from sparkflake.core.errors import InputError
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
    plan = plan_launch(rank=0, env_file=env_file, contract=contract, engine=None, check_engine=False)
    report = plan.report(explain=True)
    assert {c["id"] for c in report["checks"]} == {
        "cache-root.dedicated", "cache-root.local", "checkpoint.target", "checkpoint.draft", "cache-root.state", "ports.free",
        "checkpoint.target.model", "checkpoint.draft.model"}
    assert plan.ok, report["checks"]
    assert report["served_models"]["target"]["architectures"] == ["Glm5NextForCausalLM"]
    assert report["explain"]["CP_KV_INTERLEAVE"].startswith("auto:")
    assert isinstance(report["argv"], list) and report["resolved"]["KV_CACHE_GIB"] == 26
    assert not (tmp_path / "cache").exists()  # a dry run creates no state


def _tree(root):
    return sorted((str(path.relative_to(root)), path.is_symlink()) for path in root.rglob("*"))


def test_a_cache_root_through_a_symlinked_parent_inside_the_checkpoint_is_refused(tmp_path):
    """Issue 28 class 6: the spelling differs from the checkpoint's, the directory is inside it."""
    contract = bound_contract("glm53-dflash7", tmp_path)
    (tmp_path / "fast").symlink_to(tmp_path / "target")
    env_file = write_env(tmp_path, site_env(tmp_path, 0, API_PORT="18461", MASTER_PORT="18462").replace(
        f"CACHE_ROOT={tmp_path / 'cache'}", f"CACHE_ROOT={tmp_path / 'fast' / 'rank-cache'}"))
    before = _tree(tmp_path)
    with pytest.raises(InputError) as caught:
        plan_launch(rank=0, env_file=env_file, contract=contract, engine=None, check_engine=False)
    assert str(caught.value).startswith(
        f"{env_file}:4: CACHE_ROOT={tmp_path / 'fast' / 'rank-cache'} resolves to {tmp_path / 'target' / 'rank-cache'}, "
        f"which overlaps TARGET_MODEL_PATH={tmp_path / 'target'}")
    assert _tree(tmp_path) == before


def test_a_symlinked_checkpoint_inside_the_cache_root_is_refused(tmp_path):
    contract = bound_contract("glm53-dflash7", tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "draft").rename(tmp_path / "cache" / "draft")
    (tmp_path / "draft").symlink_to(tmp_path / "cache" / "draft")
    env_file = write_env(tmp_path, site_env(tmp_path, 0, API_PORT="18461", MASTER_PORT="18462"))
    with pytest.raises(InputError, match="overlaps DRAFT_MODEL_PATH=.*the cache root must be dedicated"):
        plan_launch(rank=0, env_file=env_file, contract=contract, engine=None, check_engine=False)


def test_the_cli_refuses_the_symlinked_cache_root_with_exit_2(tmp_path):
    profiles = tmp_path / "p"
    target = write_checkpoint(tmp_path / "target", {"config.json": b"{}"})
    profile = write_bound_profile(profiles, "glm53-mtp5", target, None)
    (tmp_path / "fast").symlink_to(tmp_path / "target")
    env_file = write_env(tmp_path, site_env(tmp_path, 1, draft=False).replace(
        f"CACHE_ROOT={tmp_path / 'cache'}", f"CACHE_ROOT={tmp_path / 'fast' / 'c'}"))
    completed = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "1", str(env_file), "--profile", str(profile),
         "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 2, completed.stderr
    assert "resolves to" in completed.stderr and "Traceback" not in completed.stderr
    assert sorted(path.name for path in (tmp_path / "target").iterdir()) == ["config.json"]


def test_ports_taken_on_ipv6_only_are_busy():
    """Issue 28 class 10: a listener on [::] alone takes the port from a server on every address."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as busy:
        busy.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        busy.bind(("::", 0))
        busy.listen()
        port = busy.getsockname()[1]
        check = check_ports(0, [("MASTER_PORT", port)])
        assert check.status == "fail" and check.detail == f"MASTER_PORT={port} in use (IPv6)"


def test_a_dry_run_with_an_unspecified_master_address_exits_2(tmp_path):
    profiles = tmp_path / "p"
    target = write_checkpoint(tmp_path / "target", {"config.json": b"{}"})
    profile = write_bound_profile(profiles, "glm53-mtp5", target, None)
    env_file = write_env(tmp_path, site_env(tmp_path, 1, draft=False).replace("MASTER_ADDRESS=10.0.0.1",
                                                                               "MASTER_ADDRESS=0.0.0.0"))
    completed = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "1", str(env_file), "--profile", str(profile),
         "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 2, completed.stderr
    assert f"{env_file}:2: MASTER_ADDRESS=0.0.0.0: the unspecified address" in completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "cache").exists()
