"""Names a pin derives: a wheel pin's tag set (``lock.pins.WheelPin.tag_set``) is the set
``packaging`` expands the file name's compressed tags to, and a Debian pin's pool file
name (``DebPin.pool_filename``) is the one ``dpkg-deb --build`` gives a package of that
name, version (its epoch left out) and architecture."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.utils import parse_wheel_filename

from sparkflake.lock.pins import DebPin, WheelPin

pytestmark = pytest.mark.lock

_tag_part = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=3, unique=True)


@given(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.from_regex(r"(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,2})){0,2}", fullmatch=True),
       _tag_part, _tag_part, _tag_part)
def test_a_wheels_tag_set_is_what_packaging_expands_its_file_name_to(name, version, pythons, abis, platforms) -> None:
    filename = f"{name}-{version}-{'.'.join(pythons)}-{'.'.join(abis)}-{'.'.join(platforms)}.whl"
    file_tags = parse_wheel_filename(filename)[3]
    pin = WheelPin(name.replace("_", "-"), version, filename, "0" * 64, 1, tuple(sorted(str(tag) for tag in file_tags)),
                   ("https://files.example.invalid/w.whl",))
    assert pin.tag_set() == file_tags
    assert len(pin.tag_set()) == len(pythons) * len(abis) * len(platforms)


@settings(max_examples=20)
@given(st.from_regex(r"[a-z0-9][a-z0-9+.-]{1,12}", fullmatch=True),
       st.from_regex(r"([1-9][0-9]?:)?[0-9][A-Za-z0-9.+~]{0,8}(-[A-Za-z0-9.+~]{1,6})?", fullmatch=True),
       st.sampled_from(["arm64", "amd64", "all", "riscv64"]))
def test_a_debs_pool_file_name_is_the_one_dpkg_deb_gives(tmp_path_factory, package, version, architecture) -> None:
    root = tmp_path_factory.mktemp("deb")
    (root / "tree" / "DEBIAN").mkdir(parents=True)
    (root / "tree" / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: {architecture}\nMaintainer: m <m@x>\nDescription: d\n",
        encoding="utf-8")
    (root / "out").mkdir()
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Znone", "--build", str(root / "tree"), str(root / "out")],
                   check=True, capture_output=True)
    (built,) = (root / "out").iterdir()
    pin = DebPin(f"{package}:{architecture}", package, version, architecture, "0" * 64, 1, ("https://deb.example.invalid/p",))
    assert pin.pool_filename == built.name
