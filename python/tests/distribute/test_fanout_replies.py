"""What fan-out, the blob route, the registry route and replicate take from a rank agent's
reply. The agent is reached at the narrowest seam, the module's ``run_agent`` (one SSH
call; the real agent over SSH in network namespaces is tests/distribute/test_fanout*.py):
a reply of another shape (an agent of another version, or a damaged one) is that rank's
failure with a message naming the rank and the JSON path, never a traceback and never a
value of the wrong type in an evidence record (a hunt over 11,187 replies found KeyError,
TypeError, ValueError and OverflowError here, some in worker threads)."""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.distribute import blobs, fanout, registry_mode, replicate
from sparkflake.distribute.agent_reply import AgentReply, MalformedReply
from sparkflake.distribute.files import CopyState
from sparkflake.distribute.site import SCHEMA, parse_site
from sparkflake.distribute.ssh import AgentsOfARun
from sparkflake.distribute.store import LayoutPlan, plan_from_document

SHA = "a" * 64
IMAGE_ID = "sha256:" + "c" * 64
RANKS = "".join(f"""
[[ranks]]
name = "s{n}"
ssh = "root@192.0.2.1{n}"
management = "192.0.2.1{n}"
data_dir = "/var/lib/sparkflake"
fabric = {{ "l01" = "10.0.1.{n + 1}" }}
""" for n in (0, 1))
SITE = parse_site(f"""
schema = "{SCHEMA}"
topology = "chain"
order = ["s0", "s1"]
agent = ["python3", "-m", "sparkflake.distribute.agent"]

[ssh]
port = 22
connect_timeout = 10
server_alive_interval = 5
server_alive_count_max = 3
strict_host_key_checking = "yes"
{RANKS}
[[links]]
name = "l01"
endpoints = ["s0", "s1"]
""")
S0, S1 = SITE.rank("s0"), SITE.rank("s1")
GOOD_STATUS = CopyState(path="/var/lib/sparkflake/image.tar", exists=True, size=1000, sha256=SHA,
                        matches=True, partial_size=0).as_record()
ODD = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=4),
                st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


def _answering(*replies: AgentReply):
    """A ``run_agent`` whose calls get ``replies`` in order; the argv of each call is kept."""
    calls: list[list[str]] = []
    queue = list(replies)

    def run_agent(site: Any, rank: Any, args: Any, **_: Any) -> AgentReply:
        calls.append(list(args))
        return queue.pop(0)

    run_agent.calls = calls  # type: ignore[attr-defined]
    return run_agent


@given(key=st.sampled_from(sorted(GOOD_STATUS)), value=ODD | st.just("<deleted>"))
def test_a_status_reply_is_a_copy_state_or_a_refusal_naming_its_path(key, value):
    document = copy.deepcopy(GOOD_STATUS)
    if value == "<deleted>":
        del document[key]
    else:
        document[key] = value
    try:
        state = CopyState.from_reply(document, "rank s1 (root@192.0.2.11)")
    except MalformedReply as exc:
        assert exc.message.startswith(f"rank s1 (root@192.0.2.11): the agent's reply $.{key}: expected ")
        assert exc.exit_code == 1
        return
    assert isinstance(state.exists, bool) and isinstance(state.matches, bool)
    assert state.size is None or (isinstance(state.size, int) and not isinstance(state.size, bool) and state.size >= 0)
    assert isinstance(state.partial_size, int) and state.partial_size >= 0


def test_the_source_whose_status_reply_has_no_size_is_refused_by_name(monkeypatch):
    reply = dict(GOOD_STATUS, size="x")
    monkeypatch.setattr(fanout, "run_agent", _answering(AgentReply(0, reply, "")))
    request = fanout.FanoutRequest(archive="/var/lib/sparkflake/image.tar", sha256=SHA)
    with pytest.raises(CheckFailed, match=r"rank s0 \(root@192.0.2.10\): the agent's reply \$.size: expected a whole"):
        fanout._prepare_source(SITE, S0, request, {})


def test_a_download_reply_with_a_received_count_that_is_not_a_number_is_refused(monkeypatch):
    reply = {"status": "ok", "path": "/x", "size": 10, "received": "x", "sha256": SHA}
    monkeypatch.setattr(fanout, "run_agent", _answering(AgentReply(0, reply, "")))
    request = fanout.FanoutRequest(archive="http://192.0.2.1/image.tar", sha256=SHA)
    with pytest.raises(CheckFailed, match=r"\$.received: expected a whole number"):
        fanout._prepare_source(SITE, S0, request, {})


@pytest.mark.parametrize(("reply", "error"), [
    ({"status": "ok"}, "the agent's reply $.image_id: expected a non-empty string, got nothing"),
    ({"status": "ok", "image_id": "sha256:" + "d" * 64, "tag": None},
     f"the engine holds image ID sha256:{'d' * 64} after the import, expected {IMAGE_ID}"),
])
def test_an_import_reply_without_the_image_id_asked_for_fails_the_rank_in_its_record(monkeypatch, reply, error):
    monkeypatch.setattr(fanout, "run_agent", _answering(AgentReply(0, reply, "")))
    request = fanout.FanoutRequest(archive="/a.tar", sha256=SHA, image_id=IMAGE_ID, engine="podman")
    record: dict[str, Any] = {"status": "verified", "imported": False}
    fanout._import(AgentsOfARun(), SITE, S1, "/a.tar", request, record)  # a worker thread's body: it must not raise
    assert record["status"] == "failed" and error in record["error"] and record["imported"] is False


def test_image_status_present_must_be_a_boolean_not_any_true_value(monkeypatch):
    monkeypatch.setattr(fanout, "run_agent", _answering(AgentReply(0, {"status": "ok", "present": "false"}, "")))
    evidence = {"s1": {"status": "verified"}}
    fanout.check_images(SITE, [S1], "podman", IMAGE_ID, evidence)
    assert evidence["s1"]["imported"] is False and evidence["s1"]["status"] == "failed"
    assert "$.present: expected true or false" in evidence["s1"]["error"]


def _plan() -> LayoutPlan:
    manifest = b'{"schemaVersion":2}'
    return plan_from_document({
        "index": base64.b64encode(b"{}").decode(), "manifest": base64.b64encode(manifest).decode(),
        "manifest_digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
        "config": {"digest": IMAGE_ID, "size": 2, "mediaType": "application/vnd.oci.image.config.v1+json"},
        "layers": [],
    }, "plan")


@pytest.mark.parametrize("imported", [{"status": "ok", "engine": "podman", "tag": "t"}, {"status": "ok", "image_id": 1}])
def test_a_layout_import_reply_of_another_shape_fails_the_rank_in_its_record(monkeypatch, imported):
    monkeypatch.setattr(blobs, "run_agent", _answering(AgentReply(0, imported, "")))
    request = blobs.LayoutFanoutRequest(layout="/l", engine="podman", tag="t")
    record: dict[str, Any] = {"status": "verified", "committed": False, "imported": False}
    blobs._settle(AgentsOfARun(), SITE, S0, "/l", _plan(), request=request, chain=None, record=record, committer=None,
                  shared=None)
    assert record["status"] == "failed" and "the agent's reply $.image_id" in record["error"]
    assert record["imported"] is False


class _Finishing:
    """Rank 0's plan agent after its plan: ``finish`` gives its last reply (the check's)."""

    def __init__(self, reply: AgentReply) -> None:
        self.reply = reply

    def finish(self, input_text: str = "", timeout: float | None = None) -> AgentReply:
        return self.reply


@pytest.mark.parametrize(("reply", "status"), [
    (AgentReply(1, {"status": "failed", "message": "[oci.layer-entries] layer 1: unsafe"}, ""), "failed"),
    (AgentReply(255, None, "ssh: connect to host 192.0.2.10 port 22: No route to host\n"), "failed"),
    (AgentReply(0, {"status": "ok", "layers_checked": 2, "verified_prefixes": ["a"]}, ""), "ok"),
    (AgentReply(0, {"status": "ok", "layers_checked": 2}, ""), "ok"),
])
def test_rank_0s_entry_check_without_usable_records_shares_none_and_says_why(reply, status):
    """Each import then checks its layers itself (a refusal is then each rank's own)."""
    record: dict[str, Any] = {}
    check = blobs._SourceEntryCheck(_Finishing(reply), record)  # type: ignore[arg-type]
    check.start().join()
    assert check.wait() == {} and record["source_entry_check"]["runs_shared"] == 0
    assert record["source_entry_check"]["status"] == status
    if status == "failed":
        assert record["source_entry_check"]["message"] == reply.describe_failure()


def test_rank_0s_records_past_the_limit_are_not_sent(monkeypatch):
    records = {f"{n:064x}": {"p" * 100: "t" * 100} for n in range(4)}
    reply = AgentReply(0, {"status": "ok", "layers_checked": 4, "verified_prefixes": records}, "")
    for limit, shared in ((1 << 20, records), (1000, {})):
        monkeypatch.setattr(blobs, "SHARED_RECORDS_LIMIT", limit)
        record: dict[str, Any] = {}
        check = blobs._SourceEntryCheck(_Finishing(reply), record)  # type: ignore[arg-type]
        check.start().join()
        assert check.wait() == shared and record["source_entry_check"]["runs_shared"] == len(shared)


def test_rank_0_s_blob_status_without_held_is_a_message_not_a_key_error(monkeypatch):
    monkeypatch.setattr(blobs, "run_agent", _answering(AgentReply(0, {"status": "ok"}, "")))
    message = blobs._source_check(SITE, S0, "/l", [])
    assert message == ("rank s0 (root@192.0.2.10): the agent's reply $.held: expected an array of strings, "
                       "got nothing (does the rank run this version of sparkflake?); nothing transferred")


@pytest.mark.parametrize("pulled", [
    {"status": "ok", "manifest_digest": "sha256:" + "2" * 64, "config_digest": IMAGE_ID},
    {"status": "ok", "bytes": "5", "manifest_digest": "sha256:" + "2" * 64, "config_digest": IMAGE_ID},
    {"status": "ok", "bytes": 5, "manifest_digest": "sha256:" + "2" * 64, "config_digest": ["x"]},
])
def test_a_pull_reply_of_another_shape_fails_the_rank_in_its_record(monkeypatch, pulled):
    monkeypatch.setattr(registry_mode, "run_agent", _answering(AgentReply(0, pulled, "")))
    request = registry_mode.RegistryFanoutRequest(reference="192.0.2.1:5000/glm@sha256:" + "2" * 64)
    record = registry_mode._one_rank(AgentsOfARun(), SITE, S1, request)
    assert record["status"] == "failed" and "rank s1 (root@192.0.2.11): the agent's reply $." in record["error"]
    assert record["bytes"] is None


def test_a_pull_then_an_import_of_another_image_is_not_imported(monkeypatch):
    pulled = {"status": "ok", "bytes": 5, "manifest_digest": "sha256:" + "2" * 64, "config_digest": IMAGE_ID}
    other = {"status": "ok", "image_id": "sha256:" + "e" * 64, "tag": None}
    monkeypatch.setattr(registry_mode, "run_agent", _answering(AgentReply(0, pulled, ""), AgentReply(0, other, "")))
    request = registry_mode.RegistryFanoutRequest(reference="192.0.2.1:5000/glm@sha256:" + "2" * 64,
                                                  image_id=IMAGE_ID, engine="podman")
    record = registry_mode._one_rank(AgentsOfARun(), SITE, S1, request)
    assert record["status"] == "failed" and record["imported"] is False
    assert f"expected {IMAGE_ID}" in record["error"]


def _replicate_agent(matching: Any) -> Any:
    listed = {"status": "ok", "files": [{"path": "a.safetensors", "size": 1, "sha256": SHA}]}
    return _answering(AgentReply(0, listed, ""), AgentReply(0, {"status": "ok", "matching": matching, "extra": [],
                                                                "missing": [], "mismatch": []}, ""),
                      AgentReply(0, {"status": "ok", "matching": ["a.safetensors"], "extra": [], "missing": [],
                                     "mismatch": []}, ""))


def test_replicate_counts_only_the_manifest_s_files_as_reused(monkeypatch):
    monkeypatch.setattr(replicate, "run_agent", _replicate_agent(["a.safetensors", "ghost", "other"]))
    report = replicate.replicate(SITE, replicate.ReplicateRequest(model_dir="/models/glm"))
    assert [r["files_reused"] for r in report["ranks"]] == [1, 1] and report["complete"] is True


def test_replicate_fails_a_rank_whose_matching_is_not_a_list_of_paths(monkeypatch):
    monkeypatch.setattr(replicate, "run_agent", _replicate_agent(1))
    report = replicate.replicate(SITE, replicate.ReplicateRequest(model_dir="/models/glm"))
    second = report["ranks"][1]
    assert second["status"] == "failed" and "the agent's reply $.matching: expected an array of strings" in second["error"]
    assert report["complete"] is False


def test_verify_refuses_a_rank_whose_copy_of_the_same_sha256_has_another_size(monkeypatch):
    def run_agent(site: Any, rank: Any, args: Any, **_: Any) -> AgentReply:
        size = 1000 if rank.name == "s0" else 5
        return AgentReply(0, dict(GOOD_STATUS, size=size), "")

    monkeypatch.setattr(fanout, "run_agent", run_agent)
    report = fanout.fanout(SITE, fanout.FanoutRequest(archive="/var/lib/sparkflake/image.tar", sha256=SHA,
                                                      verify_only=True))
    second = report["ranks"][1]
    assert report["complete"] is False and second["status"] == "failed" and second["reused"] is False
    assert "of 5 bytes; rank 0's has 1000" in second["error"]


def test_replicate_refuses_a_manifest_size_past_what_a_file_can_hold(monkeypatch):
    listed = {"status": "ok", "files": [{"path": "a.safetensors", "size": 2**70, "sha256": SHA}]}
    monkeypatch.setattr(replicate, "run_agent", _answering(AgentReply(0, listed, "")))
    with pytest.raises(InputError, match=r"files\[0\]\.size: expected a non-negative integer below 2\^63"):
        replicate.replicate(SITE, replicate.ReplicateRequest(model_dir="/models/glm"))
