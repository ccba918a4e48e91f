"""Hypothesis over the binary formats the assembly reads and writes: ld.so.cache, ELF
headers, relation strings, member-name normalization."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest
from fixtures.inputs import EM_X86_64, elf_stub
from fixtures.ld_so_cache import parse_cache
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.compose.elf import parse_header, read_soname
from sparkflake.compose.ld_so_cache import CacheEntry, libcmp, serialize_cache
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


@given(st.text(alphabet="ab0123456789.-_", max_size=10), st.text(alphabet="ab0123456789.-_", max_size=10))
def test_libcmp_is_a_consistent_order(left: str, right: str) -> None:
    a, b = libcmp(left, right), libcmp(right, left)
    assert (a > 0) - (a < 0) == -((b > 0) - (b < 0))
    key = functools.cmp_to_key(libcmp)
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


@given(st.binary(max_size=400))
def test_soname_reader_never_crashes_on_garbage(tmp_path_factory: pytest.TempPathFactory, tail: bytes) -> None:
    path = tmp_path_factory.mktemp("elf") / "junk.so"
    path.write_bytes(b"\x7fELF\x02\x01\x01" + tail)
    read_soname(Path(path))


_name = st.from_regex(r"[a-z0-9][a-z0-9+.-]{0,12}", fullmatch=True)
_relation = st.builds(
    Relation,
    name=_name,
    op=st.sampled_from([None, "<<", "<=", "=", ">=", ">>"]),
    version=st.from_regex(r"[0-9][a-z0-9.+~-]{0,8}", fullmatch=True),
    arch_qualifier=st.sampled_from([None, "any", "native"]),
).map(lambda r: Relation(r.name, r.op, r.version if r.op else None, r.arch_qualifier))


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
