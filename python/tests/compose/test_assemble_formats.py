"""Hypothesis over the binary formats the assembly reads and writes: ld.so.cache, ELF
headers, relation strings, member-name normalization."""

from __future__ import annotations

import fnmatch
import functools
import struct
import subprocess
from pathlib import Path

import pytest
from fixtures.deadline import within_seconds
from fixtures.inputs import EM_X86_64, elf_stub
from fixtures.ld_so_cache import parse_cache
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.compose import ld_so_cache
from sparkflake.compose.elf import parse_header, read_sections, read_soname
from sparkflake.compose.ld_so_cache import (
    CONF_FILE_LIMIT,
    CacheEntry,
    configured_dirs,
    libcmp,
    serialize_cache,
)
from sparkflake.core.errors import CheckFailed
from sparkflake.lock.debian_packages import Relation, parse_relations
from sparkflake.oci.tree_paths import normalize_member

_soname = st.from_regex(r"lib[a-z_+]{1,8}(-[0-9]\.[0-9])?\.so(\.[0-9]{1,3}){0,3}", fullmatch=True)
_entry = st.builds(
    lambda soname, directory: CacheEntry(soname, f"{directory}/{soname}", 0x0A03),
    _soname,
    st.sampled_from(["/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib"]),
)


@given(st.lists(_entry, max_size=30, unique_by=lambda e: e.soname))
def test_ld_so_cache_round_trip_and_order(entries: list[CacheEntry]) -> None:
    blob = serialize_cache(entries)
    parsed = parse_cache(blob)
    assert sorted(parsed, key=lambda e: e.soname) == sorted(entries, key=lambda e: e.soname)
    # descending by _dl_cache_libcmp: what ld.so's binary search expects
    for left, right in zip(parsed, parsed[1:], strict=False):
        assert libcmp(left.soname, right.soname) >= 0
    assert serialize_cache(list(reversed(entries))) == blob


@settings(max_examples=15)
@given(st.lists(_entry, min_size=1, max_size=12, unique_by=lambda e: e.soname))
def test_host_ldconfig_reads_every_entry(tmp_path_factory: pytest.TempPathFactory, entries: list[CacheEntry]) -> None:
    path = tmp_path_factory.mktemp("cache") / "ld.so.cache"
    path.write_bytes(serialize_cache(entries))
    printed = subprocess.run(["ldconfig", "-p", "-C", str(path)], capture_output=True, text=True, check=True).stdout
    assert printed.splitlines()[0].startswith(f"{len(entries)} libs found")
    for entry in entries:
        assert f"\t{entry.soname} (libc6,AArch64) => {entry.path}\n" in printed


# glibc's _dl_cache_libcmp compares digit runs by value: "0" and "00" are equal (bin/fuzz found
# the pair); the cache's order then falls to the flags and the path (_cache_order)
@example(left="0", right="00")
@given(st.text(alphabet="ab0123456789.-_", max_size=10), st.text(alphabet="ab0123456789.-_", max_size=10))
def test_libcmp_is_a_consistent_order(left: str, right: str) -> None:
    a, b = libcmp(left, right), libcmp(right, left)
    assert (a > 0) - (a < 0) == -((b > 0) - (b < 0))
    key = functools.cmp_to_key(libcmp)
    if a == 0:
        assert sorted([left, right], key=key) == [left, right]  # equal: the order given is kept
    else:
        assert sorted([left, right], key=key) == sorted([right, left], key=key)


@given(st.binary(max_size=80))
def test_elf_header_parser_never_crashes(prefix: bytes) -> None:
    header = parse_header(prefix)
    assert header is None or prefix.startswith(b"\x7fELF")


@given(_soname, st.sampled_from([183, EM_X86_64]))
def test_soname_round_trip(tmp_path_factory: pytest.TempPathFactory, soname: str, machine: int) -> None:
    path = tmp_path_factory.mktemp("elf") / "lib.so"
    path.write_bytes(elf_stub(machine, soname=soname))
    assert read_soname(path) == soname
    header = parse_header(path.read_bytes()[:20])
    assert header is not None and header.machine == machine


# bin/fuzz found these: e_shoff 2**63 (seek refused it: "cannot fit 'int' into an
# offset-sized integer") and 2**56 (EINVAL), where a section table past the end is "none"
@example(tail=bytes(40) + b"\x80" + bytes(11) + b"\x01\x00\x01\x00\x00")
@example(tail=bytes(40) + b"\x01" + bytes(11) + b"\x01\x00\x01\x00\x00")
@given(st.binary(max_size=400))
def test_soname_reader_never_crashes_on_garbage(tmp_path_factory: pytest.TempPathFactory, tail: bytes) -> None:
    path = tmp_path_factory.mktemp("elf") / "junk.so"
    path.write_bytes(b"\x7fELF\x02\x01\x01" + tail)
    soname = read_soname(Path(path))
    assert soname is None or isinstance(soname, str)
    sections = read_sections(Path(path), (".dynamic", ".dynstr"))
    assert sections is None or all(offset + size <= path.stat().st_size for _name, offset, size in sections)


def _stub_field_offsets(stub: bytes) -> dict[str, int]:
    """Where elf_stub keeps each offset and size the SONAME reader follows (Elf64_Ehdr
    e_shoff at 40; an Elf64_Shdr's sh_offset at 24 and sh_size at 32; Elf64_Dyn d_val at 8)."""
    (shoff,) = struct.unpack_from("<Q", stub, 40)
    dynstr_header, dynamic_header = shoff + 64, shoff + 128
    (dynamic_offset,) = struct.unpack_from("<Q", stub, dynamic_header + 24)
    return {
        "e_shoff": 40,
        ".dynstr sh_offset": dynstr_header + 24,
        ".dynamic sh_offset": dynamic_header + 24,
        ".dynamic sh_size": dynamic_header + 32,
        "DT_SONAME d_val": dynamic_offset + 8,
    }


@example(soname="libc.so.6", field="e_shoff", value=2**63)
@example(soname="libc.so.6", field=".dynamic sh_offset", value=2**64 - 1)
@example(soname="libc.so.6", field="DT_SONAME d_val", value=2**63)
@given(
    _soname,
    st.sampled_from([".dynstr sh_offset", ".dynamic sh_offset", ".dynamic sh_size", "DT_SONAME d_val", "e_shoff"]),
    st.one_of(st.integers(0, 512), st.integers(0, 2**64 - 1)),
)
def test_an_offset_or_size_past_the_end_reads_as_no_soname(
    tmp_path_factory: pytest.TempPathFactory, soname: str, field: str, value: int
) -> None:
    stub = bytearray(elf_stub(EM_X86_64, soname=soname))
    at = _stub_field_offsets(bytes(stub))[field]
    (original,) = struct.unpack_from("<Q", stub, at)
    struct.pack_into("<Q", stub, at, value)
    path = tmp_path_factory.mktemp("elf") / "lib.so"
    path.write_bytes(stub)
    found = read_soname(path)
    if value == original:
        assert found == soname
    elif value >= len(stub):  # every one of these fields then names bytes past the end
        assert found is None
    else:
        assert found is None or isinstance(found, str)


_name = st.from_regex(r"[a-z0-9][a-z0-9+.-]{0,12}", fullmatch=True)
_relation = st.builds(
    Relation,
    name=_name,
    op=st.sampled_from([None, "<<", "<=", "=", ">=", ">>"]),
    version=st.from_regex(r"[0-9][a-z0-9.+~-]{0,8}", fullmatch=True),
    arch_qualifier=st.sampled_from([None, "any", "native"]),
).map(lambda r: Relation(r.name, r.op, r.version if r.op else None, r.arch_qualifier))


def _ld_so_conf_model(files: dict[str, str], depth_limit: int) -> list[str]:
    """ldconfig's reading as the plain recursion: every include read again where it stands,
    down to ``depth_limit``; a directory keeps its first place."""
    found: list[str] = []

    def read(path: str, depth: int) -> None:
        if depth > depth_limit or path not in files:
            return
        for raw in files[path].splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("include"):
                directory, glob = line.split(None, 1)[1].rsplit("/", 1)
                for name in sorted(n.rsplit("/", 1)[1] for n in files if n.rsplit("/", 1)[0] == directory):
                    if fnmatch.fnmatch(name, glob):
                        read(f"{directory}/{name}", depth + 1)
            elif line:
                for directory in line.split():
                    if (directory.rstrip("/") or "/") not in found:
                        found.append(directory.rstrip("/") or "/")

    read("/etc/ld.so.conf", 0)
    return found


_conf_line = st.sampled_from([
    "include /etc/ld.so.conf.d/*.conf", "include /etc/ld.so.conf.d/1.conf", "include /etc/ld.so.conf.d/2*",
    "/opt/a", "/opt/b/", "/opt/c # a comment", "# only a comment", "/opt/a /opt/d",
])


@given(st.lists(st.lists(_conf_line, max_size=5), min_size=1, max_size=4), st.integers(0, 3))
def test_ld_so_conf_is_read_as_the_plain_recursion_reads_it(
    tmp_path_factory: pytest.TempPathFactory, contents: list[list[str]], depth_limit: int
) -> None:
    """The plain recursion takes (files per glob) ** depth reads: the limit is lowered to keep
    the model quick; the product's reading does not depend on its value."""
    root = tmp_path_factory.mktemp("root")
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    files = {"/etc/ld.so.conf": "\n".join(contents[0]) + "\n"}
    files |= {f"/etc/ld.so.conf.d/{index}.conf": "\n".join(lines) + "\n" for index, lines in enumerate(contents[1:], 1)}
    for image_path, text in files.items():
        (root / image_path.lstrip("/")).write_text(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ld_so_cache, "INCLUDE_DEPTH", depth_limit)
        assert configured_dirs(root) == _ld_so_conf_model(files, depth_limit)


def test_ld_so_conf_files_that_include_each_other_are_not_read_12_to_the_8th_times(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc/ld.so.conf.d"
    conf_dir.mkdir(parents=True)
    (tmp_path / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n/opt/first\n")
    for index in range(12):
        (conf_dir / f"{index:02d}.conf").write_text(f"include /etc/ld.so.conf.d/*.conf\n/opt/lib{index:02d}\n/opt/first\n")
    with within_seconds(20):
        directories = configured_dirs(tmp_path)
    # the first file read to the bottom (00.conf eight levels down) names its two first
    assert directories == ["/opt/lib00", "/opt/first"] + [f"/opt/lib{index:02d}" for index in range(1, 12)]


def test_an_ld_so_conf_over_the_limit_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.conf").write_bytes(b"/opt/x\n" * (CONF_FILE_LIMIT // 7 + 1))
    with pytest.raises(CheckFailed, match=rf"^\[ld-so-cache\] /etc/ld\.so\.conf: over {CONF_FILE_LIMIT} bytes"):
        configured_dirs(tmp_path)
    (tmp_path / "etc/ld.so.conf").write_bytes(b"/opt/x\n" * (CONF_FILE_LIMIT // 7))
    assert configured_dirs(tmp_path) == ["/opt/x"]


@given(st.lists(st.lists(_relation, min_size=1, max_size=3), max_size=5))
def test_relations_round_trip(groups: list[list[Relation]]) -> None:
    text = ", ".join(" | ".join(str(r) for r in group) for group in groups)
    assert parse_relations(text) == groups


@given(st.lists(st.sampled_from(["usr", "lib", ".", "", "a b", "x..y"]), min_size=1, max_size=6))
def test_member_normalization_stays_inside(parts: list[str]) -> None:
    name = "./" + "/".join(parts)
    try:
        normalized = normalize_member(name, source="t")
    except CheckFailed as refused:
        # ".//usr" reads as absolute once "./" is stripped: refused, never rebased
        assert "absolute" in str(refused) and name.lstrip("./").startswith("") and "//" in name
        return
    assert not normalized.startswith("/") and ".." not in normalized.split("/")
    assert "" not in normalized.split("/") or normalized == ""


@given(st.lists(st.sampled_from(["usr", "..", "etc"]), min_size=1, max_size=6).filter(lambda p: ".." in p))
def test_member_with_dotdot_is_refused(parts: list[str]) -> None:
    with pytest.raises(CheckFailed, match=r"contains '\.\.'"):
        normalize_member("./" + "/".join(parts), source="t")
