"""The hand-written tar headers: read back by Python's tarfile and GNU tar, fields exact."""

from __future__ import annotations

import io
import subprocess
import tarfile

from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.oci.tar_stream import BLOCK, EntryKind, TarEntry, header_bytes, iter_tar_chunks

_SEGMENT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
    min_size=1,
    max_size=60,
).filter(lambda s: s not in (".", ".."))
_PATH = st.lists(_SEGMENT, min_size=1, max_size=6).map("/".join)


@st.composite
def _entries(draw):
    paths = draw(st.lists(_PATH, min_size=1, max_size=8, unique=True))
    entries = []
    for path in paths:
        kind = draw(st.sampled_from(["file", "dir", "symlink", "hardlink"]))
        if kind == "file":
            content = draw(st.binary(max_size=2000))
            mode = draw(st.sampled_from([0o644, 0o755, 0o600, 0o4755]))
            entries.append(TarEntry(path, EntryKind.FILE, mode, size=len(content), content=content))
        elif kind == "dir":
            entries.append(TarEntry(path, EntryKind.DIRECTORY, 0o755))
        elif kind == "symlink":
            entries.append(TarEntry(path, EntryKind.SYMLINK, 0o777, link_target=draw(_PATH)))
        else:
            entries.append(TarEntry(path, EntryKind.HARDLINK, 0o644, link_target=draw(_PATH)))
    return entries


def _stream(entries, mtime=1) -> bytes:
    return b"".join(iter_tar_chunks(entries, mtime, chunk_size=4096))


@given(entries=_entries(), mtime=st.integers(0, 8**11 - 1))
def test_tarfile_reads_back_every_field(entries, mtime):
    raw = _stream(entries, mtime)
    assert len(raw) % BLOCK == 0
    assert raw.endswith(b"\0" * 1024)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [e.path for e in entries]
        for member, entry in zip(members, entries, strict=True):
            assert member.mtime == mtime
            assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
            assert member.mode == entry.mode
            if entry.kind is EntryKind.FILE:
                assert member.isfile()
                assert tar.extractfile(member).read() == entry.content
            elif entry.kind is EntryKind.DIRECTORY:
                assert member.isdir()
            elif entry.kind is EntryKind.SYMLINK:
                assert member.issym() and member.linkname == entry.link_target
            else:
                assert member.islnk() and member.linkname == entry.link_target


@given(entries=_entries())
def test_stream_is_a_pure_function_of_entries(entries):
    assert _stream(entries) == _stream(list(entries))


def test_pax_only_where_needed():
    short = header_bytes(TarEntry("usr/bin/tool", EntryKind.FILE, 0o755, size=0, content=b""), 1)
    assert len(short) == BLOCK  # plain ustar, no PAX header
    prefix_split = "a" * 120 + "/" + "b" * 90
    split = header_bytes(TarEntry(prefix_split, EntryKind.FILE, 0o644, content=b""), 1)
    assert len(split) == BLOCK  # fits ustar prefix + name
    long = header_bytes(TarEntry("c" * 300, EntryKind.FILE, 0o644, content=b""), 1)
    assert long[156:157] == b"x"  # PAX extended header first
    long_link = header_bytes(TarEntry("l", EntryKind.SYMLINK, 0o777, link_target="/t" * 80), 1)
    assert long_link[156:157] == b"x"


def test_gnu_tar_lists_long_names_and_links(tmp_path):
    entries = [
        TarEntry("d", EntryKind.DIRECTORY, 0o755),
        TarEntry("d/" + "x" * 200, EntryKind.FILE, 0o644, size=3, content=b"abc"),
        TarEntry("d/" + "y" * 101, EntryKind.SYMLINK, 0o777, link_target="z" * 150),
        TarEntry("d/hard", EntryKind.HARDLINK, 0o644, link_target="d/" + "x" * 200),
        TarEntry("d/é", EntryKind.FILE, 0o755, size=1, content=b"1"),
    ]
    archive = tmp_path / "layer.tar"
    archive.write_bytes(_stream(entries))
    listing = subprocess.run(
        ["tar", "--numeric-owner", "-tvf", str(archive)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(listing) == 5
    assert listing[1].split()[-1] == "d/" + "x" * 200
    assert listing[2].endswith(f"d/{'y' * 101} -> {'z' * 150}")
    assert listing[3].endswith(f"d/hard link to d/{'x' * 200}")
    assert all(" 0/0 " in line for line in listing)
    extracted = tmp_path / "x"
    extracted.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(extracted)], check=True)
    assert (extracted / "d" / ("x" * 200)).read_bytes() == b"abc"
    assert (extracted / "d" / "é").stat().st_mode & 0o777 == 0o755


# bin/fuzz found 1,539 bytes grown by one, read in 512-byte chunks: the reads before the last
# took a byte more each, so the last one asked for exactly what was left and saw no growth
@example(size=1539, delta=1, chunk=512)
@example(size=512 * 3 + 3, delta=1, chunk=512)
@given(size=st.integers(1, 20_000), delta=st.integers(-5, 5), chunk=st.sampled_from([512, 4096]))
def test_host_files_that_changed_size_since_the_scan_are_refused(tmp_path_factory, size, delta, chunk):
    """The stream reads host files by their scanned size: a file that grew or shrank in
    between is refused with its path; an unchanged one streams exactly."""
    import pytest

    from sparkflake.core.errors import InputError

    path = tmp_path_factory.mktemp("grow") / "f"
    content = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path.write_bytes(content)
    entry = TarEntry("f", EntryKind.FILE, 0o644, size=size, source=str(path))
    if delta:
        path.write_bytes(content + b"x" * delta if delta > 0 else content[:delta])
    if delta == 0:
        raw = b"".join(iter_tar_chunks([entry], 1, chunk_size=chunk))
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            assert tar.extractfile("f").read() == content
        return
    with pytest.raises(InputError, match="changed size") as refused:
        b"".join(iter_tar_chunks([entry], 1, chunk_size=chunk))
    assert str(path) in str(refused.value)
