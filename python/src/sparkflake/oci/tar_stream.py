"""A deterministic tar writer over an already ordered entry list.

Headers are written by hand (POSIX ustar, plus a PAX extended header only when a field
does not fit in ustar) so every byte is decided here, not by ``tarfile`` defaults:
- owner and group are 0 with empty user/group names (numeric owner);
- every mtime is the one ``mtime`` argument (SOURCE_DATE_EPOCH);
- no atime/ctime, no device numbers except zeros, no GNU extensions;
- the archive ends with exactly two zero blocks (no padding to a 10 KiB record), as Go's
  archive/tar writes it.
The entry order is the caller's; ``layer.py`` sorts it bytewise, parents first.
GNU tar, Go archive/tar (umoci, skopeo, podman, docker) and Python's tarfile read it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..core.direct_write import DirectWriter
from ..core.errors import InputError

BLOCK = 512
CHUNK = 1 << 20
END_OF_ARCHIVE = b"\0" * (2 * BLOCK)
_USTAR_MAX_SIZE = 0o77777777777  # 11 octal digits


class EntryKind(enum.Enum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"


_TYPEFLAGS = {
    EntryKind.FILE: b"0",
    EntryKind.HARDLINK: b"1",
    EntryKind.SYMLINK: b"2",
    EntryKind.DIRECTORY: b"5",
}


@dataclass(frozen=True)
class TarEntry:
    """One member of a layer. ``path`` is relative to the image root, without a leading
    or trailing slash. A FILE's bytes come from ``source`` (a host file) or ``content``."""

    path: str
    kind: EntryKind
    mode: int
    size: int = 0
    link_target: str = ""
    source: str | None = None
    content: bytes | None = None


def encode_name(name: str, *, what: str = "path") -> bytes:
    """UTF-8 bytes of a name; names that are not valid UTF-8 cannot be stored in a PAX
    header (and would not round-trip through Go tools), so they are refused."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raw = os.fsencode(name)
        raise InputError(
            f"{what} {raw!r} is not valid UTF-8 and cannot be stored in an OCI layer"
        ) from exc
    if b"\0" in encoded:
        raise InputError(f"{what} {name!r} contains a NUL byte")
    return encoded


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def _pax_record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length += 1
    return str(length).encode() + body


def _split_ustar_name(name: bytes) -> tuple[bytes, bytes] | None:
    """(prefix, name) such that prefix + "/" + name == name, or None if impossible."""
    if len(name) <= 100:
        return b"", name
    if len(name) > 256:
        return None
    # The split point must be a slash with at most 155 bytes before and 100 after.
    for index in range(min(len(name) - 1, 155), 0, -1):
        if name[index : index + 1] == b"/" and len(name) - index - 1 <= 100:
            return name[:index], name[index + 1 :]
    return None


def _ustar_block(
    split_name: tuple[bytes, bytes], typeflag: bytes, mode: int, size: int, mtime: int, linkname: bytes
) -> bytes:
    """One ustar header block; ``split_name``: (prefix, name), the two fields a path fills."""
    prefix, name = split_name
    header = bytearray(BLOCK)
    header[0:100] = name.ljust(100, b"\0")
    header[100:108] = _octal(mode, 8)
    header[108:116] = _octal(0, 8)
    header[116:124] = _octal(0, 8)
    header[124:136] = _octal(size, 12)
    header[136:148] = _octal(mtime, 12)
    header[148:156] = b" " * 8
    header[156:157] = typeflag
    header[157:257] = linkname.ljust(100, b"\0")
    header[257:263] = b"ustar\0"
    header[263:265] = b"00"
    header[329:337] = _octal(0, 8)
    header[337:345] = _octal(0, 8)
    header[345:500] = prefix.ljust(155, b"\0")
    checksum = sum(header)
    header[148:156] = b"%06o\0 " % checksum
    return bytes(header)


def header_bytes(entry: TarEntry, mtime: int) -> bytes:
    """The header blocks of one entry: a PAX header first only if a field overflows."""
    name = encode_name(entry.path)
    if entry.kind is EntryKind.DIRECTORY:
        name += b"/"
    linkname = b""
    if entry.kind in (EntryKind.SYMLINK, EntryKind.HARDLINK):
        linkname = encode_name(entry.link_target, what=f"link target of {entry.path}")
    size = entry.size if entry.kind is EntryKind.FILE else 0

    pax = b""
    split = _split_ustar_name(name)
    if split is None:
        pax += _pax_record(b"path", name)
        # Truncated ustar name for readers that ignore PAX; the PAX path overrides it.
        split = (b"", name[:100])
    if len(linkname) > 100:
        pax += _pax_record(b"linkpath", linkname)
        linkname = linkname[:100]
    if size > _USTAR_MAX_SIZE:
        pax += _pax_record(b"size", str(size).encode())
    blocks = b""
    if pax:
        pax_name = (b"PaxHeaders/" + os.path.basename(name.rstrip(b"/")))[:100]
        blocks += _ustar_block((b"", pax_name), b"x", 0o644, len(pax), mtime, b"")
        blocks += pax + b"\0" * (-len(pax) % BLOCK)
    ustar_size = 0 if size > _USTAR_MAX_SIZE else size
    blocks += _ustar_block(split, _TYPEFLAGS[entry.kind], entry.mode, ustar_size, mtime, linkname)
    return blocks


def iter_tar_chunks(
    entries: Iterable[TarEntry], mtime: int, chunk_size: int = CHUNK
) -> Iterator[bytes | bytearray]:
    """Yield the tar stream in chunks of about ``chunk_size`` bytes.

    Small members are batched into one buffer; large files are read and yielded in
    ``chunk_size`` pieces so memory stays bounded whatever the file size. A yielded
    bytearray is never touched again by this generator, so a consumer may keep it
    without copying it.
    """
    pending = bytearray()
    for entry in entries:
        pending += header_bytes(entry, mtime)
        if entry.kind is not EntryKind.FILE:
            continue
        if entry.content is not None:
            pending += entry.content
        elif entry.size:
            yield from _file_chunks(entry, pending, chunk_size)
            pending = bytearray()
        pending += b"\0" * (-entry.size % BLOCK)
        if len(pending) >= chunk_size:
            yield pending
            pending = bytearray()
    pending += END_OF_ARCHIVE
    yield pending


def _file_chunks(
    entry: TarEntry, pending: bytearray, chunk_size: int
) -> Iterator[bytes | bytearray]:
    assert entry.source is not None
    remaining = entry.size

    def request(wanted: int) -> int:
        # The read that reaches the scanned end asks for one byte more, so a file that grew
        # since it was scanned shows without an extra read; the reads before it ask for
        # exactly ``wanted`` (a byte more there would be the file's own, and the last read
        # then asks for no more than is left: fuzzing found 1,539 bytes grown by one, unseen).
        return wanted if wanted < remaining else remaining + 1

    try:
        with open(entry.source, "rb", buffering=0) as handle:
            first = handle.read(request(max(chunk_size - len(pending), BLOCK)))
            if len(first) > remaining:
                remaining = -1
            else:
                remaining -= len(first)
                pending += first
                yield pending  # the caller starts a new buffer after this
            while remaining > 0:
                piece = handle.read(request(chunk_size))
                if not piece:
                    break
                if len(piece) > remaining:
                    remaining = -1
                    break
                remaining -= len(piece)
                yield piece
    except OSError as exc:
        raise InputError(f"{entry.source}: cannot read: {exc.strerror}") from exc
    if remaining != 0:
        raise InputError(
            f"{entry.source}: file changed size while it was being archived "
            f"(expected {entry.size} bytes)"
        )


def write_tar_file(entries: Iterable[TarEntry], sink: DirectWriter, mtime: int, *, terminate: bool = True) -> int:
    """Write the same stream as ``iter_tar_chunks`` into ``sink`` (see
    ``atomic_write.atomic_stream``), host file contents read straight into its buffers.
    Used for archives of already compressed blobs; returns the bytes written.
    ``terminate=False`` leaves out the end-of-archive blocks (more members follow)."""
    written = 0
    for entry in entries:
        header = header_bytes(entry, mtime)
        sink.write(header)
        written += len(header)
        if entry.kind is not EntryKind.FILE:
            continue
        if entry.content is not None:
            sink.write(entry.content)
        elif entry.size:
            _copy_into(entry, sink)
        padding = b"\0" * (-entry.size % BLOCK)
        sink.write(padding)
        written += entry.size + len(padding)
    if not terminate:
        return written
    sink.write(END_OF_ARCHIVE)
    return written + len(END_OF_ARCHIVE)


def _copy_into(entry: TarEntry, sink: DirectWriter) -> None:
    assert entry.source is not None
    try:
        with open(entry.source, "rb", buffering=0) as source:
            copied = sink.copy_from(source.fileno(), entry.size)
            grew = copied == entry.size and source.read(1) != b""
    except OSError as exc:
        raise InputError(f"{entry.source}: cannot read: {exc.strerror}") from exc
    if copied != entry.size or grew:
        raise InputError(
            f"{entry.source}: file changed size while it was being archived "
            f"(expected {entry.size} bytes)"
        )
