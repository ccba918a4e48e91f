"""The service's documents and comparisons as data: the deployment record and the rank
request round-trip and refuse what they are not; the gang's difference lines name what
differs; readiness asks a real HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.check_result import CheckResult
from sparkflake.core.errors import InputError
from sparkflake.service.gang import (
    RankAdmissionResult,
    RankFacts,
    differences,
    gang_checks,
    options,
)
from sparkflake.service.rank_admission import check_fabric
from sparkflake.service.rank_request import RankRequest
from sparkflake.service.readiness import api_base, probe
from sparkflake.service.record import (
    DeploymentRecord,
    RankRecord,
    read_record,
    record_bytes,
    write_record,
)

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
_digest = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)
_time = st.floats(min_value=0, max_value=4e9, allow_nan=False)

rank_records = st.builds(
    RankRecord, name=_text, rank=st.integers(0, 64), host=_text, management=_text,
    container=st.none() | _text, container_id=st.none() | _text, started_at=st.none() | _time,
    joined_at=st.none() | _time, stopped_at=st.none() | _time, logs=st.lists(_text, max_size=3).map(tuple))
records = st.builds(
    DeploymentRecord, deployment=_text, service=_text, kind=st.sampled_from(["up", "rollback", "restart"]),
    site=_text, site_sha256=_digest, profile=_text, config_digest=st.none() | _digest,
    manifest_digest=st.none() | _digest, settings_hash=st.none() | _digest,
    checkpoint_pins_sha256=st.none() | _digest, spec_hash=st.none() | _digest,
    outcome=st.sampled_from(["ready", "failed", "refused"]), started_at=_time, finished_at=_time,
    ranks=st.lists(rank_records, max_size=4).map(tuple),
    admission=st.dictionaries(_text, st.integers() | _text, max_size=3),
    failure=st.none() | st.fixed_dictionaries({"rank": st.none() | st.integers(0, 8), "reason": _text}),
    # the api is what the service writes (readiness.api_base: rank 0's address and port)
    replaced=st.none() | _text, api=st.none() | st.builds(api_base, st.ip_addresses().map(str), st.integers(1, 65535)),
    served_model=st.none() | _text,
    warnings=st.lists(_text, max_size=2).map(tuple))


@given(records)
def test_a_record_round_trips_through_its_document(record: DeploymentRecord) -> None:
    assert DeploymentRecord.from_document(json.loads(record_bytes(record)), "r.json") == record


INVALID = {"schema": [None, "x", 1.5], "kind": [None, "x", 1.5, []], "outcome": [None, "ok", {}],
           "ranks": [None, "x", {}, [1]], "started_at": [None, "x", [], True], "site": [None, 1.5, [], {}],
           "warnings": [None, "x", [1]]}


@given(records, st.sampled_from(sorted(INVALID)), st.data())
def test_a_record_with_a_wrong_field_is_refused_naming_it(record: DeploymentRecord, key: str, data) -> None:
    document = json.loads(record_bytes(record))
    document[key] = data.draw(st.sampled_from(INVALID[key]))
    with pytest.raises(InputError, match=rf"r.json: ({key}|ranks\[0\])"):
        DeploymentRecord.from_document(document, "r.json")


def test_written_records_are_read_back_by_status(tmp_path: Path) -> None:
    record = DeploymentRecord("d1", "glm53", "up", "site.toml", "sha256:" + "0" * 64, "glm53-dflash7", None, None,
                              None, None, None, "ready", 1.0, 2.0, (RankRecord("r0", 0, "h", "10.0.0.1"),))
    path = write_record(tmp_path / "records", record)
    assert path.name == "d1.json" and read_record(path) == record
    assert sorted(p.name for p in path.parent.iterdir()) == ["d1.json"]  # no temporary left


requests = st.builds(
    RankRequest, service=_text.filter(bool), deployment=_text.filter(bool), rank=st.integers(0, 9999),
    profile=_text.filter(bool), env_file=_text.filter(bool), engine=st.sampled_from(["podman", "docker"]),
    engine_args=st.lists(_text, max_size=4).map(tuple), state_dir=_text.filter(bool),
    image=st.none() | _digest, manifest=st.none() | _digest, checkpoint_pins=st.none() | _text,
    replacing=st.booleans())


@given(requests)
def test_a_rank_request_round_trips_through_json(request: RankRequest) -> None:
    assert RankRequest.from_json(request.to_json(), "--request-json") == request


@pytest.mark.parametrize(("change", "message"), [
    ({"rank": -1}, "rank: expected a non-negative integer"),
    ({"image": "sha256:12"}, "image: expected sha256"),
    ({"engine_args": "--root /x"}, "engine_args: expected an array of strings"),
    ({"extra": 1}, "extra: unknown key"),
    ({"env_file": ""}, "env_file: expected a non-empty string"),
])
def test_a_bad_rank_request_is_refused_naming_the_key(change: dict, message: str) -> None:
    good = json.loads(RankRequest("s", "d", 0, "p", "/e", "podman", (), "/s").to_json())
    with pytest.raises(InputError, match=message):
        RankRequest.from_document({**good, **change}, "--request-json")


@given(st.lists(st.sampled_from(["--a", "--b", "1", "2", "x"]), max_size=8))
def test_options_keep_every_argument_in_order(arguments: list[str]) -> None:
    grouped = options(arguments)
    assert " ".join(grouped).split() == arguments
    assert all(not item.startswith("--") or item.count(" ") <= 1 for item in grouped)


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3)),
       st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3)))
def test_differences_name_exactly_the_keys_that_differ(first: dict, other: dict) -> None:
    found = differences(first, other)
    differing = {key for key in set(first) | set(other) if first.get(key, "absent") != other.get(key, "absent")}
    assert {line.split(":")[0] for line in found} == differing


def _rank(number: int, **facts) -> RankAdmissionResult:
    base = {"image": "sha256:" + "a" * 64, "settings_hash": "s1", "settings": {"TP": "4"}, "pins_sha256": "p",
            "pins": {"target": "t"}, "spec_hash": "h", "spec": {"serve_args": ["--port", "8000"]},
            "node_count": 2, "master_address": "10.0.0.1", "node_address": f"10.0.0.{number + 1}",
            "api_port": 8000, "served_model": "glm"}
    return RankAdmissionResult(f"r{number}", number, "h", (CheckResult("x", "pass", ""),),
                               RankFacts(**{**base, **facts}), 0.1)


def test_the_gang_refuses_another_topology_and_names_the_rank() -> None:
    checks = {c.id: c for c in gang_checks([_rank(0), _rank(1, master_address="10.0.0.9", node_count=3)], None)}
    assert checks["gang.topology"].status == "fail"
    assert "rank 1 (r1): NODE_COUNT=3, the site has 2 ranks" in checks["gang.topology"].detail
    assert "MASTER_ADDRESS=10.0.0.9, rank 0's NODE_ADDRESS is 10.0.0.1" in checks["gang.topology"].detail
    assert {c.status for key, c in checks.items() if key != "gang.topology"} == {"pass"}


def test_the_gang_shows_the_spec_difference() -> None:
    other = _rank(1, spec_hash="h2", spec={"serve_args": ["--port", "8001"]})
    (spec,) = [c for c in gang_checks([_rank(0), other], None) if c.id == "gang.spec"]
    assert spec.status == "fail"
    assert "serve_args: without ['--port 8000'], with ['--port 8001']" in spec.detail


def test_the_gang_refuses_another_image_than_the_site_names() -> None:
    (image,) = [c for c in gang_checks([_rank(0), _rank(1)], "sha256:" + "b" * 64) if c.id == "gang.image"]
    assert image.status == "fail" and "the site names sha256:bbbb" in image.detail


class _Api(BaseHTTPRequestHandler):
    models: list = []
    health = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/health":
            self.send_response(self.health)
            self.end_headers()
        elif self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": m} for m in self.models]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_readiness_wants_health_and_the_served_model_listed() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        _Api.health, _Api.models = 503, ["glm"]
        assert probe("127.0.0.1", port, "glm").detail.endswith("/health answered 503")
        _Api.health, _Api.models = 200, ["other"]
        answer = probe("127.0.0.1", port, "glm")
        assert not answer.ready and "lists ['other'], not 'glm'" in answer.detail
        _Api.models = ["other", "glm"]
        assert probe("127.0.0.1", port, "glm").ready
    finally:
        server.shutdown()
        server.server_close()
    assert not probe("127.0.0.1", port, "glm", timeout=1).ready  # nothing listens now


def test_the_fabric_check_names_each_missing_interface_and_rdma_device() -> None:
    missing = check_fabric({"SOCKET_IFNAME": "lo,sfk-absent0", "NCCL_IB_HCA": "=sfk_absent_5:1"})
    assert missing.status == "fail"
    assert "interface sfk-absent0 (not in this host's network namespace)" in missing.detail
    assert "RDMA device sfk_absent_5 (no /sys/class/infiniband/sfk_absent_5)" in missing.detail
    assert "interface lo" not in missing.detail
    present = check_fabric({"SOCKET_IFNAME": "lo", "NCCL_IB_HCA": ""})
    assert present.status == "pass" and "interface lo" in present.detail
    # an exclusion list (NCCL's "^") names what not to use: nothing to find
    assert check_fabric({"SOCKET_IFNAME": "^docker0,lo", "NCCL_IB_HCA": "^mlx5_9"}).status == "pass"


@pytest.mark.parametrize(("body", "named"), [("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                                             ('{"a": ' + "7" * 5000 + "}", "an integer of more than"),
                                             ("{", "not valid JSON")])
def test_a_damaged_kept_request_is_refused_by_name(tmp_path: Path, body: str, named: str) -> None:
    """A rank's kept request.json was read with a bare json.loads: a damaged one raised a
    JSONDecodeError, ValueError or RecursionError out of the agent's `kept` and `status`."""
    from sparkflake.core.canonical_json import readable_json_bytes
    from sparkflake.service.rank_state import KEPT_SCHEMA, deployment_dir, kept_deployments

    (tmp_path / "current.json").write_bytes(readable_json_bytes({"schema": KEPT_SCHEMA, "deployment": "d1"}))
    request = deployment_dir(str(tmp_path), "d1") / "request.json"
    request.parent.mkdir(parents=True)
    request.write_text(body)
    with pytest.raises(InputError) as refused:
        kept_deployments(str(tmp_path))
    assert refused.value.message.startswith(str(request)) and named in refused.value.message


@pytest.mark.parametrize(("api", "named"), [
    ("http://127.0.0.1:x", "a port from 1 to 65535"),
    ("http://127.0.0.1:" + "9" * 5000, "a port from 1 to 65535"),
    ("http://rank0.example:8000", "with an IP address"),
    ("http://\x00:1", "with an IP address"),
    ("http://::1:80", "expected 'http://[::1]:80'"),
    ("x", "expected http://ADDRESS:PORT"),
])
def test_a_record_api_that_the_service_never_writes_is_refused(tmp_path: Path, api: str, named: str) -> None:
    """`service status` asks rank 0's API at the record's ``api``; one it could not parse
    (int() of the port, ipaddress of the host) was a ValueError out of status."""
    record = DeploymentRecord("d1", "glm53", "up", "site.toml", "sha256:" + "0" * 64, "glm53-dflash7", None, None,
                              None, None, None, "ready", 1.0, 2.0, (RankRecord("r0", 0, "h", "10.0.0.1"),),
                              api="http://[fd00::1]:8000", served_model="glm")
    path = write_record(tmp_path / "records", record)
    assert read_record(path) == record  # what the service writes reads back
    document = json.loads(path.read_bytes())
    path.write_text(json.dumps({**document, "api": api}))
    with pytest.raises(InputError, match=r"d1\.json: api: ") as refused:
        read_record(path)
    assert named in refused.value.message
