"""The fan-out agent's small encodings: ``agent_protocol.emit`` writes one line of
canonical JSON (sorted keys, compact, UTF-8) that the relay reads back whole
(``relay._read_json_line``); a receiver's lock record (``files.lock_record``) names its pid
(``files.record_pid``) and its copy (``files.made_by_receiver``); any other record gives a
pid only for a first line of ASCII digits, never an exception."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.distribute.agent_protocol import emit
from sparkflake.distribute.files import lock_path, lock_record, made_by_receiver, record_pid
from sparkflake.distribute.relay import _read_json_line

pytestmark = pytest.mark.distribute

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=10)


@given(st.dictionaries(st.text(max_size=8), _json, max_size=4))
def test_an_emitted_line_is_canonical_json_the_relay_reads_back(document) -> None:
    out = io.StringIO()
    saved, sys.stdout = sys.stdout, out
    try:
        emit(document)
    finally:
        sys.stdout = saved
    line = out.getvalue()
    assert line.endswith("\n") and "\n" not in line[:-1]  # one line, whatever the strings hold
    assert line[:-1] == json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert _read_json_line(io.BytesIO(line.encode())) == document


_file_names = st.text(st.characters(blacklist_characters="/\0\n", blacklist_categories=("Cs",)), min_size=1, max_size=20)


@given(st.integers(1, 1 << 22), _file_names)
def test_a_lock_record_names_its_pid_and_its_copy(tmp_path_factory, pid, name) -> None:
    final = tmp_path_factory.mktemp("copy") / name
    record = lock_record(final, pid)
    assert record_pid(record) == pid
    lock = lock_path(final)
    lock.write_bytes(record)
    assert made_by_receiver(lock)
    other = lock.with_name(lock.name.replace(".lock", "x.lock"))
    other.write_bytes(record)  # the same record under another copy's lock is not that copy's
    assert not made_by_receiver(other)


@given(st.binary(max_size=60))
def test_any_record_gives_a_pid_only_for_ascii_digits(record: bytes) -> None:
    pid = record_pid(record)
    first = record.split(b"\n", 1)[0].strip()
    if pid is None:
        assert not (first and all(48 <= byte <= 57 for byte in first))
    else:
        assert first and all(48 <= byte <= 57 for byte in first) and pid == int(first.decode("ascii"))


def test_made_by_receiver_refuses_what_is_no_lock(tmp_path: Path) -> None:
    assert not made_by_receiver(tmp_path / ".x.partial")
    assert not made_by_receiver(tmp_path / ".missing.lock")
