"""The layer scanner's record of every tar member (``TarElfScanner(record_members=True)``,
what ``receipt verify`` computes the merged filesystem from in the one pass that verifies
a layer): for any archive ``tarfile`` writes (ustar, GNU or PAX headers, long names, file
sizes around the 512-byte blocks, directories, links, old-style regular entries named as
directories) cut into chunks anywhere, the members recorded are the ones ``tarfile`` reads,
in order, each regular file with the sha256 and size of the content ``tarfile`` extracts;
and recording changes nothing else the scanner reports."""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.oci.layer_scan import TarElfScanner, TarMember

pytestmark = pytest.mark.oci

_ELF = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little") + bytes(44)  # EM_AARCH64
_segments = st.sampled_from(["a", "b", ".c", "é", "d" * 60, ".wh.a", ".wh..wh..opq"])
_names = st.lists(_segments, min_size=1, max_size=4).map("/".join)
_contents = st.one_of(
    st.integers(0, 1600).map(lambda size: bytes(range(256)) * (size // 256) + bytes(size % 256)),
    st.binary(max_size=700),
    st.just(_ELF),
)
_members = st.lists(
    st.tuples(st.sampled_from(["file", "dir", "symlink", "hardlink", "fifo", "old-style dir"]),
              st.sampled_from(["", "./"]), _names, _contents),
    max_size=8,
)
_formats = st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])


def _archive(members: list[tuple[str, str, str, bytes]], tar_format: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for kind, prefix, name, content in members:
            info = tarfile.TarInfo(prefix + name)
            info.mtime = 1
            if kind == "file":
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
                continue
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = "a"
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            else:  # a regular type flag of tar before POSIX ('\0') on a name ending in '/'
                # (short: past a header's 100 bytes tarfile looks for the '/' in the cut name,
                # Go's archive/tar and the scanner in the whole one)
                info.type, info.name = tarfile.AREGTYPE, f"{prefix}{name[:40]}/".encode("ascii", "replace").decode()
            archive.addfile(info)
    return buffer.getvalue()


def _read_by_tarfile(stream: bytes) -> list[TarMember]:
    members = []
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r|") as archive:
        for member in archive:
            path = posixpath.normpath(member.name)
            if not member.isfile():
                members.append(TarMember(path, None, 0))
                continue
            extracted = archive.extractfile(member)
            assert extracted is not None
            members.append(TarMember(path, hashlib.sha256(extracted.read()).hexdigest(), member.size))
    return members


def _scanned(stream: bytes, cuts: list[int], record: bool) -> TarElfScanner:
    scanner = TarElfScanner(capture_paths=frozenset({"a", "a/b"}), record_members=record)
    edges = [0, *sorted(cut % (len(stream) + 1) for cut in cuts), len(stream)]
    for start, end in zip(edges, edges[1:], strict=False):
        scanner.feed(stream[start:end])
    return scanner


@given(members=_members, tar_format=_formats, cuts=st.lists(st.integers(0, 1 << 16), max_size=12))
@example(members=[("old-style dir", "", "a", b""), ("file", "./", "a/b", b"x" * 512)],
         tar_format=tarfile.PAX_FORMAT, cuts=[511, 513, 1024]).via("a '\\0' entry named 'a/' is a directory")
@example(members=[("file", "", "d" * 60 + "/" + "d" * 60, _ELF)], tar_format=tarfile.GNU_FORMAT,
         cuts=[1, 700]).via("a GNU long name, the content cut across chunks")
def test_any_chunking_records_the_members_tarfile_reads(members, tar_format, cuts) -> None:
    stream = _archive(members, tar_format)
    recorded = _scanned(stream, cuts, record=True)
    assert recorded.error is None
    assert recorded.recorded == _read_by_tarfile(stream)
    plain = _scanned(stream, cuts, record=False)
    assert plain.recorded == []
    assert (recorded.elf_files, recorded.captured_files, recorded.members, recorded.unsafe) == (
        plain.elf_files, plain.captured_files, plain.members, plain.unsafe)
