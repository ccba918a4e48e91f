"""The OS base tree, a wheel's install, the source overlay's sdist and the cache of assembled
trees on a full disk (a real tmpfs filled up): the error is the tree's (``base-tree-write``,
``env-tree-write``, the sdist that could not be written out: the path and "No space left on
device"), never a damaged package, a wheel that cannot be installed or an unreadable sdist,
even when the bytes are still buffered and only the close writes them; nothing staged or
half-recorded is left."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from fixtures.full_disk import fill, small_disk
from fixtures.inputs import RawMember, make_raw_deb, make_wheel

from sparkflake.compose.debian_base import DebInput, assemble_base
from sparkflake.compose.python_env import install_wheel
from sparkflake.compose.source_overlay import extract_sdist_package
from sparkflake.compose.tree_cache import TreeCache, recipe_key
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.lock.target import DEBIAN_BOOKWORM_ARM64


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


@pytest.mark.parametrize("size", [100, 200_000])
def test_a_wheel_installed_onto_a_full_disk_is_not_a_wheel_that_cannot_be_installed(tmp_path: Path, size: int) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", files={"demo/data.bin": b"x" * size})
    with small_disk(tmp_path / "disk") as disk:
        (disk / "stage").mkdir()
        filler = fill(disk)
        with pytest.raises(CheckFailed) as raised:
            install_wheel(str(wheel.path), wheel.filename, str(disk / "stage"), "/opt/venv", DEBIAN_BOOKWORM_ARM64)
        assert raised.value.check_id == "env-tree-write"
        assert str(raised.value).startswith(f"[env-tree-write] {wheel.filename}: cannot write {disk / 'stage'}/")
        assert str(raised.value).endswith(" in the Python environment tree: No space left on device")
        filler.unlink()
        (disk / "again").mkdir()
        install_wheel(str(wheel.path), wheel.filename, str(disk / "again"), "/opt/venv", DEBIAN_BOOKWORM_ARM64)
        assert (disk / "again/opt/venv/lib/python3.11/site-packages/demo/data.bin").read_bytes() == b"x" * size


def test_an_sdist_extracted_onto_a_full_disk_is_not_an_unreadable_sdist(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("pkg-1/pkg/a.py")
        info.size = 100
        archive.addfile(info, io.BytesIO(b"a" * 100))
    sdist = tmp_path / "pkg-1.tar.gz"
    sdist.write_bytes(buffer.getvalue())
    with small_disk(tmp_path / "disk") as disk:
        filler = fill(disk)
        with pytest.raises(InputError) as raised:
            extract_sdist_package(sdist, "pkg", disk / "out")
        assert str(raised.value) == f"{sdist}: cannot write {disk / 'out' / 'pkg' / 'a.py'}: No space left on device"
        filler.unlink()
        assert (extract_sdist_package(sdist, "pkg", disk / "again") / "a.py").read_bytes() == b"a" * 100


def test_the_files_the_base_makes_itself_on_a_full_disk_name_themselves(tmp_path: Path) -> None:
    """/etc/passwd and the rest of the declarative steps, ld.so.cache, the dpkg database:
    at every level of a filling disk until the base fits, the file that found no room is
    named, and nothing staged is left."""
    deb = make_raw_deb(tmp_path, "small", "1.0", [RawMember("./etc/", kind="dir", mode=0o755),
                                                  RawMember("./etc/os-release", content=b"x" * 100)])
    with small_disk(tmp_path / "disk") as disk:
        for pages in range(64):
            filler = fill(disk, leave=pages * 4096)
            try:
                assemble_base([DebInput("small", "1.0", "arm64", deb.path)], disk / "base")
            except CheckFailed as exc:  # the package's own file
                assert exc.check_id == "base-tree-write" and str(exc).endswith(": No space left on device")
                assert sorted(path.name for path in disk.iterdir()) == ["filler"]
            except OSError as exc:
                assert exc.strerror == "No space left on device", exc
                assert exc.filename is not None and exc.filename.startswith(f"{disk}/.base."), (pages, exc)
                assert sorted(path.name for path in disk.iterdir()) == ["filler"]
            else:
                break
            finally:
                filler.unlink()
        assert (disk / "base" / "etc" / "os-release").read_bytes() == b"x" * 100 and pages > 2


def test_a_cached_tree_whose_entry_cannot_be_recorded_is_not_left_taking_the_room(tmp_path: Path) -> None:
    """The tree is swapped into the cache, then its entry.json finds the disk full: the tree,
    which would never be reused without it, is removed; with room again it is built anew."""
    with small_disk(tmp_path / "disk") as disk:
        cache = TreeCache(disk / "trees")
        filled: list[Path] = []

        def build(tree: Path) -> dict[str, object]:
            tree.mkdir()
            (tree / "payload").write_bytes(b"p" * 200_000)
            if not filled:
                filled.append(fill(disk, leave=4096))  # room for recipe.json, none for entry.json
            return {"files": 1}

        with pytest.raises(OSError) as raised:
            cache.get_or_build({"kind": "test"}, build)
        assert raised.value.strerror == "No space left on device"
        assert raised.value.filename == str(disk / "trees" / recipe_key({"kind": "test"}) / "entry.json")
        assert os.listdir(disk / "trees") == []
        filled[0].unlink()
        entry = cache.get_or_build({"kind": "test"}, build)
        assert not entry.reused and (entry.tree / "payload").read_bytes() == b"p" * 200_000
        assert cache.get_or_build({"kind": "test"}, build).reused
