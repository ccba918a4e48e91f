"""A directory of evidence records (``launch.evidence.load_evidence_dir``): every ``*.json``
file in it (hidden ones too, as pathlib globs; not in subdirectories, nothing of another
name) reads back as
the record it holds, in the order of the file names, each knowing its path; a missing
directory (or a file in its place) has none; a ``*.json`` name that is no regular file (a
directory, a FIFO, a dangling symlink) or holds no record is refused with ``InputError``
naming that file, never waited on."""

from __future__ import annotations

import os
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch import evidence

pytestmark = pytest.mark.launch

HEX = "0123456789abcdef"
_digests = st.text(HEX, min_size=64, max_size=64).map(lambda hexits: f"sha256:{hexits}")
_short = st.text(string.ascii_letters + string.digits + " -_.,", min_size=1, max_size=20)
_records = st.builds(
    evidence.EvidenceRecord,
    profile=st.sampled_from(["glm53-dflash7", "glm53-mtp5", "fixture"]),
    status=st.sampled_from(evidence.STATUSES), origin=st.sampled_from(evidence.ORIGINS),
    manifest_digest=_digests, config_digest=_digests, settings_hash=st.none() | _digests,
    measured=st.lists(st.builds(evidence.Measurement, _short, st.integers(-10**6, 10**6) | _short | st.booleans(),
                                _short), max_size=2).map(tuple),
    recorded=st.dates().map(lambda day: f"{day.year:04d}-{day.month:02d}-{day.day:02d}"),
    source=_short, reference=st.just("") | _short,
)
_stems = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"), min_size=1, max_size=12)


@settings(max_examples=25)
@given(st.dictionaries(_stems, _records, max_size=5), st.lists(_stems, max_size=3))
def test_every_json_record_reads_back_in_name_order(tmp_path_factory, records, others) -> None:
    folder = tmp_path_factory.mktemp("evidence")
    for stem, record in records.items():
        (folder / f"{stem}.json").write_bytes(evidence.dump_record(record))
    for stem in others:  # not records: other suffixes, in a subdirectory
        (folder / f"{stem}.json.bak").write_bytes(b"not json")
        (folder / f"{stem}.JSON").write_bytes(b"not json")
        (folder / "kept").mkdir(exist_ok=True)
        (folder / "kept" / f"{stem}.json").write_bytes(b"not json")
    # pathlib's glob: a hidden name is read too (".x.json"), unlike the shell's
    expected = [(f"{stem}.json", records[stem]) for stem in records]
    expected.sort(key=lambda item: item[0])
    loaded = evidence.load_evidence_dir(folder)
    assert loaded == [record for _, record in expected]
    assert [record.path for record in loaded] == [str(folder / name) for name, _ in expected]
    assert evidence.load_evidence_dir(folder / "missing") == []
    assert evidence.load_evidence_dir(folder / "kept" / "absent.json") == []


@settings(max_examples=30)
@given(st.lists(_records, min_size=1, max_size=3), st.sampled_from(["directory", "fifo", "dangling", "bytes", "deep"]),
       st.binary(max_size=40), st.data())
def test_a_json_name_without_a_record_is_refused_naming_it(tmp_path_factory, records, kind, noise, data) -> None:
    folder = tmp_path_factory.mktemp("evidence")
    for index, record in enumerate(records):
        (folder / f"r{index}.json").write_bytes(evidence.dump_record(record))
    bad = folder / f"r{data.draw(st.integers(0, len(records)))}x.json"
    if kind == "directory":
        bad.mkdir()
    elif kind == "fifo":
        os.mkfifo(bad)
    elif kind == "dangling":
        bad.symlink_to(folder / "nowhere")
    elif kind == "bytes":
        bad.write_bytes(noise)
    else:
        bad.write_bytes(b"[" * 100_000)
    with pytest.raises(InputError) as refused:
        evidence.load_evidence_dir(folder)
    assert str(refused.value).startswith(f"{bad}:") or str(refused.value).startswith(f"{bad} ")
