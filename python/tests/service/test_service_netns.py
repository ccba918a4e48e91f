"""`sparkflake service` against four real ranks: network namespaces with sshd, podman (vfs)
in each, an image built by our OCI engine whose entrypoint stands in for `vllm serve`
(fixtures/service_site.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.netns_ranks import NetnsRanks
from fixtures.service_site import ServiceWorld

from sparkflake.service import workflow
from sparkflake.service.record import read_record


@pytest.fixture(scope="module")
def world(netns_ranks: NetnsRanks, tmp_path_factory: pytest.TempPathFactory):
    built = ServiceWorld(netns_ranks, tmp_path_factory.mktemp("service"))
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def service(world: ServiceWorld, tmp_path: Path) -> ServiceWorld:
    world.reset()
    yield world
    world.reset()


def service_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", "service", *args], capture_output=True, text=True,
                          timeout=timeout)


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_up_status_down_and_a_foreign_container_is_left_alone(service: ServiceWorld, tmp_path: Path) -> None:
    site = service.site_file(tmp_path / "site.toml")
    # a container that is not the service's, on rank 1: down must not touch it
    foreign = service.podman(1, "create", "--name", "not-ours", service.image["config"], "--port", "1")
    assert foreign.returncode == 0, foreign.stderr

    up = service_cli("up", str(site), "--progress", "json", "--json")
    assert up.returncode == 0, up.stderr + up.stdout
    record = json.loads(up.stdout)
    assert record["outcome"] == "ready" and record["failure"] is None
    assert record["config_digest"] == service.image["config"]
    assert record["manifest_digest"] == service.image["manifest"]
    assert [r["rank"] for r in record["ranks"]] == [0, 1, 2, 3]
    assert all(r["started_at"] and r["container"] == f"sparkflake-glm53-dflash7-rank{r['rank']}"
               for r in record["ranks"])
    # rank 0 first, then the others; rank 0 ready last
    progress = events(up.stderr)
    started = [e["rank"] for e in progress if e["phase"] == "started"]
    assert started[0] == 0 and sorted(started) == [0, 1, 2, 3]
    assert progress[-1]["phase"] == "ready" and progress[-1]["rank"] == 0
    assert sorted(e["rank"] for e in progress if e["phase"] == "admitted") == [0, 1, 2, 3]
    # every admission check of every rank passed, and the gang's
    admission = record["admission"]
    assert admission["ok"] and {c["id"] for c in admission["gang"]} >= {
        "gang.image", "gang.settings", "gang.checkpoint-pins", "gang.spec", "gang.topology"}
    rank_checks = {c["id"] for c in admission["ranks"][0]["checks"]}
    assert {"engine.reachable", "image.id", "image.labels", "image.manifest", "checkpoint.target",
            "checkpoint.draft", "ports.free", "cache-root.dedicated", "fabric.devices"} <= rank_checks
    # the record on disk is the one printed
    stored = read_record(record["record_path"])
    assert stored.deployment == record["deployment"] and stored.outcome == "ready"

    status = service_cli("status", str(site), "--json")
    assert status.returncode == 0, status.stderr + status.stdout
    shown = json.loads(status.stdout)
    assert shown["ready"] is True and shown["deployment"] == record["deployment"]
    for rank in shown["ranks"]:
        (container,) = rank["containers"]
        assert container["running"] and container["image"].removeprefix("sha256:") == \
            service.image["config"].removeprefix("sha256:")
        assert container["settings_hash"] == record["settings_hash"] and container["started_at"]
        assert rank["deployment"] == record["deployment"]

    down = service_cli("down", str(site), "--json")
    assert down.returncode == 0, down.stderr
    assert [r["containers"] for r in json.loads(down.stdout)["ranks"]] == [
        [f"sparkflake-glm53-dflash7-rank{index}"] for index in range(4)]
    assert [service.containers(index) for index in range(4)] == [[], ["not-ours"], [], []]
    after = service_cli("status", str(site))
    assert after.returncode == 1 and "NOT ready" in after.stdout
