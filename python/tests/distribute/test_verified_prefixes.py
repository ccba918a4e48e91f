"""A rank's memory of the layer runs it has checked (distribute/verified_prefixes.py through
oci.verify's ``verified``): the blob route's import checks every layer entry, as the archive
route's does, and a delta reads only the layers no earlier import checked below the same
ones. Shown here by damaging a known layer's blob after its check: it is not read again,
while the symlinks it leaves still decide a new layer's entries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures.hostile_layers import ACROSS, hostile_layout
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import CheckFailed
from sparkflake.distribute.verified_prefixes import SCHEMA, VerifiedPrefixStore
from sparkflake.oci.reader import open_image
from sparkflake.oci.verify import prefix_keys, verify_image

BASE = [("etc", "dir", ""), ("etc/cron", "symlink", "/etc/cron.d"), ("usr", "dir", ""), ("usr/bin", "dir", "")]
SAFE_TOP = [("usr/bin/serve", "file", "")]


def _layer_blobs(layout: Path) -> list[Path]:
    reader = open_image(layout)
    return [layout / "blobs" / "sha256" / str(ref.digest).removeprefix("sha256:") for ref in reader.layer_refs]


def _damage(blob: Path) -> None:
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    os.chmod(blob, 0o644)
    blob.write_bytes(bytes(raw))


def test_a_known_run_of_layers_is_not_read_again_and_still_decides_the_next(tmp_path: Path) -> None:
    store = VerifiedPrefixStore(tmp_path / "verified")
    first = hostile_layout(tmp_path / "first", [BASE, SAFE_TOP])
    verify_image(open_image(first), verified=store)
    assert len(list((tmp_path / "verified").iterdir())) == 2  # one record per run of layers

    # the same base below a new top layer: the base is not read (its blob damaged now)
    second = hostile_layout(tmp_path / "second", [BASE, [("usr/bin/other", "file", "")]])
    _damage(_layer_blobs(second)[0])
    report = verify_image(open_image(second), verified=store)
    assert report.layers[1].compression == "gzip" and report.layers[0].compression == ""  # read / known
    with pytest.raises(CheckFailed, match="oci.layer|digest"):  # without the memory it is read, and fails
        verify_image(open_image(second))

    # a new top layer writing through the base's symlink is refused from the remembered symlinks
    hostile = hostile_layout(tmp_path / "hostile", ACROSS)
    base_only = hostile_layout(tmp_path / "base-only", ACROSS[:1])
    verify_image(open_image(base_only), verified=store)
    _damage(_layer_blobs(hostile)[0])
    with pytest.raises(CheckFailed) as refused:
        verify_image(open_image(hostile), verified=store)
    assert refused.value.check_id == "oci.layer-entries"
    assert "'etc/cron/job' is below the symlink etc/cron -> /etc/cron.d" in str(refused.value)


def test_a_run_is_known_only_with_the_same_blobs_inflating_to_the_same_diff_ids_in_order() -> None:
    a, b = ("sha256:" + "a" * 64, "sha256:" + "1" * 64), ("sha256:" + "b" * 64, "sha256:" + "2" * 64)
    keys = prefix_keys([a, b])
    assert keys[0] == prefix_keys([a])[0] and len(set(keys)) == 2
    assert prefix_keys([b, a])[1] != keys[1]  # order
    assert prefix_keys([(a[0], b[1])])[0] != keys[0]  # the same blob said to inflate otherwise


@pytest.mark.parametrize("content", [b"", b"[" * 50000, b"\xff\xfe", b'{"schema": "other", "symlinks": {}}',
                                     b'{"schema": "%s", "symlinks": {"a": 1}}' % SCHEMA.encode(),
                                     b'{"schema": "%s", "symlinks": []}' % SCHEMA.encode()])
def test_a_record_that_is_not_one_is_passed_over(tmp_path: Path, content: bytes) -> None:
    key = "c" * 64
    (tmp_path / f"{key}.json").write_bytes(content)
    assert VerifiedPrefixStore(tmp_path).symlinks_after(key) is None


def test_a_fifo_or_a_directory_at_a_record_is_passed_over_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / ("d" * 64 + ".json"))
    (tmp_path / ("e" * 64 + ".json")).mkdir()
    store = VerifiedPrefixStore(tmp_path)
    assert store.symlinks_after("d" * 64) is None and store.symlinks_after("e" * 64) is None
    store.record("d" * 64, {"x": "/y"})  # not written through the FIFO, no error: only not remembered
    assert store.symlinks_after("d" * 64) is None


def test_a_directory_that_is_a_symlink_is_not_written_into(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "verified").symlink_to(elsewhere)
    VerifiedPrefixStore(tmp_path / "verified").record("f" * 64, {})
    assert list(elsewhere.iterdir()) == []


@given(st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=20), max_size=20))
def test_a_record_gives_back_the_symlinks_it_was_given(symlinks: dict[str, str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        store = VerifiedPrefixStore(Path(scratch) / "verified")
        store.record("0" * 64, symlinks)
        assert store.symlinks_after("0" * 64) == symlinks
        assert json.loads((Path(scratch) / "verified" / ("0" * 64 + ".json")).read_bytes())["schema"] == SCHEMA


def test_keys_that_are_not_sha256_hex_are_neither_read_nor_written(tmp_path: Path) -> None:
    store = VerifiedPrefixStore(tmp_path)
    store.record("../escape", {})
    assert list(tmp_path.iterdir()) == [] and store.symlinks_after("../escape") is None


def test_past_the_cap_the_runs_used_longest_ago_go_and_nothing_else(tmp_path: Path, monkeypatch) -> None:
    from sparkflake.distribute import verified_prefixes

    monkeypatch.setattr(verified_prefixes, "MAX_RECORDS", 3)
    directory = tmp_path / "verified"
    store = VerifiedPrefixStore(directory)
    keys = [f"{n:064x}" for n in range(5)]
    for moment, key in enumerate(keys[:3]):
        store.record(key, {"k": key})
        os.utime(directory / f"{key}.json", ns=(moment * 10**9, moment * 10**9))
    (directory / "operator-notes.txt").write_text("not a record")
    (directory / ("a" * 64 + ".json.bak")).write_text("not a record either")
    assert store.symlinks_after(keys[0]) == {"k": keys[0]}  # used now: newest
    store.record(keys[3], {})
    store.record(keys[4], {})
    kept = sorted(path.name for path in directory.iterdir())
    assert kept == sorted([f"{keys[0]}.json", f"{keys[3]}.json", f"{keys[4]}.json",
                           "operator-notes.txt", "a" * 64 + ".json.bak"])


_RECORDS = st.dictionaries(
    st.one_of(st.from_regex(r"[0-9a-f]{64}", fullmatch=True), st.text(max_size=70)),
    st.one_of(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4),
              st.lists(st.text(max_size=5), max_size=2), st.integers(), st.none()),
    max_size=6,
)


@given(records=st.one_of(_RECORDS, st.lists(st.integers(), max_size=3), st.text(max_size=5)),
       most=st.integers(min_value=0, max_value=6))
def test_records_from_rank_0_are_admitted_whole_or_refused_naming_them(records: object, most: int) -> None:
    """What a commit's stdin says rank 0 checked: every run recorded and given back as sent,
    or nothing recorded and an InputError naming the place and what was expected."""
    import tempfile

    from sparkflake.core.errors import InputError

    with tempfile.TemporaryDirectory() as scratch:
        store = VerifiedPrefixStore(Path(scratch) / "verified")
        valid = isinstance(records, dict) and len(records) <= most and all(
            len(key) == 64 and all(c in "0123456789abcdef" for c in key) and isinstance(symlinks, dict)
            for key, symlinks in records.items())
        if not valid:
            with pytest.raises(InputError, match=r"^commit \(stdin\): verified_prefixes: expected "):
                store.admit(records, "commit (stdin): verified_prefixes", most)
            assert not (Path(scratch) / "verified").exists()
            return
        assert isinstance(records, dict)
        assert store.admit(records, "commit (stdin): verified_prefixes", most) == len(records)
        assert store.records_of(list(records)) == records
        assert store.records_of(["f" * 64]) == ({"f" * 64: records["f" * 64]} if "f" * 64 in records else {})


def test_rank_0s_check_gives_the_records_an_import_then_reads_no_layer_by(tmp_path: Path) -> None:
    from sparkflake.distribute import engine

    layout = hostile_layout(tmp_path / "layout", [BASE, SAFE_TOP])
    rank0 = VerifiedPrefixStore(tmp_path / "rank0")
    checked, keys = engine.check_layout(str(layout), rank0)
    assert checked == 2 and len(keys) == 2
    records = rank0.records_of(keys)
    assert set(records) == set(keys) and records[keys[0]] == {"etc/cron": "/etc/cron.d"}
    # another rank takes them: its check of the same bytes reads no layer, and rank 0's again neither
    rank1 = VerifiedPrefixStore(tmp_path / "rank1")
    rank1.admit(json.loads(json.dumps(records)), "commit (stdin): verified_prefixes", 2)
    for blob in _layer_blobs(layout):
        _damage(blob)  # not read: a read would refuse the digest
    assert verify_image(open_image(layout), verified=rank1).layers_known == 2
    assert engine.check_layout(str(layout), rank0)[0] == 0
