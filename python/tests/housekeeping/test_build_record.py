"""The build record (``housekeeping.build_record``): what it writes it reads back unchanged,
and a bad record is refused naming the file and the JSON path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.housekeeping.build_record import (
    BuildRecord,
    dump_record,
    load_build_records,
    parse_record,
    write_build_record,
)

HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
DIGEST = HEX.map(lambda hex_digits: f"sha256:{hex_digits}")
records = st.builds(
    BuildRecord,
    profile=st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True),
    built_at=st.datetimes().map(lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%SZ")).filter(lambda text: len(text) == 20),
    manifest_digest=DIGEST,
    config_digest=DIGEST,
    inputs=st.lists(HEX, unique=True, max_size=5).map(tuple),
    git_trees=st.lists(st.text("0123456789abcdef", min_size=40, max_size=40), unique=True, max_size=3).map(tuple),
    trees=st.lists(HEX, unique=True, max_size=5).map(tuple),
    blobs=st.lists(DIGEST, unique=True, max_size=5).map(tuple),
)


@given(record=records)
def test_a_record_reads_back_as_written(record: BuildRecord) -> None:
    assert parse_record(dump_record(record), "r.json") == record


@given(record=records, key=st.sampled_from(["profile", "built_at", "manifest_digest", "inputs", "trees", "blobs"]),
       value=st.one_of(st.integers(), st.just("NOT HEX"), st.just([1])))
def test_a_bad_field_is_named_by_its_json_path(record: BuildRecord, key: str, value: object) -> None:
    document = json.loads(dump_record(record))
    document[key] = value
    with pytest.raises(InputError, match=rf"^r\.json: \$\.{key}"):
        parse_record(json.dumps(document).encode(), "r.json")


def test_unknown_keys_schema_and_shape_are_refused(tmp_path: Path) -> None:
    good = BuildRecord("fixture", "2026-12-02T01:02:03Z", "sha256:" + "a" * 64, "sha256:" + "b" * 64)
    document = json.loads(dump_record(good))
    for change, message in ((("extra", 1), r"\$\.extra: unknown key"), (("schema", "v0"), r"\$\.schema: expected"),):
        bad = {**document, change[0]: change[1]}
        with pytest.raises(InputError, match=message):
            parse_record(json.dumps(bad).encode(), "r.json")
    with pytest.raises(InputError, match="r.json: expected a build record"):
        parse_record(b"[]", "r.json")
    first = write_build_record(tmp_path, good)
    second = write_build_record(tmp_path, good)  # the same second: another name, never overwritten
    assert first != second and [stored.path for stored in load_build_records(tmp_path)] == [first, second]
    (first.parent / "notes.txt").write_text("the operator's")  # not a record's name: not read
    other = tmp_path / "builds" / "other" / first.name
    other.parent.mkdir()
    other.write_bytes(first.read_bytes())
    with pytest.raises(InputError, match=r"\$\.profile: 'fixture' is not the directory's 'other'"):
        load_build_records(tmp_path)
