"""PAX extended headers in the layer scanner (``oci.layer_scan``): the records a PAX header
holds are read as Python's ``tarfile`` writes and reads them (POSIX.1-2001 ``"%d %s=%s\\n"``,
the length counting itself), any payload reads without raising, and a scanned PAX archive
names its ELF members as ``tarfile`` names them, long names and chunk cuts anywhere."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.oci.layer_scan import TarElfScanner, _pax_records

pytestmark = pytest.mark.oci

# keys of our own namespace (tarfile gives path, size, uid... a meaning of its own); no '='
# (the record's separator) and no NUL
_keys = st.from_regex(r"SPARK\.[A-Za-z0-9_.]{1,12}", fullmatch=True)
_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_headers = st.dictionaries(_keys, _values, max_size=6)


def _pax_record(key: str, value: str) -> bytes:
    """One record as the spec (and tarfile._create_pax_generic_header) spells it."""
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length += 1
    return str(length).encode() + body


def _first_payload(archive: bytes) -> bytes:
    """The data of the first member (the PAX header tarfile writes before its member)."""
    header = archive[:512]
    assert header[156:157] == b"x"
    size = int(header[124:136].rstrip(b"\x00 "), 8)
    return archive[512 : 512 + size]


@given(_headers)
def test_records_are_read_as_tarfile_writes_them(headers: dict[str, str]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("member")
        info.pax_headers = dict(headers)
        archive.addfile(info, io.BytesIO(b""))
    if not headers:  # nothing to extend: tarfile writes a plain ustar header
        assert buffer.getvalue()[156:157] == b"0"
        return
    records = _pax_records(_first_payload(buffer.getvalue()))
    assert dict(records) == headers
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as archive:  # and tarfile reads back what the scanner read
        assert {k: v for k, v in archive.getmembers()[0].pax_headers.items() if k.startswith("SPARK.")} == dict(records)


@given(st.lists(st.tuples(_keys, _values), max_size=6))
def test_records_keep_their_order_and_duplicates(pairs: list[tuple[str, str]]) -> None:
    payload = b"".join(_pax_record(key, value) for key, value in pairs)
    assert _pax_records(payload) == pairs


@given(st.binary(max_size=200))
def test_any_payload_reads_without_raising(payload: bytes) -> None:
    records = _pax_records(payload)
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in records)
    assert len(records) <= len(payload) // 2  # each record takes at least "N " of the payload


# past ustar's 100 bytes of name (and 155 of prefix) or not ASCII: tarfile puts the name in a
# PAX header; short ASCII names stay in the ustar header
_segments = st.text("abcdéü-_", min_size=1, max_size=60)
_long_names = st.lists(st.lists(_segments, min_size=1, max_size=6).map("/".join), min_size=1, max_size=3, unique=True)
_ELF = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little") + bytes(44)  # EM_AARCH64


@given(_long_names, st.lists(st.integers(0, 1 << 13), max_size=5))
def test_a_pax_archive_names_its_elf_members_as_tarfile_does(names: list[str], cuts: list[int]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(_ELF)
            archive.addfile(info, io.BytesIO(_ELF))
    stream = buffer.getvalue()
    scanner = TarElfScanner()
    start = 0
    for cut in sorted({min(cut, len(stream)) for cut in cuts}) + [len(stream)]:
        scanner.feed(stream[start:cut])
        start = cut
    assert scanner.error is None
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as archive:
        assert archive.getnames() == names
    assert [(member.path, member.machine) for member in scanner.elf_files] == [(name, 183) for name in names]
