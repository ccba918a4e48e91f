"""`sparkflake service` against four real ranks: network namespaces with sshd, podman (vfs)
in each, an image built by our OCI engine whose entrypoint stands in for `vllm serve`
(fixtures/service_site.py)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.oci import RegistryServer, registry_server  # noqa: F401 - the session registry
from fixtures.service_site import ServiceWorld, world  # noqa: F401 - the module's four-rank world

from sparkflake.service import workflow
from sparkflake.service.record import read_record


@pytest.fixture
def service(world: ServiceWorld, tmp_path: Path) -> ServiceWorld:  # noqa: F811
    world.reset()
    yield world
    world.reset()


def service_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", "service", *args], capture_output=True, text=True,
                          timeout=timeout)


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def slowed_agent(delays: dict[tuple[str, int], float]) -> tuple[str, ...]:
    """The service's agent, made to wait ``delays[(command, rank)]`` seconds before it runs
    (a slow rank's admission, commit or stop), in a shell that, like the agent, carries on
    when its SSH session ends."""
    cases = "".join(f"\"{command} \"*'\"rank\":{rank},'*) sleep {seconds};; "
                    for (command, rank), seconds in delays.items())
    script = f'case "$1 $3" in {cases}esac; exec "$0" -m sparkflake.service.agent "$@"'
    return ("/bin/sh", "-c", script, sys.executable)


def rank_processes(service: ServiceWorld, wanted: Callable[[list[str]], bool]) -> list[str]:
    """The command lines of the processes on the ranks (their network namespaces) that
    ``wanted`` picks by argv."""
    found = []
    for index in range(service.count):
        listed = subprocess.run(["ip", "netns", "pids", service.ranks.namespace(index)], capture_output=True,
                                text=True)
        for pid in listed.stdout.split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            except OSError:
                continue  # ended meanwhile
            if argv and wanted(argv):
                found.append(f"rank {index}: {' '.join(argv)[:200]}")
    return found


def service_agents(argv: list[str]) -> bool:
    return any("sparkflake.service.agent" in arg for arg in argv)


def engine_waits(argv: list[str]) -> bool:
    return Path(argv[0]).name == "podman" and "wait" in argv


def gone_within(seconds: float, find: Callable[[], list[str]]) -> list[str]:
    """What ``find`` still finds after ``seconds`` (nothing, as soon as it finds nothing)."""
    deadline = time.monotonic() + seconds
    while (found := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def read_events_until(process: subprocess.Popen[str], done: Callable[[list[dict]], bool]) -> list[dict]:
    assert process.stderr is not None
    seen: list[dict] = []
    for line in process.stderr:
        if line.startswith("{"):
            seen.append(json.loads(line))
            if done(seen):
                break
    return seen


def kept_current(service: ServiceWorld, index: int) -> str | None:
    path = service.ranks.data_dir(index) / "service" / "glm53-test" / "current.json"
    return json.loads(path.read_text())["deployment"] if path.exists() else None


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

    # a second up while the service runs is refused (an upgrade says --replace), and
    # leaves the running deployment alone
    again = service_cli("up", str(site), "--json")
    assert again.returncode == 1, again.stderr
    failures = [c for r in json.loads(again.stdout)["admission"]["ranks"] for c in r["checks"] if c["status"] != "pass"]
    assert {c["id"] for c in failures} >= {"service.running"}
    assert any(f"deployment {record['deployment']} of service glm53-test" in c["detail"] for c in failures)
    assert json.loads(service_cli("status", str(site), "--json").stdout)["ready"] is True

    down = service_cli("down", str(site), "--json")
    assert down.returncode == 0, down.stderr
    assert [r["containers"] for r in json.loads(down.stdout)["ranks"]] == [
        [f"sparkflake-glm53-dflash7-rank{index}"] for index in range(4)]
    assert [service.containers(index) for index in range(4)] == [[], ["not-ours"], [], []]
    after = service_cli("status", str(site))
    assert after.returncode == 1 and "NOT ready" in after.stdout


def test_a_rank_with_other_settings_or_pins_is_refused_at_admission_with_the_difference(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    service.write_env(2, MAX_NUM_SEQS="8")
    refused = service_cli("up", str(site), "--json")
    assert refused.returncode == 1, refused.stderr
    record = json.loads(refused.stdout)
    assert record["outcome"] == "refused" and all(r["started_at"] is None for r in record["ranks"])
    gang = {c["id"]: c for c in record["admission"]["gang"]}
    assert gang["gang.settings"]["status"] == "fail"
    assert "rank 2 (rank2)" in gang["gang.settings"]["detail"]
    assert "MAX_NUM_SEQS: '16' -> '8'" in gang["gang.settings"]["detail"], gang["gang.settings"]["detail"]
    assert "serve_args: without ['--max-num-seqs 16'], with ['--max-num-seqs 8']" in gang["gang.spec"]["detail"]
    assert "gang.settings" in refused.stderr and "failed at admission" in refused.stderr
    assert [service.containers(index) for index in range(4)] == [[]] * 4

    # an image not bound to the manifest the site names (re-made on its way): every rank says so
    other = service.site_file(tmp_path / "other-manifest.toml", manifest="sha256:" + "0" * 64)
    refused = service_cli("up", str(other), "--json")
    assert refused.returncode == 1, refused.stderr
    for rank in json.loads(refused.stdout)["admission"]["ranks"]:
        (binding,) = [c for c in rank["checks"] if c["id"] == "image.manifest"]
        assert binding["status"] == "fail" and f"bound to {service.image['manifest']}" in binding["detail"]
    assert [service.containers(index) for index in range(4)] == [[]] * 4

    # another checkpoint on rank 3, pinned as such: its own checks pass, the gang's do not
    service.write_env(2)
    target = service.rank_root(3) / "target"
    (target / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}\n')
    pinned = subprocess.run([sys.executable, "-m", "sparkflake.cli", "checkpoint", "pin", str(target), "--role",
                             "target", "--profile", str(service.profile), "-o",
                             str(service.rank_root(3) / "pins.json")], capture_output=True, text=True)
    assert pinned.returncode == 0, pinned.stderr
    refused = service_cli("up", str(site), "--json")
    assert refused.returncode == 1, refused.stderr
    record = json.loads(refused.stdout)
    rank3 = record["admission"]["ranks"][3]
    assert rank3["ok"] is True  # its files match its pins
    gang = {c["id"]: c for c in record["admission"]["gang"]}
    assert gang["gang.checkpoint-pins"]["status"] == "fail"
    assert "rank 3 (rank3)" in gang["gang.checkpoint-pins"]["detail"]
    assert "target: " in gang["gang.checkpoint-pins"]["detail"] and "draft" not in gang["gang.checkpoint-pins"]["detail"]
    assert [service.containers(index) for index in range(4)] == [[]] * 4


def test_a_rank_whose_container_exits_during_start_rolls_everything_back(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    service.behave(0, "ready_after 5")
    service.behave(2, "exit_after 1 exit_status 7")
    failed = service_cli("up", str(site), "--progress", "json", "--json")
    assert failed.returncode == 1, failed.stderr
    record = json.loads(failed.stdout)
    assert record["outcome"] == "failed"
    assert record["failure"]["rank"] == 2, record["failure"]
    assert "exited with status 7" in record["failure"]["reason"]
    assert "rank 2 (rank2)" in failed.stderr and "exited with status 7" in failed.stderr
    # every started rank stopped, last rank first; each one's last log lines kept
    stopped = [e["rank"] for e in events(failed.stderr) if e["phase"] == "stopped"]
    assert stopped == [3, 2, 1, 0]
    ranks = {r["rank"]: r for r in record["ranks"]}
    assert "fake-vllm: rank 2: worker failed (exit 7)" in ranks[2]["logs"]
    assert any("fake-vllm: rank 0 api" in line for line in ranks[0]["logs"])
    assert all(ranks[index]["stopped_at"] for index in range(4))
    assert [service.containers(index) for index in range(4)] == [[]] * 4
    # the failed deployment is not kept: nothing to roll back to
    assert not (service.ranks.data_dir(0) / "service" / "glm53-test" / "current.json").exists()


def test_rank_0_not_ready_within_the_deadline_rolls_everything_back(service: ServiceWorld, tmp_path: Path) -> None:
    site = service.site_file(tmp_path / "site.toml")
    service.behave(0, "serve 0")  # runs, never answers
    failed = service_cli("up", str(site), "--ready-timeout", "4")
    assert failed.returncode == 1, failed.stderr
    # what an operator reads: each rank's admission, the outcome, the last log lines
    assert "rank 3 (rank3, root@" in failed.stdout and "admission ok" in failed.stdout
    assert "rank 0 (rank0) last log lines:\n  | fake-vllm: rank 0 api" in failed.stdout
    assert "sparkflake: up failed at rank 0 (rank0): rank 0 not ready within 4s" in failed.stderr
    (path,) = (service.base / "records").iterdir()
    assert f"deployment {path.stem}: failed (record {path})" in failed.stdout
    record = json.loads(path.read_text())
    assert record["failure"]["rank"] == 0
    assert "not ready within 4s" in record["failure"]["reason"] and "refused" in record["failure"]["reason"]
    assert record["finished_at"] - record["started_at"] < 60
    assert [service.containers(index) for index in range(4)] == [[]] * 4


def test_ssh_to_a_rank_lost_mid_start_rolls_back_the_started_ranks(service: ServiceWorld, tmp_path: Path) -> None:
    site = service.site_file(tmp_path / "site.toml")
    seen: list[workflow.ProgressEvent] = []

    def cut_rank_3(event: workflow.ProgressEvent) -> None:
        seen.append(event)
        if event.phase == "started" and event.rank == 0:
            service.ranks.stop_sshd(3)  # no new session reaches rank 3 from now on

    result = workflow.up(workflow.ServiceRequest(site_path=str(site)), cut_rank_3)
    assert result.exit_code == 1
    assert result.record.failure is not None and result.record.failure["rank"] == 3
    assert "SSH to rank 3" in result.record.failure["reason"]
    stopped = [event.rank for event in seen if event.phase == "stopped"]
    assert stopped[:3] == [3, 2, 1] or stopped == [2, 1, 0]
    assert 0 in stopped and 1 in stopped and 2 in stopped
    assert [service.containers(index) for index in range(3)] == [[]] * 3
    assert service.containers(3) == []  # its start never reached it


def up_then_change_the_settings(service: ServiceWorld, site: Path) -> dict:
    """A deployment up (its record), then other settings on every rank: an upgrade to come."""
    first = service_cli("up", str(site), "--json")
    assert first.returncode == 0, first.stderr
    for index in range(4):
        service.write_env(index, MAX_NUM_SEQS="8")
    return json.loads(first.stdout)


def test_rollback_starts_the_previous_deployment_through_the_same_admission(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    first_record = up_then_change_the_settings(service, site)  # then replacing the running deployment
    second = service_cli("up", str(site), "--replace", "--json")
    assert second.returncode == 0, second.stderr
    second_record = json.loads(second.stdout)
    assert second_record["settings_hash"] != first_record["settings_hash"]

    back = service_cli("rollback", str(site), "--json")
    assert back.returncode == 0, back.stderr + back.stdout
    record = json.loads(back.stdout)
    assert record["kind"] == "rollback" and record["outcome"] == "ready"
    assert record["settings_hash"] == first_record["settings_hash"]
    assert record["replaced"] == second_record["deployment"]
    assert record["admission"]["ok"]
    status = json.loads(service_cli("status", str(site), "--json").stdout)
    assert status["ready"] and status["deployment"] == record["deployment"]
    assert {c["settings_hash"] for r in status["ranks"] for c in r["containers"]} == {first_record["settings_hash"]}
    # the runtime.env on the ranks still says 8: the rollback ran the kept copy
    assert "MAX_NUM_SEQS=8" in (service.rank_root(1) / "runtime.env").read_text()

    # stop, then restart: the current deployment (the rolled-back one) again
    assert service_cli("down", str(site)).returncode == 0
    restarted = service_cli("restart", str(site), "--json")
    assert restarted.returncode == 0, restarted.stderr
    again = json.loads(restarted.stdout)
    assert again["kind"] == "restart" and again["settings_hash"] == first_record["settings_hash"]


def test_a_signed_record_verifies_with_cosign(service: ServiceWorld, tmp_path: Path) -> None:
    site = service.site_file(tmp_path / "site.toml")
    keys = subprocess.run(["cosign", "generate-key-pair"], cwd=tmp_path, capture_output=True, text=True,
                          env={"COSIGN_PASSWORD": "pw", "PATH": "/usr/bin:/bin"})
    assert keys.returncode == 0, keys.stderr
    up = subprocess.run([sys.executable, "-m", "sparkflake.cli", "service", "up", str(site), "--json",
                         "--sign-key", str(tmp_path / "cosign.key")], capture_output=True, text=True,
                        env={**os.environ, "COSIGN_PASSWORD": "pw"})
    assert up.returncode == 0, up.stderr
    path = json.loads(up.stdout)["record_path"]
    base64.b64decode(Path(f"{path}.sig").read_text(), validate=True)
    verified = subprocess.run(["cosign", "verify-blob", "--key", str(tmp_path / "cosign.pub"), "--signature",
                               f"{path}.sig", "--insecure-ignore-tlog=true", path], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    Path(path).write_text(Path(path).read_text().replace('"ready"', '"failed"', 1))
    tampered = subprocess.run(["cosign", "verify-blob", "--key", str(tmp_path / "cosign.pub"), "--signature",
                               f"{path}.sig", "--insecure-ignore-tlog=true", path], capture_output=True, text=True)
    assert tampered.returncode != 0


def test_a_trusted_key_admits_only_an_image_signed_and_attested_in_the_sites_registry(
    service: ServiceWorld, tmp_path: Path, registry_server: RegistryServer  # noqa: F811
) -> None:
    manifest = service.image["manifest"]
    reference = f"{registry_server.host}/site/glm53:rehearsal"
    keys = subprocess.run(["cosign", "generate-key-pair"], cwd=tmp_path, capture_output=True, text=True,
                          env={"COSIGN_PASSWORD": "pw", "PATH": "/usr/bin:/bin"})
    assert keys.returncode == 0, keys.stderr
    published = subprocess.run([sys.executable, "-m", "sparkflake.cli", "publish", str(service.base / "image" / "out"),
                                reference, "--insecure", "--record", str(tmp_path / "publish.json")],
                               capture_output=True, text=True)
    assert published.returncode == 0, published.stderr
    site = service.site_file(tmp_path / "site.toml", trusted_key=str(tmp_path / "cosign.pub"),
                             signatures=f"{registry_server.host}/site/glm53", registry_insecure=True)

    unsigned = service_cli("up", str(site), "--json")
    assert unsigned.returncode == 1, unsigned.stderr
    gang = {c["id"]: c for c in json.loads(unsigned.stdout)["admission"]["gang"]}
    assert gang["supply-chain.signature"]["status"] == "fail" and gang["supply-chain.provenance"]["status"] == "fail"
    assert [service.containers(index) for index in range(4)] == [[]] * 4

    # the build's provenance for this manifest, signed and attested as `sparkflake sign` does
    receipt = tmp_path / "receipt.json"
    receipt.write_text(json.dumps({"predicateType": "https://slsa.dev/provenance/v1",
                                   "subject": [{"name": "glm53", "digest": {"sha256": manifest.removeprefix("sha256:")}}],
                                   "predicate": {"buildDefinition": {"buildType": "sparkflake-test"}}}))
    signed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "sign", reference, "--key",
                             str(tmp_path / "cosign.key"), "--receipt", str(receipt), "--insecure"],
                            capture_output=True, text=True, env={**os.environ, "COSIGN_PASSWORD": "pw"})
    assert signed.returncode == 0, signed.stderr
    up = service_cli("up", str(site), "--json")
    assert up.returncode == 0, up.stderr
    gang = {c["id"]: c for c in json.loads(up.stdout)["admission"]["gang"]}
    assert gang["supply-chain.signature"]["status"] == "pass" and manifest in gang["supply-chain.signature"]["detail"]
    assert gang["supply-chain.provenance"]["status"] == "pass"

    # another key: refused before anything starts
    service_cli("down", str(site))
    other = tmp_path / "other"
    other.mkdir()
    assert subprocess.run(["cosign", "generate-key-pair"], cwd=other, capture_output=True,
                          env={"COSIGN_PASSWORD": "pw", "PATH": "/usr/bin:/bin"}).returncode == 0
    site = service.site_file(tmp_path / "site.toml", trusted_key=str(other / "cosign.pub"),
                             signatures=f"{registry_server.host}/site/glm53", registry_insecure=True)
    refused = service_cli("up", str(site), "--json")
    assert refused.returncode == 1
    assert "does not verify" in {c["id"]: c for c in json.loads(refused.stdout)["admission"]["gang"]}[
        "supply-chain.signature"]["detail"]
    assert [service.containers(index) for index in range(4)] == [[]] * 4


def test_sigterm_during_the_start_stops_what_was_started(service: ServiceWorld, tmp_path: Path) -> None:
    site = service.site_file(tmp_path / "site.toml")
    service.behave(0, "ready_after 120")
    process = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "service", "up", str(site), "--progress",
                                "json", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    started = set()
    for line in process.stderr:
        event = json.loads(line)
        if event["phase"] == "started":
            started.add(event["rank"])
        if started == {0, 1, 2, 3}:
            break
    assert started == {0, 1, 2, 3}
    assert all(service.containers(index) == [f"sparkflake-glm53-dflash7-rank{index}"] for index in range(4))
    process.terminate()
    # the roll back is under way: a second SIGTERM (an impatient supervisor) is ignored
    # while the first unwinds (cli/_signals), not raised inside the roll back
    assert read_events_until(process, lambda seen: seen[-1]["phase"] == "stopped")[-1]["rank"] == 3
    process.terminate()
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr  # SIGTERM's status, as for every command
    assert "sparkflake: terminated" in stderr and "Traceback" not in stderr
    assert [service.containers(index) for index in range(4)] == [[]] * 4
    (record,) = (service.base / "records").iterdir()
    stored = read_record(record)
    assert stored.outcome == "failed" and stored.failure == {"rank": None, "name": None, "reason": "interrupted"}
    assert all(rank.stopped_at for rank in stored.ranks)


def test_a_rank_that_cannot_keep_the_deployment_is_a_warning_of_a_ready_service(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    blocker = service.ranks.data_dir(2) / "service" / "glm53-test" / "current.json"
    blocker.mkdir(parents=True)  # not a file: the rank cannot record the deployment as current
    (blocker / "keep").write_text("not sparkflake's")
    up = service_cli("up", str(site), "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    (warning,) = record["warnings"]
    assert warning.startswith(f"rank 2 (rank2) could not keep deployment {record['deployment']} as current")
    assert f"sparkflake: warning: {warning}" in up.stderr
    assert (blocker / "keep").read_text() == "not sparkflake's"
    assert service_cli("down", str(site)).returncode == 0


def test_an_interrupt_of_the_whole_process_group_during_the_start_blames_it_and_a_late_start_creates_nothing(
    service: ServiceWorld, tmp_path: Path
) -> None:
    # rank 3's start is slow (its admission, say): Ctrl-C on a terminal signals the whole
    # process group, the SSH clients too, and the rank's agent carries on without its session
    site = service.site_file(tmp_path / "site.toml", agent=slowed_agent({("start", 3): 4}))
    process = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "service", "up", str(site), "--progress",
                                "json", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    seen = read_events_until(process, lambda seen: {e["rank"] for e in seen if e["phase"] == "started"} == {0, 1, 2})
    assert {e["rank"] for e in seen if e["phase"] == "started"} == {0, 1, 2}
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "sparkflake: interrupted" in stderr and "Traceback" not in stderr
    (path,) = (service.base / "records").iterdir()
    stored = read_record(path)
    # the interrupt, not the SSH sessions it ended
    assert stored.outcome == "failed" and stored.failure == {"rank": None, "name": None, "reason": "interrupted"}
    # rank 3's agent, finding its session gone, ends without a container (once the roll
    # back had stopped rank 3, one made then would have run on for ever), keeping nothing
    assert gone_within(60, lambda: rank_processes(service, service_agents)) == []
    assert [service.containers(index) for index in range(4)] == [[]] * 4
    assert not (service.ranks.data_dir(3) / "service" / "glm53-test" / "deployments").exists()


def test_an_interrupt_during_the_stop_of_the_deployment_replaced_stops_all_of_it_and_restart_brings_it_back(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    old = up_then_change_the_settings(service, site)
    # rank 2's stop is slow: the interrupt lands with rank 3 stopped and ranks 0..2 running
    slow = service.site_file(tmp_path / "slow.toml", agent=slowed_agent({("stop", 2): 3}))
    process = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "service", "up", str(slow), "--replace",
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert gone_within(60, lambda: service.containers(3)) == []
    assert all(service.containers(index) for index in range(3))
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    # not half of the gang left running: the whole deployment replaced is stopped (as a
    # failed upgrade leaves it), and every rank still keeps it as current
    assert [service.containers(index) for index in range(4)] == [[]] * 4
    assert [kept_current(service, index) for index in range(4)] == [old["deployment"]] * 4
    records = [read_record(path) for path in (service.base / "records").iterdir()]
    (failed,) = [record for record in records if record.deployment != old["deployment"]]
    assert failed.outcome == "failed" and failed.failure is not None
    assert failed.failure["reason"].startswith("interrupted; the deployment it replaces was stopped")
    assert "`sparkflake service restart` starts it again" in failed.failure["reason"]
    # the previous good state, back with one command
    restarted = service_cli("restart", str(site), "--json")
    assert restarted.returncode == 0, restarted.stderr + restarted.stdout
    record = json.loads(restarted.stdout)
    assert record["outcome"] == "ready" and record["settings_hash"] == old["settings_hash"]


def test_an_interrupted_down_names_the_ranks_not_known_stopped_and_down_again_stops_them(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    up = service_cli("up", str(site), "--json")
    assert up.returncode == 0, up.stderr
    # rank 2's stop is slow: the interrupt lands with rank 3 stopped and ranks 0..2 running
    slow = service.site_file(tmp_path / "slow.toml", agent=slowed_agent({("stop", 2): 30}))
    process = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "service", "down", str(slow), "--progress",
                                "json", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the interrupt is sent once the controller has had rank 3's reply (its progress event):
    # rank 3's container gone is not enough, the reply may still be on its way
    before = read_events_until(process, lambda seen: (seen[-1]["rank"], seen[-1]["phase"]) == (3, "stopped"))
    assert service.containers(3) == []
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and stdout == ""
    phases = [(event["rank"], event["phase"]) for event in [*before, *events(stderr)]]
    assert phases == [(3, "stopped"), (2, "interrupted"), (1, "interrupted"), (0, "interrupted")]
    lines = stderr.splitlines()
    assert lines[-2] == "sparkflake: interrupted"
    assert lines[-1].startswith("sparkflake: service down was interrupted; not known to be stopped: rank 2 (")
    assert ", rank 1 (" in lines[-1] and ", rank 0 (" in lines[-1] and "rank 3" not in lines[-1]
    assert f"`sparkflake service down {slow}` stops the rest" in lines[-1]
    assert all(service.containers(index) for index in range(2))  # ranks 0 and 1 were never asked
    # what the note says brings the site to one state again
    again = service_cli("down", str(site), "--json")
    assert again.returncode == 0, again.stderr
    assert [service.containers(index) for index in range(4)] == [[]] * 4


@pytest.mark.parametrize("group", [False, True], ids=["process", "process-group"])
def test_an_interrupt_once_rank_0_is_ready_waits_for_the_commit_and_the_record(
    service: ServiceWorld, tmp_path: Path, group: bool
) -> None:
    # rank 2's commit is slow: the SIGTERM arrives while the ranks keep the deployment (to
    # the whole process group too: the commit's SSH clients, started while the interrupt
    # is held, hold it as well)
    site = service.site_file(tmp_path / "site.toml", agent=slowed_agent({("commit", 2): 3}))
    process = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "service", "up", str(site), "--progress",
                                "json", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert read_events_until(process, lambda seen: seen[-1]["phase"] == "ready")[-1]["phase"] == "ready"
    (os.killpg if group else os.kill)(process.pid, signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "sparkflake: terminated" in stderr and "Traceback" not in stderr
    # the deployment is up, kept as current on every rank, and recorded as ready
    (path,) = (service.base / "records").iterdir()
    stored = read_record(path)
    assert stored.outcome == "ready" and stored.failure is None and stored.warnings == ()
    assert [kept_current(service, index) for index in range(4)] == [stored.deployment] * 4
    assert all(service.containers(index) == [f"sparkflake-glm53-dflash7-rank{index}"] for index in range(4))
    status = json.loads(service_cli("status", str(site), "--json").stdout)
    assert status["ready"] is True and status["deployment"] == stored.deployment


def test_the_watch_agents_end_with_their_sessions_and_their_engine_waits_with_them(
    service: ServiceWorld, tmp_path: Path
) -> None:
    site = service.site_file(tmp_path / "site.toml")
    up = service_cli("up", str(site), "--json")
    assert up.returncode == 0, up.stderr
    # the service runs on; what watched its start (an agent and its `podman wait` per
    # rank) does not
    assert all(service.containers(index) for index in range(4))
    assert gone_within(15, lambda: rank_processes(service, engine_waits) + rank_processes(service, service_agents)) == []
