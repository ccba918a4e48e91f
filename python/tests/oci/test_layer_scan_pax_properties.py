"""PAX extended headers in the layer scanner (``oci.layer_scan``): the records a PAX header
holds are read as Python's ``tarfile`` writes and reads them (POSIX.1-2001 ``"%d %s=%s\\n"``,
the length counting itself), any payload reads without raising, and a scanned PAX archive
names its ELF members as ``tarfile`` names them, long names and chunk cuts anywhere."""

from __future__ import annotations

import io
import tarfile
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.oci.layer_scan import SPECIAL_HEADER_LIMIT, TarElfScanner, _pax_records

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


def _special_header(kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo("././@LongLink" if kind in (b"L", b"K") else "pax")
    info.type, info.size = kind, size
    return info.tobuf(tarfile.USTAR_FORMAT)


_LIMIT = SPECIAL_HEADER_LIMIT
_special_sizes = st.one_of(st.integers(0, 4096), st.integers(_LIMIT - 1024, _LIMIT + 1024),
                           st.integers(_LIMIT + 1, (8 << 30) - 1))


@given(st.sampled_from([b"x", b"g", b"L", b"K"]), _special_sizes, st.integers(1, 1 << 16))
def test_a_special_header_is_refused_as_go_refuses_it_past_one_mib(kind: bytes, size: int, piece: int) -> None:
    """Go's archive/tar reads a PAX or GNU long-name/link header of at most 1 MiB and
    refuses a longer one (ErrFieldTooLong): so does the scanner, at its header block,
    before any of the claimed payload arrives."""
    scanner = TarElfScanner()
    header = _special_header(kind, size)
    for start in range(0, len(header), piece):
        scanner.feed(header[start : start + piece])
    refused = scanner.error is not None
    assert refused == (size > _LIMIT), scanner.error
    if refused:
        assert f"header of {size} bytes" in (scanner.error or "")


def test_a_pax_header_of_exactly_the_limit_is_read_and_names_its_member() -> None:
    name = "a/" * ((_LIMIT - 200) // 2) + "elf"
    record = _pax_record("path", name)
    payload = record + _pax_record("SPARK.pad", "p" * (_LIMIT - len(record) - 40))
    payload += _pax_record("SPARK.q", "q" * (_LIMIT - len(payload) - len(_pax_record("SPARK.q", ""))))
    assert len(payload) == _LIMIT
    member = tarfile.TarInfo("short")
    member.size = len(_ELF)
    stream = (_special_header(b"x", len(payload)) + payload + bytes(-len(payload) % 512)
              + member.tobuf(tarfile.USTAR_FORMAT) + _ELF + bytes(-len(_ELF) % 512) + bytes(1024))
    scanner = TarElfScanner()
    scanner.feed(stream)
    assert scanner.error is None
    assert [(elf.path, elf.machine) for elf in scanner.elf_files] == [(name, 183)]


def test_a_huge_special_header_costs_no_memory_for_its_payload() -> None:
    """A PAX header claiming 256 MiB (a 65 KB zstd layer inflates to it) was gathered whole:
    the audit of one of 1 GiB peaked at 2 GB. Its payload is now counted, never held."""
    claimed = 256 << 20
    scanner = TarElfScanner()
    zeros = bytes(1 << 20)
    tracemalloc.start()
    try:
        scanner.feed(_special_header(b"x", claimed))
        for _ in range(claimed >> 20):
            scanner.feed(zeros)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"scanning a {claimed >> 20} MiB PAX header held {peak >> 20} MiB"
    assert scanner.error is not None
