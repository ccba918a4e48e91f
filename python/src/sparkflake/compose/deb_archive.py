"""Reading a .deb without dpkg: the ar container, the control member, the data member.

A .deb is an ar archive of ``debian-binary`` ("2.0"), ``control.tar.*`` and ``data.tar.*``
(compressed with xz, zstd, gzip or not at all). Members are streamed: the data tar is read
once, from the file, through the decompressor.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import os
import re
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

from ..core.errors import CheckFailed, InputError
from ..lock.debian_packages import parse_paragraphs

AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60
_AR_SIZE = re.compile(rb"[0-9]{1,10}")
# The most read of control, md5sums or conffiles (each into memory): room for some 600,000
# md5sums lines of 100 bytes; what decompresses past it is refused, not read to the end.
CONTROL_TEXT_LIMIT = 64 << 20

# Errors a damaged member raises while it is decompressed or untarred.
ARCHIVE_ERRORS = (tarfile.TarError, lzma.LZMAError, zlib.error, EOFError, zstandard.ZstdError, gzip.BadGzipFile, OSError)


@dataclass(frozen=True)
class ArMember:
    name: str
    offset: int
    size: int


class _Slice(io.RawIOBase):
    """A read-only window [offset, offset+size) of a file object."""

    def __init__(self, handle: BinaryIO, offset: int, size: int) -> None:
        self._handle = handle
        self._start = offset
        self._remaining = size
        self._position = offset

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]  # io.BufferedReader hands it only these
        if self._remaining <= 0:
            return 0
        count = min(len(buffer), self._remaining)
        self._handle.seek(self._position)
        chunk = self._handle.read(count)
        buffer[: len(chunk)] = chunk
        self._position += len(chunk)
        self._remaining -= len(chunk)
        if len(chunk) < count:
            raise EOFError("ar member shorter than its header says")
        return len(chunk)


def ar_members(handle: BinaryIO, *, source: str) -> list[ArMember]:
    """The members of an ar archive, each lying wholly inside the file (each header is 60
    bytes of it, so a file of N bytes has fewer than N / 60 members)."""
    file_size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if handle.read(8) != AR_MAGIC:
        raise CheckFailed(f"{source}: not a .deb (no ar magic)", check_id="deb-archive")
    members: list[ArMember] = []
    offset = 8
    while True:
        handle.seek(offset)
        header = handle.read(_AR_HEADER)
        if not header:
            return members
        if len(header) < _AR_HEADER or header[58:60] != b"`\n":
            raise CheckFailed(f"{source}: damaged ar header at byte {offset}", check_id="deb-archive")
        name = header[0:16].decode("ascii", "replace").strip().rstrip("/")
        # ar's size field: decimal digits, space-padded to 10 bytes. int() alone would take
        # "-60" (a member that steps back onto its own header: a loop without end), "+1" or "1_0".
        size_field = header[48:58].strip(b" ")
        if not _AR_SIZE.fullmatch(size_field):
            raise CheckFailed(
                f"{source}: damaged ar member size at byte {offset + 48}: expected decimal digits, got {size_field!r}",
                check_id="deb-archive",
            )
        size = int(size_field)
        if offset + _AR_HEADER + size > file_size:
            raise CheckFailed(
                f"{source}: ar member {name!r} at byte {offset} says {size} bytes, past the end of the file ({file_size} bytes)",
                check_id="deb-archive",
            )
        members.append(ArMember(name, offset + _AR_HEADER, size))
        offset += _AR_HEADER + size + (size & 1)


@contextlib.contextmanager
def open_tar_member(handle: BinaryIO, member: ArMember, *, source: str) -> Iterator[tarfile.TarFile]:
    """A streaming TarFile over a (compressed) tar member of the ar archive."""
    raw = io.BufferedReader(_Slice(handle, member.offset, member.size), buffer_size=1 << 20)
    name = member.name
    if name.endswith(".xz"):
        stream: BinaryIO = lzma.open(raw)  # type: ignore[assignment]  # a binary stream; typeshed types LZMAFile apart from BinaryIO
    elif name.endswith(".zst"):
        stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    elif name.endswith(".gz"):
        stream = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]  # likewise GzipFile
    elif name.endswith(".tar"):
        stream = raw
    else:
        raise CheckFailed(f"{source}: unsupported member compression {name!r}", check_id="deb-archive")
    with stream, tarfile.open(fileobj=stream, mode="r|") as archive:
        yield archive
        # tar stops at its end-of-archive blocks; read the compressed stream to its end so
        # the gzip CRC / xz check / zstd checksum of the whole member is verified too.
        while stream.read(1 << 20):
            pass


@dataclass(frozen=True)
class DebControl:
    fields: dict[str, str]
    md5sums: str
    conffiles: str

    @property
    def package(self) -> str:
        return self.fields.get("Package", "")

    @property
    def version(self) -> str:
        return self.fields.get("Version", "")

    @property
    def architecture(self) -> str:
        return self.fields.get("Architecture", "")


def find_member(members: list[ArMember], prefix: str, *, source: str) -> ArMember:
    for member in members:
        if member.name == prefix or member.name.startswith(prefix + "."):
            return member
    raise CheckFailed(f"{source}: no {prefix} member", check_id="deb-archive")


def read_control(path: str | os.PathLike[str]) -> DebControl:
    source = os.fspath(path)
    with open(path, "rb") as handle:
        members = ar_members(handle, source=source)
        if not members or members[0].name != "debian-binary":
            raise CheckFailed(f"{source}: first ar member is not debian-binary", check_id="deb-archive")
        member = find_member(members, "control.tar", source=source)
        texts: dict[str, str] = {}
        try:
            with open_tar_member(handle, member, source=source) as archive:
                for entry in archive:
                    name = entry.name.removeprefix("./")
                    if name in ("control", "md5sums", "conffiles") and entry.isfile():
                        extracted = archive.extractfile(entry)
                        if extracted is not None:
                            text = extracted.read(CONTROL_TEXT_LIMIT + 1)
                            if len(text) > CONTROL_TEXT_LIMIT:
                                raise CheckFailed(
                                    f"{source}: {member.name}: {name} is over {CONTROL_TEXT_LIMIT} bytes",
                                    check_id="deb-archive",
                                )
                            # md5sums names member paths, which are bytes: one that is no
                            # UTF-8 keeps them (as tarfile's names do) and still matches its member
                            texts[name] = text.decode("utf-8", "surrogateescape" if name == "md5sums" else "replace")
        except ARCHIVE_ERRORS as exc:
            raise CheckFailed(f"{source}: {member.name} is damaged: {exc}", check_id="deb-archive") from exc
    if "control" not in texts:
        raise InputError(f"{source}: control member has no control file")
    paragraphs = list(parse_paragraphs(texts["control"], source=f"{source}:control"))
    if not paragraphs:
        raise InputError(f"{source}: empty control file")
    return DebControl(paragraphs[0], texts.get("md5sums", ""), texts.get("conffiles", ""))
