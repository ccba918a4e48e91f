"""`sparkflake service` against rank agents that answer in another shape than this version's
(service/agent.py): each reply is read through a shape (distribute/agent_reply.py), so an
odd value is refused naming the rank and the JSON path (exit 1, nothing started), or — once
ranks run — fails the start, which stops every rank again; never a traceback, a start left
half up, or a deployment record that `service status` cannot read back. The agents are
faked at the StartedAgent seam (service/remote.py); a hunt over 11,187 replies of the wrong
shape found each case here."""

from __future__ import annotations

import copy
import json
import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.cli import main
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.distribute.agent_reply import AgentReply, MalformedReply
from sparkflake.distribute.site import SCHEMA, parse_site
from sparkflake.service import remote, workflow
from sparkflake.service.gang import RankAdmissionResult, rank_result
from sparkflake.service.rank_request import RankRequest
from sparkflake.service.readiness import Readiness, api_base
from sparkflake.service.record import (
    DeploymentRecord,
    RankRecord,
    latest_records,
    read_record,
    record_bytes,
)
from sparkflake.service.remote import ServiceRank

IMAGE = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "d" * 64
PREVIOUS, CURRENT = "20240101T000000Z-0000aaaa", "20240201T000000Z-0000bbbb"
DELETE = object()


def site_text(records: Path) -> str:
    text = f'schema = "{SCHEMA}"\norder = ["s0", "s1", "s2", "s3"]\n'
    fabric = {0: '{ l01 = "10.0.1.1" }', 1: '{ l01 = "10.0.1.2", l12 = "10.0.2.1" }',
              2: '{ l12 = "10.0.2.2", l23 = "10.0.3.1" }', 3: '{ l23 = "10.0.3.2" }'}
    for index in range(4):
        text += (f'\n[[ranks]]\nname = "s{index}"\nssh = "root@192.0.2.{10 + index}"\n'
                 f'management = "192.0.2.{10 + index}"\ndata_dir = "/var/lib/sparkflake"\nfabric = {fabric[index]}\n'
                 f"rank = {index}\n")
    text += "".join(f'\n[[links]]\nname = "l{i}{i + 1}"\nendpoints = ["s{i}", "s{i + 1}"]\n' for i in range(3))
    return text + (f'\n[service]\nprofile = "glm53-dflash7"\nenv_file = "/etc/sparkflake/runtime.env"\n'
                   f'image = "{IMAGE}"\nmanifest = "{MANIFEST}"\nready_timeout = 5\nrecord_dir = "{records}"\n')


def facts(n: int) -> dict[str, Any]:
    return {"rank": n, "container": f"glm53-rank{n}", "image": IMAGE, "settings_hash": "sha256:" + "a" * 64,
            "settings": {"TP": "4"}, "spec": {"image": IMAGE, "serve_args": ["m", "--port", "8000"]},
            "spec_hash": "sha256:" + "b" * 64, "pins": {"target": "sha256:" + "f" * 64, "draft": None},
            "pins_sha256": "sha256:" + "9" * 64, "identity_hash": "sha256:" + "8" * 64,
            "node_address": f"10.0.0.{n + 1}", "master_address": "10.0.0.1", "node_count": 4, "api_port": 8000,
            "served_model": "glm-5.3", "status": "qualified"}


def admit_reply(n: int) -> dict[str, Any]:
    return {"status": "ok", "facts": facts(n), "argv": ["podman", "run", "-d", f"glm53-rank{n}"],
            "checks": [{"id": "engine.reachable", "status": "pass", "detail": "podman 5.0", "digest": None},
                       {"id": "image.manifest", "status": "pass", "detail": "bound", "digest": MANIFEST}]}


def container(n: int, deployment: str, exited: bool) -> dict[str, Any]:
    return {"id": f"{n}" * 64, "name": f"glm53-rank{n}", "image": IMAGE, "deployment": deployment,
            "settings_hash": "sha256:" + "a" * 64, "status": "exited" if exited else "running", "running": not exited,
            "exit_code": 1 if exited else 0, "started_at": "2025-01-01T00:00:00Z",
            "finished_at": f"2025-01-01T00:00:0{n}Z" if exited else "0001-01-01T00:00:00Z"}


def kept_request(request: dict[str, Any], deployment: str) -> dict[str, Any]:
    return {**request, "deployment": deployment, "replacing": False, "checkpoint_pins": "/x/checkpoint-pins.json",
            "env_file": f"{request['state_dir']}/deployments/{deployment}/runtime.env"}


class Ranks:
    """What the fake rank agents answer, and every call they were asked."""

    def __init__(self, site: Path) -> None:
        self.site = site
        self.records = site.parent / "records"
        self.calls: list[tuple[int, str]] = []  # (rank number, command)
        self.exited: set[int] = set()  # ranks whose container ends once started
        self.change: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self.whole: dict[tuple[str, int], AgentReply] = {}  # a reply in place of the agent's own

    def answer(self, command: str, request: dict[str, Any]) -> dict[str, Any]:
        n, deployment = request["rank"], request["deployment"]
        if command == "admit":
            return admit_reply(n)
        if command == "start":
            return {"status": "ok", "container": f"glm53-rank{n}", "container_id": f"{n}" * 64}
        if command == "commit":
            return {"status": "ok", "current": deployment, "previous": None}
        if command == "kept":
            return {"status": "ok", "current": kept_request(request, CURRENT),
                    "previous": kept_request(request, PREVIOUS)}
        if command == "status":
            shown = CURRENT if deployment == "status" else deployment
            return {"status": "ok", "containers": [container(n, shown, n in self.exited)],
                    "current": kept_request(request, CURRENT), "previous": None}
        if command == "stop":
            return {"status": "ok", "message": "", "containers": [
                {**container(n, deployment, True), "logs": [f"rank {n} last line"], "stopped": True, "message": ""}]}
        raise AssertionError(f"unexpected agent command {command}")

    def reply(self, argv: list[str]) -> AgentReply:
        remote_argv = shlex.split(argv[-1])
        command = remote_argv[remote_argv.index("--request-json") - 1]
        request = json.loads(remote_argv[remote_argv.index("--request-json") + 1])
        self.calls.append((request["rank"], command))
        if (command, request["rank"]) in self.whole:
            return self.whole[(command, request["rank"])]
        result = self.answer(command, request)
        if (command, request["rank"]) in self.change:
            result = self.change[(command, request["rank"])](copy.deepcopy(result))
        return AgentReply(0, result, "")

    def asked(self, command: str) -> list[int]:
        return [n for n, asked in self.calls if asked == command]

    def started_watch(self, argv: list[str]) -> bool:
        """A watch session: whether its container has ended already."""
        remote_argv = shlex.split(argv[-1])
        if "watch" not in remote_argv:
            return False
        request = json.loads(remote_argv[remote_argv.index("--request-json") + 1])
        return request["rank"] in self.exited


class _Process:
    def __init__(self, ended: bool) -> None:
        self.returncode: int | None = 0 if ended else None

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9 if self.returncode is None else self.returncode

    def communicate(self, *args: object, **kwargs: object) -> tuple[str, str]:
        return "", ""


@pytest.fixture
def ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ranks:
    site = tmp_path / "site.toml"
    site.write_text(site_text(tmp_path / "records"))
    world = Ranks(site)

    class FakeAgent:
        def __init__(self, argv: list[str]) -> None:
            self.argv = argv
            self.process = _Process(world.started_watch(argv))

        def finish(self, input_text: str = "", timeout: float | None = None) -> AgentReply:
            return world.reply(self.argv)

        def cancel(self) -> None:
            self.process.kill()

        def kill(self) -> None:
            self.process.kill()

    monkeypatch.setattr(remote, "StartedAgent", FakeAgent)
    monkeypatch.setattr(workflow, "POLL_SECONDS", 0.001)
    monkeypatch.setattr(workflow, "JOIN_SECONDS", 0.0)
    monkeypatch.setattr(workflow, "probe", lambda host, port, model, timeout=2.0:
                        Readiness(True, f"{api_base(host, port)}: healthy, serving {model}"))
    return world


def up(world: Ranks) -> workflow.DeployResult:
    return workflow.up(workflow.ServiceRequest(site_path=str(world.site)), lambda event: None)


def setting(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(result: dict[str, Any]) -> dict[str, Any]:
        target = result
        for step in path[:-1]:
            target = target[step]
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return result
    return change


def test_the_fake_ranks_come_up_ready(ranks: Ranks) -> None:
    result = up(ranks)
    assert result.record.outcome == "ready" and result.record.api == "http://192.0.2.10:8000"
    assert sorted(ranks.asked("start")) == [0, 1, 2, 3] and ranks.asked("stop") == []
    assert read_record(result.record_path) == result.record


ADMIT_REFUSED = [
    (("checks",), DELETE, r"\$\.checks: expected an array of objects, got nothing"),
    (("checks",), 1, r"\$\.checks: expected an array of objects, got integer 1"),
    (("checks",), None, r"\$\.checks: expected an array of objects"),
    (("checks",), "x", r"\$\.checks: expected an array of objects"),
    (("checks",), [1, 2, 3], r"\$\.checks: expected an array of objects"),
    (("checks",), [], r"\$\.checks: expected at least one check"),  # zero checks passed: not admitted
    (("checks",), {}, r"\$\.checks: expected an array of objects"),
    (("checks", 0, "id"), DELETE, r"\$\.checks\[0\]\.id: expected a non-empty string, got nothing"),
    (("checks", 1, "status"), DELETE, r"\$\.checks\[1\]\.status: expected a non-empty string"),
    (("checks", 1, "status"), "passed", r"\$\.checks\[1\]\.status: expected one of pass, fail, error, skip"),
    (("checks", 0, "detail"), DELETE, r"\$\.checks\[0\]\.detail: expected a non-empty string, got nothing"),
    (("checks", 0, "digest"), 1, r"\$\.checks\[0\]\.digest: expected a non-empty string, got integer 1"),
    (("facts",), DELETE, r"\$\.facts: expected an object, got nothing"),
    (("facts",), [1], r"\$\.facts: expected an object, got an array"),
    (("facts", "image"), DELETE, r"\$\.facts\.image: expected a non-empty string"),
    (("facts", "image"), 1, r"\$\.facts\.image: expected a non-empty string, got integer 1"),
    (("facts", "settings_hash"), [], r"\$\.facts\.settings_hash: expected a non-empty string"),
    (("facts", "settings"), DELETE, r"\$\.facts\.settings: expected an object"),
    (("facts", "pins_sha256"), None, r"\$\.facts\.pins_sha256: expected a non-empty string"),
    (("facts", "pins"), "x", r"\$\.facts\.pins: expected an object"),
    (("facts", "spec_hash"), {}, r"\$\.facts\.spec_hash: expected a non-empty string"),
    (("facts", "spec"), DELETE, r"\$\.facts\.spec: expected an object"),
    (("facts", "node_address"), DELETE, r"\$\.facts\.node_address: expected a non-empty string"),
    (("facts", "master_address"), DELETE, r"\$\.facts\.master_address: expected a non-empty string"),
    (("facts", "node_count"), DELETE, r"\$\.facts\.node_count: expected a whole number"),
    (("facts", "node_count"), "4", r"\$\.facts\.node_count: expected a whole number"),
    (("facts", "api_port"), DELETE, r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), "x", r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), [1, 2, 3], r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), math.inf, r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), 8000.0, r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), True, r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), -1, r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), 2 ** 70, r"\$\.facts\.api_port: expected a whole number"),
    (("facts", "api_port"), 0, r"\$\.facts\.api_port: expected a port from 1 to 65535, got integer 0"),
    (("facts", "api_port"), 70000, r"\$\.facts\.api_port: expected a port from 1 to 65535"),
    (("facts", "served_model"), 1, r"\$\.facts\.served_model: expected a non-empty string"),
]


@pytest.mark.parametrize(("path", "value", "message"), ADMIT_REFUSED)
def test_an_admit_reply_of_another_shape_is_refused_naming_rank_and_path_before_anything_starts(
        ranks: Ranks, path: tuple[Any, ...], value: Any, message: str) -> None:
    # before: KeyError/TypeError out of gang.py or, for facts.api_port, out of
    # _start_and_wait after all four ranks had started (none stopped, no record); api_port
    # -1 or 2**70, a fact of another type, zero checks: a record `status` could not read
    # back, or a rank admitted that checked nothing
    ranks.change[("admit", 1)] = setting(path, value)
    with pytest.raises(MalformedReply, match=r"rank 1 \(s1, root@192\.0\.2\.11\): admit: the agent's reply "
                                             + message):
        up(ranks)
    assert ranks.asked("start") == [] and ranks.asked("stop") == []
    assert not ranks.records.exists() or list(ranks.records.iterdir()) == []


def test_every_rank_with_a_reply_of_another_shape_is_named_in_one_refusal(ranks: Ranks) -> None:
    ranks.change[("admit", 1)] = setting(("facts",), DELETE)
    ranks.change[("admit", 3)] = setting(("checks",), 1)
    with pytest.raises(CheckFailed, match=r"rank 1 \(s1, .*\$\.facts: .*; rank 3 \(s3, .*\$\.checks: "):
        up(ranks)
    assert ranks.asked("start") == []


@pytest.mark.parametrize(("reply", "shown"), [
    (AgentReply(1, None, "Traceback (most recent call last):\nKeyError: 'engine'\n"),
     "the agent ended with exit status 1 before its checks: KeyError: 'engine'"),
    (AgentReply(-9, None, "sparkflake: ended the agent: its output passed 16777216 bytes\n"),
     "the agent ended with exit status -9 before its checks: sparkflake: ended the agent: its output passed"),
    (AgentReply(1, {"status": "failed", "message": "podman: cannot connect"}, ""),
     "the agent ended with exit status 1 before its checks: podman: cannot connect"),
])
def test_an_admit_that_ends_before_its_checks_is_that_ranks_refusal_not_bad_input(
        ranks: Ranks, reply: AgentReply, shown: str) -> None:
    # before: InputError, exit 2 (bad input); the operator guide: any refusal exits 1
    ranks.whole[("admit", 1)] = reply
    with pytest.raises(CheckFailed) as refused:
        up(ranks)
    assert refused.value.exit_code == 1 and refused.value.check_id == "service.admit"
    assert refused.value.message.startswith(f"site.toml: ranks[1] (s1, rank 1): {shown}".replace("site.toml", str(ranks.site)))
    assert ranks.asked("start") == []


def test_an_admit_the_rank_refuses_as_bad_input_stays_bad_input(ranks: Ranks) -> None:
    ranks.whole[("admit", 2)] = AgentReply(2, {"status": "failed", "message": "/etc/x.env: no such file"}, "")
    ranks.whole[("admit", 3)] = AgentReply(1, None, "Traceback\nOSError\n")  # bad input goes first: exit 2
    with pytest.raises(InputError, match=r"ranks\[2\] \(s2, rank 2\): /etc/x\.env: no such file"):
        up(ranks)
    assert ranks.asked("start") == []


def test_an_image_nobody_names_is_the_ranks_own_refusal_not_a_malformed_reply(ranks: Ranks) -> None:
    # the agent writes "" when neither the site nor the profile names an image: its own
    # checks refuse that, as a refused admission with a record
    def no_image(result: dict[str, Any]) -> dict[str, Any]:
        result["facts"]["image"] = ""
        result["checks"][0] = {"id": "image.id", "status": "fail", "detail": "no image named", "digest": None}
        return result
    for n in range(4):
        ranks.change[("admit", n)] = no_image
    result = up(ranks)
    assert result.record.outcome == "refused" and "image.id: no image named" in result.record.failure["reason"]
    assert read_record(result.record_path) == result.record


def test_a_failure_after_the_ranks_started_stops_every_rank_and_is_recorded(
        ranks: Ranks, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: only KeyboardInterrupt rolled back; any other error left every rank running
    # and no record
    def broken(host: str, port: int, model: str, timeout: float = 2.0) -> Readiness:
        raise RuntimeError("probe broke")
    monkeypatch.setattr(workflow, "probe", broken)
    with pytest.raises(RuntimeError, match="probe broke"):
        up(ranks)
    assert sorted(ranks.asked("start")) == [0, 1, 2, 3] and ranks.asked("stop") == [3, 2, 1, 0]
    (record,) = latest_records(ranks.records, "glm53")
    assert record.outcome == "failed" and "RuntimeError: probe broke" in record.failure["reason"]
    assert all(rank.stopped_at is not None for rank in record.ranks)


@pytest.mark.parametrize("value", [1, [], {}, True, None, ""])
def test_an_exit_time_of_another_shape_still_names_the_rank_that_ended_and_stops_all(ranks: Ranks, value: Any) -> None:
    # before: TypeError comparing rank 1's finished_at with rank 2's text: four containers
    # left running, no record
    ranks.exited = {1, 2}
    ranks.change[("status", 1)] = setting(("containers", 0, "finished_at"), value)
    result = up(ranks)
    assert result.record.outcome == "failed" and result.record.failure["rank"] == 2
    assert "rank 2's container exited with status 1" in result.record.failure["reason"]
    assert ranks.asked("stop") == [3, 2, 1, 0]
    assert read_record(result.record_path) == result.record


@pytest.mark.parametrize("value", [1, True, -1, 2 ** 70, math.nan, "line", {"a": 1}])
def test_a_roll_back_stops_every_rank_whatever_one_rank_says_of_its_logs(ranks: Ranks, value: Any) -> None:
    # before: TypeError at rank 3's answer: ranks 2, 1 and 0 left running, no record
    ranks.exited = {1}
    ranks.change[("stop", 3)] = setting(("containers", 0, "logs"), value)
    result = up(ranks)
    assert result.record.outcome == "failed" and ranks.asked("stop") == [3, 2, 1, 0]
    assert [rank.logs for rank in result.record.ranks] == [("rank 0 last line",), ("rank 1 last line",),
                                                           ("rank 2 last line",), ()]
    assert read_record(result.record_path) == result.record


def rollback(world: Ranks) -> workflow.DeployResult:
    return workflow.rollback(workflow.ServiceRequest(site_path=str(world.site)), lambda event: None)


def test_a_rollback_starts_the_kept_deployment_and_records_what_it_replaced(ranks: Ranks) -> None:
    result = rollback(ranks)
    assert result.record.outcome == "ready" and result.record.replaced == CURRENT
    assert [rank.rank for rank in result.record.ranks] == [0, 1, 2, 3]


@pytest.mark.parametrize("value", [[], {}, [1, 2], 1, True, ""])
def test_a_kept_current_deployment_of_another_shape_is_refused(ranks: Ranks, value: Any) -> None:
    # before: TypeError (unhashable) for [] and {}; 1 or true became the record's
    # `replaced`, a record `status` could not read back
    ranks.change[("kept", 2)] = setting(("current", "deployment"), value)
    with pytest.raises(MalformedReply, match=r"rank 2 \(s2, root@192\.0\.2\.12\): kept: the agent's reply "
                                             r"\$\.current\.deployment: expected a non-empty string"):
        rollback(ranks)
    assert ranks.asked("admit") == [] and ranks.asked("start") == []


@pytest.mark.parametrize("claimed", [0, 2, 7, 2 ** 40])
def test_a_rollback_takes_rank_numbers_from_the_site_not_from_the_ranks_reply(ranks: Ranks, claimed: int) -> None:
    # before: rank 1's claim was its number: two members numbered 0 (the record listed s1
    # twice and dropped s0), or a gang with a rank 7 that ended `ready`
    ranks.change[("kept", 1)] = setting(("previous", "rank"), claimed)
    with pytest.raises(CheckFailed, match=rf"rank 1 \(s1\) keeps a previous deployment {PREVIOUS} of rank "
                                          rf"{claimed}: the site numbers it 1"):
        rollback(ranks)
    assert ranks.asked("admit") == [] and ranks.asked("start") == []


@pytest.mark.parametrize("shown", [{"a": 1}, {"running": True}, {"status": None, "image": IMAGE}])
def test_service_status_prints_what_a_container_has(ranks: Ranks, shown: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # before: KeyError on the first field the rank did not list
    ranks.change[("status", 1)] = setting(("containers",), [shown])
    assert main(["service", "status", str(ranks.site)]) == 1  # no ready deployment on record
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    line = next(line for line in out.splitlines() if line.startswith("rank 1 (s1)"))
    assert line == (f"rank 1 (s1): ? since ?, image {shown.get('image') or '?'}, settings ?, deployment ?")
    assert "rank 0 (s0): running since 2025-01-01T00:00:00Z" in out


# any admit reply: a rank's result in the shapes the controller uses, or a refusal by name
_json = st.recursive(st.none() | st.booleans() | st.integers(-2, 2 ** 70) | st.floats() | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                 max_size=3), max_leaves=6)
_paths = [("checks",), ("checks", 0), ("checks", 0, "id"), ("checks", 0, "status"), ("checks", 0, "detail"),
          ("checks", 1, "digest"), ("facts",), *(("facts", key) for key in facts(1))]
_MEMBER = ServiceRank(1, parse_site(site_text(Path("/records")), origin="site.toml").ranks[1], RankRequest(
    service="glm53", deployment="d", rank=1, profile="glm53-dflash7", env_file="/e", engine="podman",
    engine_args=(), state_dir="/s"))


@given(st.lists(st.tuples(st.sampled_from(_paths), st.just(DELETE) | _json), max_size=3), st.integers(0, 2),
       st.none() | st.dictionaries(st.sampled_from(["status", "checks", "facts", "message"]), _json))
def test_any_admit_reply_is_a_typed_result_or_a_refusal_naming_the_path(changes, returncode, whole) -> None:
    result = admit_reply(1) if whole is None else whole
    for path, value in changes:
        try:
            result = setting(path, value)(copy.deepcopy(result))
        except (KeyError, IndexError, TypeError):  # a path the reply no longer has
            continue
    try:
        admitted = rank_result("site.toml", _MEMBER, AgentReply(returncode, result, "agent: failed"), 0.1)
    except MalformedReply as exc:
        assert exc.message.startswith("rank 1 (s1, root@192.0.2.11): admit: the agent's reply $.")
        return
    except InputError as exc:  # the agent's own bad input (exit 2)
        assert returncode == 2, exc
        return
    except CheckFailed as exc:  # it failed before checking
        assert exc.check_id == "service.admit" and result.get("status") == "failed" and "checks" not in result, exc
        return
    assert isinstance(admitted, RankAdmissionResult) and admitted.checks
    assert all(isinstance(check.id, str) and check.status in ("pass", "fail", "error", "skip") and isinstance(check.detail, str)
               for check in admitted.checks)
    found = admitted.facts
    assert all(isinstance(getattr(found, key), str) for key in ("image", "settings_hash", "pins_sha256", "spec_hash",
                                                      "node_address", "master_address", "served_model"))
    assert all(isinstance(getattr(found, key), dict) for key in ("settings", "pins", "spec"))
    assert type(found.node_count) is int and type(found.api_port) is int and 0 < found.api_port < 65536
    # what a record takes from rank 0's facts reads back (`service status` reads every record)
    record = DeploymentRecord(
        "d", "glm53", "up", "site.toml", "sha256:" + "0" * 64, "glm53-dflash7", found.image, MANIFEST,
        found.settings_hash, found.pins_sha256, found.spec_hash, "ready", 1.0, 2.0,
        (RankRecord("s0", 0, "root@192.0.2.10", "192.0.2.10"),), api=api_base("192.0.2.10", found.api_port),
        served_model=found.served_model)
    assert DeploymentRecord.from_document(json.loads(record_bytes(record)), "r.json") == record
