"""The .deb container read as data: ar members (hypothesis over well-formed and damaged
archives) and the control member's bounded texts."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fixtures.deadline import within_seconds
from fixtures.inputs import RawMember, ar_entry, make_raw_deb
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.compose import deb_archive
from sparkflake.compose.deb_archive import AR_MAGIC, ar_members, read_control
from sparkflake.core.errors import CheckFailed

_member_name = st.from_regex(r"[a-z][a-z0-9_.-]{0,14}", fullmatch=True)


@given(st.lists(st.tuples(_member_name, st.binary(max_size=300)), max_size=6))
def test_members_are_found_where_they_were_written(members: list[tuple[str, bytes]]) -> None:
    archive = AR_MAGIC + b"".join(ar_entry(name, content) for name, content in members)
    handle = io.BytesIO(archive)
    found = ar_members(handle, source="t.deb")
    assert [(m.name, m.size) for m in found] == [(name, len(content)) for name, content in members]
    assert [archive[m.offset : m.offset + m.size] for m in found] == [content for _name, content in members]


def _header(size_field: bytes, name: bytes = b"debian-binary") -> bytes:
    return name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"100644".ljust(8) + size_field.ljust(10) + b"`\n"


# "-60": the member steps back onto its own header, and the old int() reader looped for ever
@example(size_field=b"-60", tail=b"")
@example(size_field=b"-1", tail=b"x" * 64)
@example(size_field=b"+4", tail=b"2.0\n")
@example(size_field=b"1_0", tail=b"x" * 10)
@example(size_field=b"9999999999", tail=b"2.0\n")
@given(st.binary(max_size=10), st.binary(max_size=200))
def test_a_damaged_header_is_refused_by_name_and_never_loops(size_field: bytes, tail: bytes) -> None:
    archive = AR_MAGIC + _header(size_field) + tail
    with within_seconds(2):
        try:
            found = ar_members(io.BytesIO(archive), source="t.deb")
        except CheckFailed as refused:
            assert refused.check_id == "deb-archive"
            assert str(refused).startswith("[deb-archive] t.deb: ")
            return
    # accepted: the size was decimal digits, and every member lies inside the file
    assert size_field.strip(b" ").isdigit()
    assert all(m.offset + m.size <= len(archive) for m in found)


@pytest.mark.parametrize("size_field", [b"-60", b"+4", b"1_0", b"4x", b""])
def test_a_size_that_is_not_decimal_digits_is_named(size_field: bytes) -> None:
    archive = AR_MAGIC + _header(size_field) + b"2.0\n"
    with within_seconds(2), pytest.raises(CheckFailed) as refused:
        ar_members(io.BytesIO(archive), source="t.deb")
    assert str(refused.value) == (
        f"[deb-archive] t.deb: damaged ar member size at byte 56: expected decimal digits, got {size_field.strip()!r}"
    )


def test_a_member_longer_than_the_file_is_refused_before_it_is_read() -> None:
    archive = AR_MAGIC + _header(b"4096") + b"2.0\n"
    with pytest.raises(CheckFailed, match=r"t\.deb: ar member 'debian-binary' at byte 8 says 4096 bytes, "
                                          r"past the end of the file \(72 bytes\)"):
        ar_members(io.BytesIO(archive), source="t.deb")


def test_a_control_text_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deb = make_raw_deb(tmp_path, "libx", "1.0", [RawMember("./usr/share/doc/x", content=b"x")])
    assert read_control(deb.path).package == "libx"
    control_size = len(b"Package: libx\nVersion: 1.0\nArchitecture: arm64\n"
                       b"Maintainer: sparkflake tests <tests@example.invalid>\nDescription: raw fixture\n")
    monkeypatch.setattr(deb_archive, "CONTROL_TEXT_LIMIT", control_size - 1)
    with pytest.raises(CheckFailed, match=rf"libx_1\.0_arm64\.deb: control\.tar\.gz: control is over {control_size - 1} bytes"):
        read_control(deb.path)
    monkeypatch.setattr(deb_archive, "CONTROL_TEXT_LIMIT", control_size)
    assert read_control(deb.path).version == "1.0"
