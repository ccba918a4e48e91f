"""``compose.sbom.dist_info_name``: the ``.dist-info`` directory of a locked wheel, where the
SBOM reads the METADATA the assembly installed. Against the wheel spec (binary
distribution format: ``{distribution}-{version}.dist-info``, spelled as in the file name)
and packaging's reading of the file name: for any wheel file name a ``WheelPin`` takes
(any case, ``.``/``_`` separators, a build tag, compressed tag sets, a local version), the
name is ``<file's distribution>-<file's version>.dist-info``, whose parts canonicalize to the
pin's name and version; a wheel written that way and installed by ``install_wheel`` has its
METADATA there; and every real wheel at hand (the fixture profile's, and those of
profiles/glm53.lock in the blob cache when it has them) has exactly that directory."""

from __future__ import annotations

import os
import tomllib
import zipfile
from pathlib import Path

import pytest
from fixtures.inputs import make_wheel
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sparkflake.compose import sbom
from sparkflake.compose.python_env import install_wheel
from sparkflake.core.blob_cache import default_cache_root
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.pins import WheelPin
from sparkflake.lock.target import DEBIAN_BOOKWORM_ARM64

pytestmark = pytest.mark.compose

REPO = Path(__file__).resolve().parents[3]
SITE = "opt/venv/lib/python3.11/site-packages"

# a distribution as a wheel file name spells it: letters and digits, single . or _ between
_distributions = st.from_regex(r"[A-Za-z0-9]{1,6}([._][A-Za-z0-9]{1,6}){0,2}", fullmatch=True)
_versions = st.from_regex(r"(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,2})){0,3}((a|b|rc)[0-9])?(\.post[0-9])?(\.dev[0-9])?"
                          r"(\+[a-z0-9]{1,4}(\.[a-z0-9]{1,3})?)?", fullmatch=True)
_builds = st.none() | st.from_regex(r"[0-9]{1,3}[a-z]{0,3}", fullmatch=True)
_tags = st.sampled_from(["py3-none-any", "py2.py3-none-any", "cp311-cp311-manylinux_2_28_aarch64",
                         "cp38-abi3-manylinux_2_17_aarch64.manylinux2014_aarch64"])


def _pin(filename: str, size: int = 1, sha256: str = "0" * 64) -> WheelPin:
    name, version, _build, tags = parse_wheel_filename(filename)
    return WheelPin(name=str(name), version=str(version), filename=filename, sha256=sha256, size=size,
                    tags=tuple(sorted(str(tag) for tag in tags)), urls=(f"https://files.example/{filename}",))


@given(_distributions, _versions, _builds, _tags)
def test_the_name_is_the_files_distribution_and_version(distribution, version, build, tag) -> None:
    filename = "-".join([distribution, version, *([build] if build else []), tag]) + ".whl"
    pin = _pin(filename)
    found = sbom.dist_info_name(pin)
    assert found == f"{distribution}-{version}.dist-info"
    stem = found.removesuffix(".dist-info")
    named, _, versioned = stem.partition("-")
    assert canonicalize_name(named) == pin.name and Version(versioned) == Version(pin.version)
    assert "/" not in found and stem.count("-") == 1


@settings(max_examples=15)
@given(_distributions, _versions, _tags)
def test_an_installed_wheel_has_its_metadata_there(tmp_path_factory, distribution, version, tag) -> None:
    root = tmp_path_factory.mktemp("whl")
    wheel = make_wheel(root, distribution, version, files={"mod_x.py": b"x = 1\n"}, tag=tag)
    stage = root / "stage"
    stage.mkdir()
    install_wheel(str(wheel.path), wheel.filename, str(stage), "/opt/venv", DEBIAN_BOOKWORM_ARM64)
    pin = _pin(wheel.filename, wheel.size, wheel.sha256)
    metadata = stage / SITE / sbom.dist_info_name(pin) / "METADATA"
    assert metadata.is_file() and f"Version: {version}\n" in metadata.read_text()


def _real_wheels() -> list[tuple[WheelPin, Path]]:
    """The fixture profile's wheels (always here), and glm53.lock's wheels the cache holds."""
    found = []
    for pin in load_lock(REPO / "profiles/fixture/fixture.lock").pins_of(WheelPin):
        found.append((pin, REPO / "profiles/fixture/inputs" / pin.filename))
    blobs = Path(os.environ.get("SPARKFLAKE_CACHE") or default_cache_root()) / "blobs" / "sha256"  # read, never claimed
    lock = tomllib.loads((REPO / "profiles/glm53.lock").read_text())
    for entry in lock["inputs"]:
        if entry.get("kind") == "wheel" and (blobs / entry["sha256"]).is_file():
            found.append((_pin(entry["filename"], entry["size"], entry["sha256"]), blobs / entry["sha256"]))
    return found


def test_every_real_wheel_at_hand_has_that_directory() -> None:
    wheels = _real_wheels()
    assert len(wheels) >= 8
    for pin, path in wheels:
        with zipfile.ZipFile(path) as archive:
            directories = {top for top in (name.split("/", 1)[0] for name in archive.namelist()) if top.endswith(".dist-info")}
        assert directories == {sbom.dist_info_name(pin)}, pin.filename
