"""The OS base tree on a full disk (a real tmpfs filled up): the error is the tree's
(``base-tree-write``, the path and "No space left on device"), never a damaged package,
even when the bytes are still buffered and only the close writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.full_disk import fill, small_disk
from fixtures.inputs import RawMember, make_raw_deb

from sparkflake.compose.debian_base import DebInput, assemble_base
from sparkflake.core.errors import CheckFailed


@pytest.mark.parametrize("size", [100, 200_000])  # written at the close; at once
def test_a_base_tree_on_a_full_disk_is_not_a_damaged_package(tmp_path: Path, size: int) -> None:
    deb = make_raw_deb(tmp_path, "small", "1.0", [RawMember("./etc/", kind="dir", mode=0o755),
                                                  RawMember("./etc/os-release", content=b"x" * size)])
    with small_disk(tmp_path / "disk") as disk:
        filler = fill(disk)
        with pytest.raises(CheckFailed) as raised:
            assemble_base([DebInput("small", "1.0", "arm64", deb.path)], disk / "base")
        assert raised.value.check_id == "base-tree-write"
        assert str(raised.value).startswith("[base-tree-write] small (small_1.0_arm64.deb): cannot write ")
        assert str(raised.value).endswith("/etc/os-release in the OS base tree: No space left on device")
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]  # the staged tree removed
        filler.unlink()
        assemble_base([DebInput("small", "1.0", "arm64", deb.path)], disk / "again")
        assert (disk / "again" / "etc" / "os-release").read_bytes() == b"x" * size
