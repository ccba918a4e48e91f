"""What `sparkflake cache gc|cleanup|verify` may touch: only a cache root sparkflake made (its
marker, or a cache of an earlier version holding only sparkflake's own directories), and in
it only entries under the names sparkflake makes; a build refuses to keep its cache in a
directory that is not sparkflake's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.core.atomic_write import generated_name, host_tag
from sparkflake.core.blob_cache import BlobCache, move_to_quarantine
from sparkflake.core.cache_root import CACHE_DIRECTORIES, CACHE_MARKER
from sparkflake.housekeeping.cache_entries import SCANNED_DIRECTORIES

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
PROFILES = FIXTURE.parent


def _snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every path below ``root`` with its kind and, for a file, the sha256 of its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path)] = ("link", os.readlink(path))
        elif path.is_file():
            found[str(path)] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            found[str(path)] = ("dir", "")
    return found


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _operator_layout(directory: Path) -> list[Path]:
    """An operator's OCI layout: oci-layout, index.json and three blobs named by their sha256."""
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    placed = []
    for number in range(3):
        content = f"the operator's blob {number}\n".encode()
        path = blobs / hashlib.sha256(content).hexdigest()
        path.write_bytes(content)
        placed.append(path)
    (directory / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}\n')
    (directory / "index.json").write_text('{"schemaVersion": 2, "manifests": []}\n')
    return [*placed, directory / "oci-layout", directory / "index.json"]


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory) -> Path:
    """A cache one offline fixture build made (and so marked)."""
    root = tmp_path_factory.mktemp("ownership")
    subprocess.run([sys.executable, "-m", "sparkflake.cli", "build", str(FIXTURE), "--offline", "-o", str(root / "out"),
                    "--cache", str(root / "cache"), "--json"], stdout=subprocess.DEVNULL, check=True)
    return root / "cache"


@pytest.fixture
def cache(built_cache, tmp_path) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(built_cache, copy, symlinks=True)
    return copy


def test_the_scanned_directories_are_the_ones_a_cache_is_recognised_by():
    assert SCANNED_DIRECTORIES == CACHE_DIRECTORIES


def test_cleanup_takes_only_the_names_sparkflake_makes_in_quarantine_trees_and_work(tmp_path, capsys):
    """V6: hand-placed quarantine/mine/notes.txt, quarantine/blobs/hand-placed, a
    trees/.mytree.<host>.pid<dead>.backup.old/ and a work/myproj.<host>.pid<dead>.backup/ were
    removed by `cache cleanup --apply`; only what move_to_quarantine, atomic_directory and
    make_run_directory name (the generated name's check holding) is a leftover."""
    root = tmp_path / "cache"
    BlobCache(root)  # a cache sparkflake made: marked
    dead = _dead_pid()
    operators = [root / "quarantine" / "mine" / "notes.txt", root / "quarantine" / "blobs" / "hand-placed",
                 root / "trees" / f".mytree.{host_tag()}.pid{dead}.backup.old" / "notes.txt",
                 root / "work" / f"myproj.{host_tag()}.pid{dead}.backup" / "notes.txt",
                 root / "quarantine" / "blobs" / f"{'e' * 64}.backup"]
    for path in operators:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the operator's\n")
    altered = root / "blobs" / "sha256" / ("c" * 64)
    altered.parent.mkdir(parents=True)
    altered.write_bytes(b"rotten")
    quarantined = move_to_quarantine(root, altered, "blobs")
    staged = root / "trees" / generated_name(f".{'a' * 64}", ".partial", pid=dead)
    run = root / "work" / generated_name("fixture", pid=dead)
    for path in (staged, run):
        (path / "tree").mkdir(parents=True)
    leftovers = {quarantined, staged, run}
    assert main(["cache", "cleanup", "--cache", str(root), "--json"]) == 0
    assert {Path(item["path"]) for item in json.loads(capsys.readouterr().out)["removals"]} == leftovers
    assert main(["cache", "cleanup", "--cache", str(root), "--apply"]) == 0
    assert "3 entries removed" in capsys.readouterr().out
    assert not any(path.exists() for path in leftovers)
    assert all(path.read_text() == "the operator's\n" for path in operators)


def test_a_build_refuses_an_operators_oci_layout_as_its_cache(tmp_path, capsys):
    """V7: `build --cache mylayout` wrote its cache into an operator's OCI layout, and a later
    `cache gc --apply` deleted the layout's blobs as unused inputs."""
    layout = tmp_path / "mylayout"
    _operator_layout(layout)
    before = _snapshot(layout)
    assert main(["build", str(FIXTURE), "--offline", "--cache", str(layout), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{layout}: not a sparkflake cache" in err and "index.json, oci-layout" in err
    assert "give --cache a new or empty directory" in err and "Traceback" not in err
    assert _snapshot(layout) == before and not (tmp_path / "out").exists()
    for command in (["gc", "--apply", "--profiles-dir", str(PROFILES)], ["cleanup", "--apply"], ["verify"]):
        assert main(["cache", *command, "--cache", str(layout)]) == 2
        assert f"{layout}: not a sparkflake cache" in capsys.readouterr().err
    assert _snapshot(layout) == before


def test_gc_refuses_a_directory_an_earlier_version_used_as_its_cache_beside_an_operators_files(cache, capsys):
    """A directory an earlier sparkflake built into (no marker) that also holds an operator's
    OCI layout: its blobs/sha256 files look like inputs no build used; gc, cleanup and verify
    refuse the whole root and remove nothing."""
    (cache / CACHE_MARKER).unlink(missing_ok=True)  # as an earlier version left it
    placed = _operator_layout(cache)
    before = _snapshot(cache)
    for command in (["gc", "--apply", "--keep", "1", "--profiles-dir", str(PROFILES)], ["cleanup", "--apply"],
                    ["verify"]):
        assert main(["cache", *command, "--cache", str(cache)]) == 2
        err = capsys.readouterr().err
        assert f"{cache}: not a sparkflake cache: it has no {CACHE_MARKER} and holds index.json, oci-layout" in err
        assert "pass that cache's directory as --cache" in err and "Traceback" not in err
    assert _snapshot(cache) == before and all(path.exists() for path in placed)


def test_a_cache_of_an_earlier_version_keeps_working_without_a_marker(cache, tmp_path, capsys):
    """A cache made before the marker (only sparkflake's own directories at its top) is
    recognised as it is: a build uses it, gc and cleanup act on it, nothing is written to
    mark it."""
    (cache / CACHE_MARKER).unlink(missing_ok=True)  # as an earlier version left it
    assert set(os.listdir(cache)) <= CACHE_DIRECTORIES
    assert main(["build", str(FIXTURE), "--offline", "--cache", str(cache), "-o", str(tmp_path / "out"), "--json"]) == 0
    capsys.readouterr()
    assert not (cache / CACHE_MARKER).exists()
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--profiles-dir", str(PROFILES), "--apply"]) == 0
    assert "gc:" in capsys.readouterr().out
    assert main(["cache", "cleanup", "--cache", str(cache), "--apply"]) == 0


def test_a_build_marks_a_cache_it_creates_or_an_empty_directory(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for number, root in enumerate((tmp_path / "absent" / "cache", empty)):
        assert main(["build", str(FIXTURE), "--offline", "--cache", str(root), "-o", str(tmp_path / f"out{number}"),
                     "--json"]) == 0
        capsys.readouterr()
        assert (root / CACHE_MARKER).is_file()
        (root / "notes.txt").write_text("the operator's, later\n")  # a marked cache keeps an operator's file
        assert main(["cache", "gc", "--cache", str(root), "--profiles-dir", str(PROFILES), "--apply"]) == 0
        assert main(["cache", "cleanup", "--cache", str(root), "--apply"]) == 0
        assert (root / "notes.txt").read_text() == "the operator's, later\n"
        capsys.readouterr()
