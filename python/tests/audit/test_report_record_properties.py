"""The check and audit records (``CheckResult.as_record``, ``AuditReport.as_record`` and the
digest-verification file ``audit.write_record`` makes of it): a check's record is what a
rank's agent emits (``agent_protocol.emit``) and the controller reads back
(``agent_reply.last_json`` + ``service.gang._check``), so it round-trips through them to the
same ``CheckResult``; an audit record has no reader in sparkflake, so its canonical JSON is
stable (parse, dump again: the same bytes), holds every field of the report and says
``passed`` exactly when no check failed or erred. A reply check of any other shape is
refused as ``MalformedReply`` naming the rank and the JSON path, never a traceback.

Detail texts here hold any character, line separators other than ``\\n`` included (U+2028,
U+0085, \\x0b, ...): the controller splits the agent's output at ``\\n`` only (finding H1,
/work/notes/hypothesis-findings-3.md)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.audit import write_record
from sparkflake.audit.report import AuditReport, LayerFinding
from sparkflake.core.canonical_json import canonical_json_bytes
from sparkflake.core.check_result import ERROR, FAIL, PASS, SKIP, CheckResult
from sparkflake.core.documents import parse_json_object
from sparkflake.distribute.agent_protocol import emit
from sparkflake.distribute.agent_reply import MalformedReply, last_json
from sparkflake.service.gang import _check

pytestmark = pytest.mark.audit

STATUSES = (PASS, FAIL, ERROR, SKIP)
# any text the agent's reply line can hold (no lone surrogate: no UTF-8 holds one), the
# characters str.splitlines splits at included (finding H1)
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda hexits: f"sha256:{hexits}")
_checks = st.builds(CheckResult, _text.filter(bool), st.sampled_from(STATUSES), _text,
                    st.none() | _digests | _text.filter(bool))


def _through_the_agent(checks: list[CheckResult]) -> list[CheckResult]:
    """What the controller reads of the checks an agent emitted (its stdout, log lines around)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("a shell startup file's echo")
        emit({"status": "ok", "checks": [check.as_record() for check in checks]})
    reply = last_json(out.getvalue() + "a log line after it\n")
    assert reply is not None
    return [_check(item, "rank 1 (r1, host): admit", f"$.checks[{index}]") for index, item in enumerate(reply["checks"])]


@example([CheckResult("image.manifest", PASS, "image a\u2028b is bound", None)])  # H1: lost before
@example([CheckResult("c\x85", FAIL, "\x0b\x0c\x1c\x1d\x1e\r\u2029", "d\u2028")])
@given(st.lists(_checks, max_size=4))
def test_a_check_record_round_trips_through_the_agents_reply(checks) -> None:
    assert _through_the_agent(checks) == checks
    for check in checks:  # every field, by its own name, and nothing else
        assert check.as_record() == {"id": check.id, "status": check.status, "detail": check.detail,
                                     "digest": check.digest}


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=6), inner, max_size=2),
                     max_leaves=5)


@given(_checks.map(CheckResult.as_record), st.sampled_from(["id", "status", "detail", "digest"]), _json)
def test_a_reply_check_of_another_shape_is_refused_naming_its_path(record, key, value) -> None:
    record[key] = value
    try:
        check = _check(record, "rank 1 (r1, host): admit", "$.checks[3]")
    except MalformedReply as refused:
        assert "rank 1 (r1, host): admit: the agent's reply $.checks[3]." in str(refused) and refused.check_id == "agent.reply"
        return
    assert isinstance(check.id, str) and check.id and check.status in STATUSES and isinstance(check.detail, str)
    assert check.digest is None or (isinstance(check.digest, str) and check.digest)


_layers = st.builds(LayerFinding, st.none() | _digests, st.none() | _digests, st.integers(0, 1 << 50),
                    st.integers(0, 1 << 60), _text, st.dictionaries(_text, st.integers(0, 1 << 20), max_size=3))


@st.composite
def _reports(draw) -> AuditReport:
    report = AuditReport(
        target=draw(_text), source_kind=draw(st.sampled_from(["oci", "oci-archive", "docker-archive", "registry"])),
        manifest_digest=draw(st.none() | _digests), index_digest=draw(st.none() | _digests),
        config_digest=draw(st.none() | _digests), chain_id=draw(st.none() | _digests),
        engine_image_id=draw(st.none() | _digests), platform=draw(st.none() | st.just("linux/arm64")),
        labels=draw(st.dictionaries(_text, _text, max_size=4)), layers=draw(st.lists(_layers, max_size=3)),
    )
    for check in draw(st.lists(_checks, max_size=5)):
        report.add(check.id, check.status, check.detail, check.digest)
    return report


@given(_reports())
def test_an_audit_record_is_stable_json_holding_every_field(report) -> None:
    record = report.as_record()
    data = canonical_json_bytes(record)
    assert json.loads(data) == record and canonical_json_bytes(json.loads(data)) == data
    assert record["schema"] == 1 and record["kind"] == "sparkflake.audit"
    assert (record["target"], record["source"], record["platform"]) == (report.target, report.source_kind, report.platform)
    assert record["passed"] == (not any(check.status in (FAIL, ERROR) for check in report.checks))
    assert {kind: entry["digest"] for kind, entry in record["digests"].items()} == {
        "manifest": report.manifest_digest, "index": report.index_digest, "config": report.config_digest,
        "image_id": report.engine_image_id or report.config_digest, "chain_id": report.chain_id}
    assert record["labels"] == report.labels and list(record["labels"]) == sorted(report.labels)
    assert [LayerFinding(**layer) for layer in record["layers"]] == report.layers
    assert [CheckResult(**check) for check in record["checks"]] == report.checks
    assert _through_the_agent([CheckResult(**check) for check in record["checks"]]) == report.checks


@given(_reports(), st.none() | _text)
def test_the_digest_verification_file_reads_back_as_the_record(tmp_path_factory, report, profile) -> None:
    path = tmp_path_factory.mktemp("record") / "verification.json"
    write_record(path, report, profile)
    written = parse_json_object(path.read_bytes(), str(path))
    assert written == {**report.as_record(), "kind": "sparkflake.digest-verification", "profile": profile}
