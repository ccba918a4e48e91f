import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.cli import main
from sparkflake.core.errors import InputError
from sparkflake.launch import evidence

HEX = "0123456789abcdef"
digests = st.text(HEX, min_size=64, max_size=64).map(lambda h: f"sha256:{h}")
short_text = st.text(string.ascii_letters + string.digits + " -_.,", min_size=1, max_size=30)
values = st.one_of(st.integers(-10**9, 10**9), short_text, st.booleans(),
                   st.floats(allow_nan=False, allow_infinity=False, width=32))
records = st.builds(
    evidence.EvidenceRecord,
    profile=st.sampled_from(["glm53-dflash7", "glm53-mtp5", "fixture"]),
    status=st.sampled_from(evidence.STATUSES),
    origin=st.sampled_from(evidence.ORIGINS),
    manifest_digest=digests,
    config_digest=digests,
    settings_hash=st.one_of(st.none(), digests),
    measured=st.lists(st.builds(evidence.Measurement, short_text, values, short_text), max_size=3).map(tuple),
    recorded=st.dates().map(lambda d: f"{d.year:04d}-{d.month:02d}-{d.day:02d}"),
    source=short_text,
    reference=st.one_of(st.just(""), short_text),
)


@given(records)
def test_record_round_trip_is_byte_identical(record):
    first = evidence.dump_record(record)
    parsed = evidence.parse_record(first, "r.json")
    assert parsed == record
    assert evidence.dump_record(parsed) == first


@given(records, st.data())
def test_mutated_records_give_input_error_only(record, data):
    document = record.as_record()
    key = data.draw(st.sampled_from(sorted(document)))
    document[key] = data.draw(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)))
    try:
        evidence.parse_record(json.dumps(document), "r.json")
    except InputError as exc:
        assert "r.json" in str(exc)


@given(st.binary(max_size=200))
def test_random_bytes_never_traceback(blob):
    with pytest.raises(InputError):
        evidence.parse_record(blob, "r.json")


@given(records, st.sampled_from(["\n", " ", "T00:00"]))
def test_a_recorded_date_with_anything_after_it_is_refused(record, tail):
    document = record.as_record()
    document["recorded"] += tail
    with pytest.raises(InputError, match=r"r.json: \$.recorded: expected YYYY-MM-DD"):
        evidence.parse_record(json.dumps(document), "r.json")


def _record(**changes):
    base = dict(
        profile="glm53-dflash7", status="qualified", origin="local",
        manifest_digest="sha256:" + "a" * 64, config_digest="sha256:" + "b" * 64,
        settings_hash="sha256:" + "c" * 64, measured=(), recorded="2026-11-30", source="test",
    )
    base.update(changes)
    return evidence.EvidenceRecord(**base)


def test_claim_transfers_only_to_the_exact_image_and_settings():
    record = _record()
    same = evidence.RecordedDigests("sha256:" + "a" * 64, "sha256:" + "b" * 64, "d.json")
    rebuilt = evidence.RecordedDigests("sha256:" + "d" * 64, "sha256:" + "b" * 64, "d.json")
    other_config = evidence.RecordedDigests("sha256:" + "a" * 64, "sha256:" + "e" * 64, "d.json")
    status = evidence.profile_status("glm53-dflash7", "implemented", same, [record])
    assert status.effective_status == "qualified"
    status = evidence.profile_status("glm53-dflash7", "implemented", rebuilt, [record])
    assert status.effective_status == "implemented"
    assert "manifest digest differs" in status.assessments[0].reason
    assert "sha256:" + "d" * 64 in status.assessments[0].reason
    status = evidence.profile_status("glm53-dflash7", "implemented", other_config, [record])
    assert "config digest" in status.assessments[0].reason
    status = evidence.profile_status("glm53-dflash7", "implemented", same, [record], "sha256:" + "f" * 64)
    assert status.effective_status == "implemented"
    assert "resolved settings differ" in status.assessments[0].reason
    status = evidence.profile_status("glm53-dflash7", "implemented", None, [record])
    assert status.effective_status == "implemented"


def test_evidence_for_another_profile_is_ignored():
    record = _record(profile="glm53-mtp5")
    same = evidence.RecordedDigests("sha256:" + "a" * 64, "sha256:" + "b" * 64, "d.json")
    status = evidence.profile_status("glm53-dflash7", "research-only", same, [record])
    assert status.assessments == ()
    assert status.effective_status == "research-only"


def test_seed_r8_evidence_is_recorded_and_does_not_transfer(tmp_path, capsys):
    result = tmp_path / "result" / "glm53-dflash7"
    result.mkdir(parents=True)
    (result / "digests.json").write_text(json.dumps({
        "manifest": "sha256:" + "1" * 64, "config": "sha256:" + "2" * 64}))
    code = main(["status", "glm53-dflash7", "--result", str(tmp_path / "result"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    (profile,) = out["profiles"]
    r8 = [e for e in profile["evidence"] if e["origin"] == "external"]
    assert r8 and r8[0]["manifest_digest"] == (
        "sha256:380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a")
    assert r8[0]["config_digest"] == (
        "sha256:b3a13d8003e7de30d7737fd33c8307404e506ba570240819ec7eb4f5c611400f")
    assert r8[0]["applies"] is False
    assert profile["effective_status"] == profile["declared_status"]


def test_malformed_evidence_file_exit_2_names_file(tmp_path, capsys):
    folder = tmp_path / "ev"
    folder.mkdir()
    (folder / "bad.json").write_text('{"schema": 1, "kind": "sparkflake.evidence", "status": "great"}')
    with pytest.raises(InputError) as caught:
        evidence.load_evidence_dir(folder)
    assert "bad.json" in str(caught.value)


@pytest.mark.parametrize(("body", "named"), [
    ('{"schema": ' + "9" * 5000 + "}", "an integer of more than"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"schema": 1, "schema": 1}', "$.schema: the key is given twice"),
    ('{"schema": NaN}', "NaN"),
])
def test_evidence_python_cannot_or_should_not_read_is_refused_by_name(tmp_path, capsys, body, named):
    """parse_record used json.loads itself: an integer of over 4300 digits (ValueError) or
    deep nesting (RecursionError) was a traceback in `status` and `cache gc`; a key given
    twice and NaN were taken. It reads with the strict reader every document goes through."""
    folder = tmp_path / "ev"
    folder.mkdir()
    (folder / "odd.json").write_text(body)
    with pytest.raises(InputError) as caught:
        evidence.load_evidence_dir(folder)
    assert caught.value.message.startswith(str(folder / "odd.json")) and named in caught.value.message
