"""``/etc/ld.so.cache`` written from the tree's shared objects, without running ldconfig.

The target's ldconfig is an arm64 binary and is never run on the build machine. This
writes the format glibc ≥ 2.32 reads (``glibc-ld.so.cache1.1``, new format only, no
extension section), laid out as glibc's ``elf/dl-cache.h`` documents it:

    header (48 bytes): magic "glibc-ld.so.cache" "1.1", nlibs u32, len_strings u32,
                       flags u8 (2 = little endian), 3 pad, extension_offset u32, 3×u32
    nlibs entries (24 bytes): flags i32, key u32, value u32, osversion u32, hwcap u64
    string table: NUL-terminated sonames and paths; offsets count from the file start

Entries are sorted the way ld.so's binary search expects (descending by glibc's
``_dl_cache_libcmp``, which compares digit runs numerically). Which directories are
scanned follows ldconfig: the ``/etc/ld.so.conf`` directories (``include`` globs
expanded), then the multiarch system directories; the first directory that has a soname
wins. Like ldconfig, a missing soname symlink is created beside the library.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic_write import write_new_file
from ..core.elf_machines import EM_AARCH64, EM_X86_64
from ..core.errors import CheckFailed
from ..oci.tree_paths import resolve_parent
from .elf import read_header, read_soname

CACHE_MAGIC = b"glibc-ld.so.cache" + b"1.1"
FLAG_ELF_LIBC6 = 0x0003
ARCH_FLAGS = {EM_AARCH64: 0x0A00, EM_X86_64: 0x0300}
MULTIARCH = {EM_AARCH64: "aarch64-linux-gnu", EM_X86_64: "x86_64-linux-gnu"}
_ENDIAN_LITTLE = 2


@dataclass(frozen=True)
class CacheEntry:
    soname: str
    path: str  # absolute path inside the image
    flags: int


def libcmp(left: str, right: str) -> int:
    """glibc's _dl_cache_libcmp: digit runs compare as numbers, the rest bytewise."""
    a, b = left.encode(), right.encode()
    i = j = 0
    while i < len(a):
        ca = a[i]
        cb = b[j] if j < len(b) else 0
        if 48 <= ca <= 57:
            if 48 <= cb <= 57:
                start = i
                while i < len(a) and 48 <= a[i] <= 57:
                    i += 1
                value_a = int(a[start:i])
                start = j
                while j < len(b) and 48 <= b[j] <= 57:
                    j += 1
                value_b = int(b[start:j])
                if value_a != value_b:
                    return value_a - value_b
            else:
                return 1
        elif 48 <= cb <= 57:
            return -1
        elif ca != cb:
            return ca - cb
        else:
            i += 1
            j += 1
    return 0 - (b[j] if j < len(b) else 0)


def _cache_order(x: CacheEntry, y: CacheEntry) -> int:
    return libcmp(y.soname, x.soname) or (x.flags - y.flags) or ((x.path > y.path) - (x.path < y.path))


def serialize_cache(entries: Sequence[CacheEntry]) -> bytes:
    """The cache file bytes for ``entries`` (sorted here; input order does not matter)."""
    ordered = sorted(entries, key=functools.cmp_to_key(_cache_order))
    header_size = 48
    entries_size = 24 * len(ordered)
    strings = bytearray()
    offsets: dict[str, int] = {}

    def intern(text: str) -> int:
        if text not in offsets:
            offsets[text] = header_size + entries_size + len(strings)
            strings.extend(text.encode() + b"\0")
        return offsets[text]

    records = bytearray()
    for entry in ordered:
        key = intern(entry.soname)
        value = intern(entry.path)
        records += struct.pack("<iIIIQ", entry.flags, key, value, 0, 0)
    header = CACHE_MAGIC + struct.pack("<IIB3xI12x", len(ordered), len(strings), _ENDIAN_LITTLE, 0)
    assert len(header) == header_size
    return bytes(header + records + strings)


# The most read of one ld.so.conf file (bookworm's three in the glm53 base: 34, 44 and 103 bytes).
CONF_FILE_LIMIT = 1 << 20
# How deep includes are followed: ld.so.conf includes ld.so.conf.d/*.conf, which include nothing.
INCLUDE_DEPTH = 8


def configured_dirs(root: Path) -> list[str]:
    """Directories from /etc/ld.so.conf (with ``include`` globs), in file order."""
    return list(_conf_directories(root, "/etc/ld.so.conf", 0, {}))


_ConfMemo = dict[tuple[str, int], dict[str, None]]


def _conf_directories(root: Path, image_file: str, depth: int, memo: _ConfMemo) -> dict[str, None]:
    """The directories ``image_file`` names, its includes' in place, each once where it first
    stands (a dict as an ordered set). What a file gives depends only on its path (relative
    includes are resolved against it) and its depth (includes stop below INCLUDE_DEPTH), so
    each pair is read once: files that include each other's glob would otherwise be read
    (files per glob) ** INCLUDE_DEPTH times, with the same answer."""
    if depth > INCLUDE_DEPTH:
        return {}
    known = memo.get((image_file, depth))
    if known is not None:
        return known
    found: dict[str, None] = {}
    memo[(image_file, depth)] = found  # filled below; an include is one level deeper, never this pair
    host = _host_path(root, image_file)
    if host is None or not host.is_file():
        return found
    with open(host, "rb") as handle:
        data = handle.read(CONF_FILE_LIMIT + 1)
    if len(data) > CONF_FILE_LIMIT:
        raise CheckFailed(f"{image_file}: over {CONF_FILE_LIMIT} bytes, not an ld.so.conf file", check_id="ld-so-cache")
    for raw in data.decode("utf-8", errors="replace").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not pattern.startswith("/"):
                pattern = os.path.join(os.path.dirname(image_file), pattern)
            directory, glob = os.path.split(pattern)
            host_dir = _host_path(root, directory)
            if host_dir is None or not host_dir.is_dir():
                continue
            for name in sorted(os.listdir(host_dir)):
                if fnmatch.fnmatch(name, glob):
                    found.update(_conf_directories(root, f"{directory}/{name}", depth + 1, memo))
        elif line.startswith("hwcap"):
            continue
        else:
            for directory in line.replace(",", " ").split():
                if directory.startswith("/"):
                    found.setdefault(directory.rstrip("/") or "/")
    return found


def _host_path(root: Path, image_path: str) -> Path | None:
    relative = image_path.strip("/")
    if not relative:
        return root
    try:
        parent = resolve_parent(root, relative, source="ld.so.cache", create=False)
    except (FileNotFoundError, Exception):  # a dangling or escaping path is simply not scanned
        return None
    return parent / relative.split("/")[-1]


def collect_entries(root: Path, machine: int) -> list[CacheEntry]:
    multiarch = MULTIARCH[machine]
    system_dirs = [f"/lib/{multiarch}", f"/usr/lib/{multiarch}", "/lib", "/usr/lib"]
    directories = configured_dirs(root) + [d for d in system_dirs]
    flags = FLAG_ELF_LIBC6 | ARCH_FLAGS[machine]
    seen_dirs: set[tuple[int, int]] = set()
    by_soname: dict[str, CacheEntry] = {}
    for directory in directories:
        host_dir = _host_path(root, directory)
        if host_dir is None or not host_dir.is_dir():
            continue
        real = os.stat(host_dir)
        identity = (real.st_dev, real.st_ino)
        if identity in seen_dirs:
            continue
        seen_dirs.add(identity)
        for name in sorted(os.listdir(host_dir)):
            if not (name.startswith("lib") or name.startswith("ld-")) or ".so" not in name:
                continue
            host_file = host_dir / name
            target = _follow(root, directory, name)
            if target is None:
                continue
            header = read_header(target)
            if header is None or header.machine != machine or header.elf_class != 2 or header.elf_type != 3:
                continue
            soname = read_soname(target) or name
            if "/" in soname or soname in (".", ".."):
                # the soname link is made in this directory under that name: a path would
                # put it elsewhere in the tree, or outside it ("../../..")
                raise CheckFailed(
                    f"{directory}/{name}: its DT_SONAME {soname!r} is not a file name",
                    check_id="ld-so-cache",
                )
            if soname in by_soname:
                continue
            soname_host = host_dir / soname
            if not os.path.lexists(soname_host):
                os.symlink(name, soname_host)
            elif not _same_file(soname_host, host_file):
                # ldconfig keys the cache by soname; a soname link to another file wins.
                pass
            by_soname[soname] = CacheEntry(soname, f"{directory}/{soname}", flags)
    return list(by_soname.values())


def _same_file(left: Path, right: Path) -> bool:
    try:
        return os.path.samefile(left, right)
    except OSError:
        return False


def _follow(root: Path, directory: str, name: str) -> Path | None:
    """The regular file an image path names, following symlinks inside the image."""
    image = f"{directory}/{name}"
    for _ in range(40):
        host = _host_path(root, image)
        if host is None:
            return None
        try:
            status = os.lstat(host)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(status.st_mode):
            return host
        if not stat.S_ISLNK(status.st_mode):
            return None
        link = os.readlink(host)
        image = link if link.startswith("/") else os.path.normpath(os.path.join(os.path.dirname(image), link))
        if image.startswith(".."):
            return None
    return None


def write_ld_so_cache(root: Path, machine: int = EM_AARCH64) -> list[CacheEntry]:
    """Scan ``root`` and write ``etc/ld.so.cache``; returns the entries written."""
    entries = collect_entries(root, machine)
    target = resolve_parent(root, "etc/ld.so.cache", source="ld.so.cache") / "ld.so.cache"
    write_new_file(target, serialize_cache(entries))
    os.chmod(target, 0o644)
    return sorted(entries, key=lambda e: e.soname)
