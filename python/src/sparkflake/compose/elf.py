"""ELF headers read as data: machine, class, and the DT_SONAME of shared objects.

Nothing here executes the file; the image's target binaries are never run on the build
machine. Only the ELF header, the section headers and the dynamic section are read.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..core.elf_machines import EM_AARCH64, EM_X86_64, MACHINE_NAMES
from ..core.errors import CheckFailed

ELF_MAGIC = b"\x7fELF"

PLATFORM_MACHINE = {"linux/arm64": EM_AARCH64, "linux/amd64": EM_X86_64}

_SHT_NOBITS = 8
_SHT_DYNAMIC = 6
_DT_NULL = 0
_DT_SONAME = 14


@dataclass(frozen=True)
class ElfHeader:
    machine: int
    elf_class: int  # 1 = 32-bit, 2 = 64-bit
    little_endian: bool
    elf_type: int  # 2 = executable, 3 = shared object / PIE

    @property
    def machine_name(self) -> str:
        return MACHINE_NAMES.get(self.machine, f"e_machine={self.machine}")


@dataclass(frozen=True)
class ElfFile:
    """An ELF file inside a tree: its path relative to the tree root and its header."""

    path: str
    size: int
    sha256: str
    machine: int

    @property
    def machine_name(self) -> str:
        return MACHINE_NAMES.get(self.machine, f"e_machine={self.machine}")


def parse_header(prefix: bytes) -> ElfHeader | None:
    """The ELF header from a file's first 20 bytes, or None if it is not ELF."""
    if len(prefix) < 20 or not prefix.startswith(ELF_MAGIC):
        return None
    elf_class = prefix[4]
    encoding = prefix[5]
    if elf_class not in (1, 2) or encoding not in (1, 2):
        return None
    little = encoding == 1
    elf_type, machine = struct.unpack("<HH" if little else ">HH", prefix[16:20])
    return ElfHeader(machine=machine, elf_class=elf_class, little_endian=little, elf_type=elf_type)


def read_header(path: str | os.PathLike[str]) -> ElfHeader | None:
    with open(path, "rb") as handle:
        return parse_header(handle.read(20))


@dataclass(frozen=True)
class _SectionTable:
    header: ElfHeader
    ident: bytes  # the first 64 bytes of the file
    sections: list[tuple[int, ...]]  # each the raw Elf_Shdr fields
    dyn_fmt: str  # struct format of one Elf_Dyn entry


def _read_within(handle: BinaryIO, offset: int, size: int) -> bytes | None:
    """The ``size`` bytes at ``offset``, or None when they do not all lie inside the file.
    Offsets and sizes come from the file itself: a hostile one may name a place past the
    end, past what ``seek`` accepts (2**63 and more), or a size far beyond the file."""
    if offset + size > os.fstat(handle.fileno()).st_size:
        return None
    handle.seek(offset)
    data = handle.read(size)
    return data if len(data) == size else None


def _section_table(handle: BinaryIO) -> _SectionTable | None:  # a binary file at offset 0
    """The ELF header and section headers of an open file; None if not ELF or none."""
    ident = handle.read(64)
    header = parse_header(ident)
    if header is None:
        return None
    end = "<" if header.little_endian else ">"
    if header.elf_class == 2:
        if len(ident) < 64:
            return None
        shoff, = struct.unpack(end + "Q", ident[40:48])
        shentsize, shnum = struct.unpack(end + "HH", ident[58:62])
        sh_fmt, dyn_fmt = end + "IIQQQQIIQQ", end + "qQ"
    else:
        if len(ident) < 52:
            return None
        shoff, = struct.unpack(end + "I", ident[32:36])
        shentsize, shnum = struct.unpack(end + "HH", ident[46:50])
        sh_fmt, dyn_fmt = end + "IIIIIIIIII", end + "iI"
    if shoff == 0 or shnum == 0 or shentsize < struct.calcsize(sh_fmt) or shnum > 65535:
        return None
    table = _read_within(handle, shoff, shentsize * shnum)
    if table is None:
        return None
    sections = [struct.unpack_from(sh_fmt, table, index * shentsize) for index in range(shnum)]
    return _SectionTable(header, ident, sections, dyn_fmt)


def read_soname(path: str | os.PathLike[str]) -> str | None:
    """DT_SONAME of a shared object, read from its section headers; None if absent."""
    with open(path, "rb") as handle:
        table = _section_table(handle)
        if table is None:
            return None
        sections, dyn_fmt = table.sections, table.dyn_fmt
        file_size = os.fstat(handle.fileno()).st_size
        shnum = len(sections)
        for section in sections:
            _name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link = section[:7]
            if sh_type != _SHT_DYNAMIC or sh_link >= shnum:
                continue
            strtab = sections[sh_link]
            # 65,536 entries: far more than any linker writes, and a bound on a hostile size
            dynamic = _read_within(handle, sh_offset, min(sh_size, 1 << 20))
            if dynamic is None:
                continue
            entry_size = struct.calcsize(dyn_fmt)
            for offset in range(0, len(dynamic) - entry_size + 1, entry_size):
                tag, value = struct.unpack_from(dyn_fmt, dynamic, offset)
                if tag == _DT_NULL:
                    break
                if tag == _DT_SONAME:
                    name_at = strtab[4] + value
                    if name_at >= file_size:  # past the end (and perhaps past what seek takes)
                        return None
                    handle.seek(name_at)
                    return handle.read(4096).split(b"\0", 1)[0].decode("utf-8", "replace")
    return None


def read_sections(path: str | os.PathLike[str], wanted: tuple[str, ...]) -> list[tuple[str, int, int]] | None:
    """(name, file offset, size) of the sections named in ``wanted`` (SHT_NOBITS sections
    hold no bytes and are left out); None when ``path`` is not ELF or has no section table."""
    with open(path, "rb") as handle:
        table = _section_table(handle)
        if table is None:
            return None
        header, ident, sections = table.header, table.ident, table.sections
        file_size = os.fstat(handle.fileno()).st_size
        names_index = struct.unpack("<H" if header.little_endian else ">H", ident[62:64] if header.elf_class == 2 else ident[50:52])[0]
        if names_index >= len(sections):
            return None
        names_offset, names_size = sections[names_index][4], sections[names_index][5]
        names = _read_within(handle, names_offset, min(names_size, 1 << 24))
        if names is None:
            return None
        chosen = []
        for section in sections:
            name_at, sh_type, _flags, _addr, sh_offset, sh_size = section[:6]
            name = names[name_at:].split(b"\0", 1)[0].decode("ascii", "replace")
            if name in wanted and sh_type != _SHT_NOBITS and sh_offset + sh_size <= file_size:
                chosen.append((name, sh_offset, sh_size))
        return chosen


def iter_elf_files(root: str | os.PathLike[str], *, with_sha256: bool = False) -> Iterator[ElfFile]:
    """Every regular ELF file under ``root`` (symlinks not followed), sorted by path.

    ``with_sha256`` also hashes each ELF file (the retained-native manifest needs it);
    otherwise ``sha256`` is the empty string.
    """
    yield from _walk_elf(os.fspath(root), "", with_sha256)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:  # as os.walk: a symlink loop or a dangling link counts as a file
        return entry.is_dir()
    except OSError:
        return False


def _walk_elf(directory: str, prefix: str, with_sha256: bool) -> Iterator[ElfFile]:
    # os.walk's order (a directory's files sorted, then its subdirectories sorted, depth
    # first; symlinks to directories not followed) with one scandir and one pread a file.
    with os.scandir(directory) as listing:
        entries = list(listing)
    kinds = {e.name: _is_dir(e) for e in entries}
    files = sorted((e for e in entries if not kinds[e.name]), key=lambda e: e.name)
    subdirectories = sorted((e for e in entries if kinds[e.name]), key=lambda e: e.name)
    for entry in files:
        status = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(status.st_mode) or status.st_size < 20:
            continue
        descriptor = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            header = parse_header(os.pread(descriptor, 20, 0))
            if header is None:
                continue
            digest = ""
            if with_sha256:
                hasher = hashlib.sha256()
                offset = 0
                while chunk := os.pread(descriptor, 1 << 20, offset):
                    hasher.update(chunk)
                    offset += len(chunk)
                digest = hasher.hexdigest()
        finally:
            os.close(descriptor)
        yield ElfFile(path=prefix + entry.name, size=status.st_size, sha256=digest, machine=header.machine)
    for entry in subdirectories:
        if not entry.is_symlink():
            yield from _walk_elf(entry.path, prefix + entry.name + "/", with_sha256)


def elf_machines(root: str | os.PathLike[str]) -> list[list[Any]]:
    """``[path, machine]`` of every regular ELF file under ``root``, sorted by path: what
    the architecture check needs, small enough to keep beside a cached tree."""
    return [[elf.path, elf.machine] for elf in iter_elf_files(root)]


def check_machine(
    root: str | os.PathLike[str],
    platform: str = "linux/arm64",
    machines: list[list[Any]] | None = None,
) -> int:
    """Refuse any ELF file under ``root`` whose machine is not the platform's.

    ``machines``: the tree's ``elf_machines`` if already known (a validated cached tree);
    else the tree is read. Returns the number of ELF files checked. The error names every
    mismatching file.
    """
    expected = PLATFORM_MACHINE.get(platform)
    if expected is None:
        raise CheckFailed(f"no ELF machine known for platform {platform!r}", check_id="elf-machine")
    if machines is None:
        machines = elf_machines(root)
    mismatches = [
        f"{path} ({MACHINE_NAMES.get(machine, f'e_machine={machine}')})"
        for path, machine in machines
        if machine != expected
    ]
    if mismatches:
        shown = ", ".join(mismatches[:20])
        more = f" and {len(mismatches) - 20} more" if len(mismatches) > 20 else ""
        raise CheckFailed(
            f"{root}: {len(mismatches)} ELF file(s) are not {MACHINE_NAMES[expected]} "
            f"for {platform}: {shown}{more}",
            check_id="elf-machine",
        )
    return len(machines)
