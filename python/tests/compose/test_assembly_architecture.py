"""The OS base is unpacked for the lock's target architecture, whatever package sorts first.

glm53's lock gained adduser (Architecture: all, a dependency of libibverbs1), which sorts
before base-files: the architecture the base was checked against used to be the first
package's, so every arm64 package was refused as "built for 'arm64', the image is all"."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fixtures.inputs import make_deb

from sparkflake.compose.assembly import assemble
from sparkflake.compose.composition import load_composition
from sparkflake.compose.inputs import fetch_inputs
from sparkflake.core.blob_cache import BlobCache
from sparkflake.lock.pins import DebPin

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def test_an_architecture_all_package_first_leaves_the_target_architecture(tmp_path: Path) -> None:
    composition = load_composition(str(FIXTURE))
    fetched = fetch_inputs(composition, BlobCache(tmp_path / "cache"), offline=True)
    made = make_deb(tmp_path, "aaa-common", "1.0", architecture="all", files={"usr/share/aaa/marker": b"all\n"})
    pin = DebPin(name="aaa-common:all", package="aaa-common", version="1.0", architecture="all", sha256=made.sha256,
                 size=made.size, urls=("https://deb.debian.org/debian/pool/main/a/aaa-common/aaa-common_1.0_all.deb",))
    composition = dataclasses.replace(composition, debs=(pin, *composition.debs))
    fetched = dataclasses.replace(fetched, paths={**fetched.paths, pin.name: made.path})
    assembly = assemble(composition, fetched, tmp_path / "trees")
    assert (assembly.base_tree / "usr/share/aaa/marker").read_bytes() == b"all\n"
    assert [deb.architecture for deb in composition.debs[1:]] == ["arm64"] * (len(composition.debs) - 1)
