"""The control member of a .deb (``compose.deb_archive.read_control``): what ``dpkg-deb
--build`` writes (control.tar compressed with gzip, xz, zstd or not at all) reads back as
the control file's fields, its md5sums and conffiles byte for byte, and a multi-line field
as ``dpkg-deb --field`` prints it; damaged bytes anywhere in the archive are refused with
the project's errors naming the file, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fixtures.inputs import ar_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.compose.deb_archive import AR_MAGIC, read_control
from sparkflake.core.errors import CheckFailed, InputError

pytestmark = pytest.mark.compose

_MANDATORY = ("Package", "Version", "Architecture", "Maintainer", "Description")
_field_names = st.from_regex(r"X-[A-Za-z0-9][A-Za-z0-9-]{0,10}", fullmatch=True)
# one line of a value: no line break of any kind, no surrounding blanks (dpkg trims them)
_line_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF, blacklist_categories=("Cc", "Cs", "Zs")),
                     min_size=1, max_size=20)
_lines = st.lists(_line_text, min_size=1, max_size=3).map(" ".join)
_continuations = st.lists(st.one_of(st.just("."), _lines, _lines.map(lambda line: " " + line)), max_size=3)


@st.composite
def _controls(draw):
    fields = {
        "Package": draw(st.from_regex(r"[a-z0-9][a-z0-9+.-]{1,15}", fullmatch=True)),
        "Version": draw(st.from_regex(r"([1-9]:)?[0-9][A-Za-z0-9.+~]{0,8}(-[A-Za-z0-9.+~]{1,5})?", fullmatch=True)),
        "Architecture": draw(st.sampled_from(["arm64", "amd64", "all"])),
        "Maintainer": "sparkflake tests <tests@example.invalid>",
    }
    description = [draw(_lines), *draw(_continuations)]
    fields["Description"] = "\n".join(description)
    for name in draw(st.lists(_field_names, max_size=4, unique_by=str.lower)):
        fields[name] = "\n".join([draw(_lines), *draw(_continuations)])
    return fields


def _control_text(fields: dict[str, str]) -> str:
    return "".join(f"{name}: {value.replace(chr(10), chr(10) + ' ')}\n" for name, value in fields.items())


_paths = st.from_regex(r"/(etc|usr/share)/[a-z][a-z0-9._-]{0,10}", fullmatch=True)


@settings(max_examples=20)
@given(_controls(), st.sampled_from(["gzip", "xz", "zstd", "none"]),
       st.dictionaries(_paths, st.binary(max_size=30), max_size=4), st.booleans())
def test_what_dpkg_deb_builds_reads_back(tmp_path_factory, fields, compression, files, conffiles) -> None:
    root = tmp_path_factory.mktemp("deb")
    tree = root / "tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(_control_text(fields), encoding="utf-8")
    md5sums = "".join(f"{'0' * 32}  {path[1:]}\n" for path in files)
    if files:
        (tree / "DEBIAN" / "md5sums").write_text(md5sums, encoding="utf-8")
    conffile_text = "".join(f"{path}\n" for path in files if path.startswith("/etc/")) if conffiles else ""
    if conffile_text:
        (tree / "DEBIAN" / "conffiles").write_text(conffile_text, encoding="utf-8")
    for path, content in files.items():
        (tree / path[1:]).parent.mkdir(parents=True, exist_ok=True)
        (tree / path[1:]).write_bytes(content)
    deb = root / "p.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", f"-Z{compression}", "--build", str(tree), str(deb)],
                   check=True, capture_output=True)

    control = read_control(deb)
    assert control.fields == fields
    assert (control.package, control.version, control.architecture) == (
        fields["Package"], fields["Version"], fields["Architecture"])
    assert control.md5sums == md5sums and control.conffiles == conffile_text
    printed = subprocess.run(["dpkg-deb", "--field", str(deb), "Description"], check=True, capture_output=True).stdout
    assert printed.decode().rstrip("\n").replace("\n ", "\n") == fields["Description"]


def _raw_deb(control_tar_name: str, control_tar: bytes) -> bytes:
    return AR_MAGIC + ar_entry("debian-binary", b"2.0\n") + ar_entry(control_tar_name, control_tar) + ar_entry("data.tar", b"")


def _good_deb(root: Path, compression: str) -> bytes:
    tree = root / "tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: p\nVersion: 1\nArchitecture: all\nMaintainer: m <m@x>\nDescription: d\n", encoding="utf-8")
    (tree / "DEBIAN" / "md5sums").write_text(f"{'0' * 32}  usr/x\n", encoding="utf-8")
    deb = root / "good.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", f"-Z{compression}", "--build", str(tree), str(deb)],
                   check=True, capture_output=True)
    return deb.read_bytes()


_GOOD: dict[str, bytes] = {}


@given(st.sampled_from(["gzip", "xz", "zstd", "none"]), st.integers(0, 10_000), st.binary(min_size=1, max_size=8),
       st.sampled_from(["flip", "cut", "insert"]))
def test_a_damaged_deb_is_refused_naming_the_file(tmp_path_factory, compression, where, noise, how) -> None:
    root = tmp_path_factory.mktemp("bad")
    if compression not in _GOOD:
        _GOOD[compression] = _good_deb(tmp_path_factory.mktemp("good"), compression)
    good = _GOOD[compression]
    where %= len(good)
    if how == "flip":
        bad = good[:where] + bytes(a ^ (b or 1) for a, b in zip(good[where : where + len(noise)], noise, strict=False)) \
            + good[where + len(noise):]
    elif how == "cut":
        bad = good[:where]
    else:
        bad = good[:where] + noise + good[where:]
    deb = root / "bad.deb"
    deb.write_bytes(bad)
    try:
        control = read_control(deb)
    except (CheckFailed, InputError) as refused:
        assert str(deb) in str(refused)
        return
    # read despite the damage: the damage was outside what is read (the data member, padding),
    # or inside a field's text (read as UTF-8 with replacement)
    assert control.fields.get("Package") is not None


@given(st.sampled_from(["control.tar", "control.tar.gz", "control.tar.xz", "control.tar.zst", "control.tar.bz2"]),
       st.binary(max_size=400))
def test_any_control_member_bytes_are_read_or_refused_by_name(tmp_path_factory, name, payload) -> None:
    deb = tmp_path_factory.mktemp("raw") / "r.deb"
    deb.write_bytes(_raw_deb(name, payload))
    with pytest.raises((CheckFailed, InputError)) as refused:
        read_control(deb)
    assert str(refused.value).removeprefix("[deb-archive] ").startswith(f"{deb}: ")
