"""One streaming pass over a layer blob: blob digest, diffID, decompressed size, and the
ELF machine of every regular file in the tar stream.

The tar scanner reads only header blocks and the first 20 bytes of each regular file
(ELF ``e_ident`` + ``e_type`` + ``e_machine``); file contents are counted, not copied.
Asked to (``record_members``), it also hashes every regular file's content as it streams
by and records each member as a ``TarMember``: what a merged filesystem is computed from
without reading the layer again (``receipt verify``).
The blob is read, hashed and decompressed by ``layer_stream.LayerStream`` (a worker
thread, so on two cores decompression overlaps with the scan).
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import BinaryIO, Literal, NamedTuple

from .entry_safety import EntrySafety, kind_of_typeflag
from .layer_stream import LayerStream

BLOCK = 512

_REGULAR_TYPES = (b"0", b"\x00", b"7")
_META_TYPES = (b"x", b"L", b"K", b"g")  # PAX and GNU headers: they describe the next member
# Go's archive/tar (maxSpecialFileSize, since CVE-2022-2879) refuses a longer PAX or GNU
# long-name header with ErrFieldTooLong; capturing one whole would let a tiny compressed
# layer claim gigabytes of memory here.
SPECIAL_HEADER_LIMIT = 1 << 20
CAPTURE_LIMIT = 4 << 20  # a file of ``capture_paths`` is kept only up to this size


@dataclass(frozen=True)
class ElfMember:
    path: str
    machine: int


class TarMember(NamedTuple):
    """A tar member as a merged filesystem sees it: its path relative to the root
    (normalized: no leading ``/`` or ``./``, no trailing ``/``), and for a regular file the
    sha256 of its content and its size; ``sha256`` None: any other type (its size 0).

    A NamedTuple, no dataclass: an image's every member is one (about 340 bytes with a
    60-character path: 34 MB for 100,000 files)."""

    path: str
    sha256: str | None
    size: int


def member_path(name: str) -> str:
    """A member name as a path relative to the image root, as the merged filesystem keys it."""
    # the scan asks this of every regular member (capture_paths): most names are already
    # normal, and these tests cost a fraction of normpath
    if name and not name.startswith((".", "/")) and not name.endswith("/") and "/." not in name and "//" not in name:
        return name
    return posixpath.normpath(name.lstrip("/") or ".")


@dataclass
class TarElfScanner:
    """Incremental tar reader that records ``ElfMember`` for every ELF regular file and,
    given an ``EntrySafety``, the first entry it refuses (``unsafe``; also, with or without
    one, data after the end-of-archive blocks). ``error``: what Go's archive/tar refuses
    (a bad size or checksum field, a header after a single zero block). With
    ``record_members``, every member in order as a ``TarMember`` (``recorded``)."""

    capture_paths: frozenset[str] = frozenset()
    safety: EntrySafety | None = None
    unsafe: str | None = None
    capture_limit: int = CAPTURE_LIMIT
    record_members: bool = False
    elf_files: list[ElfMember] = field(default_factory=list)
    captured_files: dict[str, bytes] = field(default_factory=dict)
    recorded: list[TarMember] = field(default_factory=list)
    members: int = 0
    error: str | None = None
    _header: bytearray = field(default_factory=bytearray)
    _skip: int = 0
    _capture: bytearray | None = None
    _capture_need: int = 0
    _capture_key: str | None = None  # the member's path when it is one of ``capture_paths``
    _member_type: bytes = b""
    _member_name: str = ""
    _content: hashlib._Hash | None = None  # the hash of the recorded regular file's content so far
    _content_left: int = 0  # its bytes still to come (the rest of ``_skip`` is block padding)
    _content_size: int = 0
    _next_name: str | None = None
    _next_size: int | None = None
    _next_link: str | None = None
    _ended: bool = False
    _zero_block: bool = False  # the last header block read was all zeros
    _offset: int = 0  # bytes of the tar stream before this chunk

    def feed(self, chunk: bytes) -> None:
        if self.error is not None:
            return
        view = memoryview(chunk)
        position = 0
        length = len(view)
        if self._ended:
            self._after_the_end(view, 0)
            self._offset += length
            return
        while position < length and not self._ended and self.error is None:
            if self._skip:
                take = min(self._skip, length - position)
                if self._capture is not None and len(self._capture) < self._capture_need:
                    wanted = min(self._capture_need - len(self._capture), take)
                    self._capture += view[position : position + wanted]
                if self._content is not None and self._content_left:
                    part = min(self._content_left, take)
                    self._content.update(view[position : position + part])
                    self._content_left -= part
                position += take
                self._skip -= take
                if self._skip == 0:
                    self._finish_member()
                continue
            take = min(BLOCK - len(self._header), length - position)
            self._header += view[position : position + take]
            position += take
            if len(self._header) == BLOCK:
                header = bytes(self._header)
                self._header.clear()
                self._start_member(header)
        if self._ended and position < length:
            self._after_the_end(view, position)
        self._offset += length

    def _after_the_end(self, view: memoryview, position: int) -> None:
        """What follows the two zero blocks may only be zeros (a writer's padding to its
        record size): Go's archive/tar and Python's tarfile stop at the end, but
        ``tar --ignore-zeros`` reads on and extracts what is hidden there."""
        if self.unsafe is not None:
            return
        rest = bytes(view[position:])
        if rest.strip(b"\x00"):
            at = self._offset + position + next(i for i, byte in enumerate(rest) if byte)
            self.unsafe = (
                f"data at byte {at} of the tar stream, after its end-of-archive blocks: entries there are "
                "hidden from readers that stop at the end and extracted by tar --ignore-zeros"
            )

    def _start_member(self, header: bytes) -> None:
        if header == bytes(BLOCK):
            # the end is two zero blocks; a lone one is no end (and no header)
            self._ended = self._zero_block
            self._zero_block = True
            return
        if self._zero_block:
            self.error = (f"tar member {self.members}: a header after a single zero block (the end of an archive "
                          "is two; Go's archive/tar refuses this as an invalid header)")
            return
        try:
            size = _header_size(header)
            _check_header_sum(header)
        except ValueError as exc:
            self.error = f"tar member {self.members}: {exc}"
            return
        if self._next_size is not None:
            size = self._next_size
        name = _header_name(header)
        if self._next_name is not None:
            name = self._next_name
        self._member_type = header[156:157]
        self.members += 1
        if self._member_type not in _META_TYPES:
            link = self._next_link if self._next_link is not None else _header_field(header, 157, 257)
            self._next_link = None
            if self.safety is not None and self.unsafe is None:
                reason = self.safety.check(name, kind_of_typeflag(self._member_type), link)
                if reason is not None:
                    self.unsafe = f"tar member {self.members - 1} {name!r}: {reason}"
        if self._member_type in _META_TYPES:
            if size > SPECIAL_HEADER_LIMIT:
                self.error = (f"tar member {self.members - 1}: a {self._member_type.decode('latin-1')!r} header of "
                              f"{size} bytes, more than the {SPECIAL_HEADER_LIMIT} Go's archive/tar reads "
                              "(it refuses the archive: header field too long)")
                return
            self._capture = bytearray()
            self._capture_need = size
        elif self._member_type in _REGULAR_TYPES:
            self._capture = bytearray()
            self._capture_need = min(size, 20)
            key = member_path(name) if self.capture_paths else None
            self._capture_key = key if key in self.capture_paths else None
            if self._capture_key is not None and size <= self.capture_limit:
                self._capture_need = size
            # tarfile (and Go) read an old-style regular entry whose name ends in '/' as a directory
            if self.record_members and not (self._member_type == b"\x00" and name.endswith("/")):
                self._content = hashlib.sha256()
                self._content_left = self._content_size = size
            self._next_name = None
            self._next_size = None
        else:
            self._capture = None
            self._next_name = None
            self._next_size = None
        self._member_name = name
        self._skip = (size + BLOCK - 1) // BLOCK * BLOCK
        if self._skip == 0:
            self._finish_member()

    def _finish_member(self) -> None:
        captured = bytes(self._capture) if self._capture is not None else b""
        self._capture = None
        kind = self._member_type
        if self.record_members and kind not in _META_TYPES:
            path = member_path(self._member_name)
            if self._content is None:
                self.recorded.append(TarMember(path, None, 0))
            else:
                self.recorded.append(TarMember(path, self._content.hexdigest(), self._content_size))
                self._content = None
        if kind == b"x":
            for key, value in _pax_records(captured):
                if key == "path":
                    self._next_name = value
                elif key == "linkpath":
                    self._next_link = value
                elif key == "size":
                    try:
                        self._next_size = int(value)
                    except ValueError:
                        self.error = f"tar PAX header: bad size {value!r}"
        elif kind == b"L":
            self._next_name = captured.rstrip(b"\x00").decode("utf-8", "surrogateescape")
        elif kind == b"K":
            self._next_link = captured.rstrip(b"\x00").decode("utf-8", "surrogateescape")
        elif kind in _REGULAR_TYPES and self._capture_key is not None:
            self.captured_files[self._capture_key] = captured
        if kind in _REGULAR_TYPES and captured[:4] == b"\x7fELF" and len(captured) >= 20:
            byteorder: Literal["big", "little"] = "big" if captured[5] == 2 else "little"
            machine = int.from_bytes(captured[18:20], byteorder)
            self.elf_files.append(ElfMember(self._member_name, machine))


def _header_size(header: bytes) -> int:
    field_bytes = header[124:136]
    if field_bytes[0] & 0x80:
        return int.from_bytes(field_bytes[1:], "big")
    text = field_bytes.rstrip(b"\x00 ").lstrip(b" ")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError as exc:
        raise ValueError(f"bad size field {field_bytes!r}") from exc


_HIGH_BYTES = bytes(range(128, 256))  # the bytes a signed sum counts as negative


def _check_header_sum(header: bytes) -> None:
    """The header checksum as Go's archive/tar checks it: the sum of the block's bytes with
    the checksum field read as spaces, unsigned or (old writers) signed."""
    field_bytes = header[148:156]
    text = field_bytes.rstrip(b"\x00 ").lstrip(b" ")
    try:
        recorded = int(text, 8)
    except ValueError:
        raise ValueError(f"bad checksum field {field_bytes!r}") from None
    unsigned = sum(header) - sum(field_bytes) + 8 * 0x20  # the field counted as eight spaces
    if recorded == unsigned:
        return
    blanked = header[:148] + b" " * 8 + header[156:]
    signed = unsigned - 256 * (len(blanked) - len(blanked.translate(None, _HIGH_BYTES)))
    if recorded != signed:
        raise ValueError(f"header checksum {recorded} differs from the header's sum {unsigned}; an invalid header")


def _header_field(header: bytes, start: int, end: int) -> str:
    return header[start:end].split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")


def _header_name(header: bytes) -> str:
    name = header[0:100].split(b"\x00", 1)[0]
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\x00", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax_records(payload: bytes) -> list[tuple[str, str]]:
    records = []
    position = 0
    while position < len(payload):
        space = payload.find(b" ", position)
        if space < 0:
            break
        try:
            length = int(payload[position:space])
        except ValueError:
            break
        if length <= 0:
            break
        record = payload[space + 1 : position + length - 1]
        key, _, value = record.partition(b"=")
        records.append((key.decode("utf-8", "replace"), value.decode("utf-8", "surrogateescape")))
        position += length
    return records


@dataclass(frozen=True)
class LayerScan:
    blob_digest: str
    size: int
    diff_id: str | None
    uncompressed_size: int
    compression: str
    elf_files: tuple[ElfMember, ...]
    captured_files: dict[str, bytes]
    error: str | None
    unsafe_entry: str | None = None  # the first entry ``EntrySafety`` refused
    members: tuple[TarMember, ...] = ()  # every member, with ``record_members``


ProgressCallback = Callable[[int], None]


def scan_layer(
    handle: BinaryIO,
    *,
    max_uncompressed_bytes: int | None = None,
    capture_paths: frozenset[str] = frozenset(),
    scan_tar: bool = True,
    on_bytes: ProgressCallback | None = None,
    safety: EntrySafety | None = None,
    record_members: bool = False,
) -> LayerScan:
    """Hash, decompress and scan a layer blob in one pass. With ``safety`` (one per
    image, fed its layers in order) each tar entry is also checked for what unpacking it
    would do (``entry_safety``); the first refused entry is ``unsafe_entry``. With
    ``record_members``, every member's ``TarMember`` (regular files hashed) is ``members``.

    ``error`` (blob unreadable, corrupt stream, decompressed size over the bound, broken
    tar) is reported, not raised, so the caller can still name the blob digest.
    """
    scanner = TarElfScanner(capture_paths=capture_paths, safety=safety, record_members=record_members)
    if safety is not None:
        safety.begin_layer()
    stream_error: str | None = None
    with LayerStream(handle, max_uncompressed_bytes=max_uncompressed_bytes, on_bytes=on_bytes) as stream:
        try:
            for plain in stream.chunks():
                if scan_tar:
                    scanner.feed(plain)
        except OSError as exc:
            stream_error = f"cannot read: {exc.strerror or exc}"
        except ValueError as exc:
            stream_error = str(exc)
        digests = stream.digests()
    error = stream_error or (f"tar stream: {scanner.error}" if scanner.error else None)
    return LayerScan(
        **asdict(digests),  # LayerScan's digest fields are LayerDigests'
        elf_files=tuple(scanner.elf_files),
        captured_files=dict(scanner.captured_files),
        error=error,
        unsafe_entry=scanner.unsafe,
        members=tuple(scanner.recorded),
    )
