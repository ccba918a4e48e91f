"""`build` checks free space before it writes: on a small tmpfs (a real file system with a
real statvfs) it refuses with exit 2 naming the place, what it needs and what is free, and
leaves the file system as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkflake.cli import main

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def _listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_an_output_on_a_full_disk_is_refused_before_anything_is_written(small_disk, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(tmp_path / "first"), "--cache", str(cache)]) == 0
    capsys.readouterr()
    assert main(["build", str(FIXTURE), "--offline", "-o", str(small_disk / "out"), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "not enough free disk space for this build (nothing was written)" in err
    assert f"{small_disk}: needs about " in err and f"the image in {small_disk / 'out'}" in err
    assert "MiB free" in err and "cache gc --apply" in err
    assert _listing(small_disk) == []


def test_a_cold_cache_on_a_full_disk_is_refused_naming_the_cache(small_disk, tmp_path, capsys):
    cache = small_disk / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(tmp_path / "out"), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert f"{cache} and {cache / 'oci'}: needs about " in err
    assert "inputs to download" in err and "assembled trees" in err and "layer store" in err
    assert _listing(small_disk) == [] and not (tmp_path / "out").exists()
