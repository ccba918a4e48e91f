"""`sparkflake cache gc|cleanup|verify|du` on the caches of real fixture builds: retention
keeps everything the kept builds and deployed images use (an offline rebuild then takes
every layer from the cache), a dry run removes nothing, files sparkflake did not write
survive, leftovers go only when no process holds them, an altered blob is quarantined."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.cli import main
from sparkflake.core.atomic_write import generated_name, remove_tree
from sparkflake.core.directory_lock import LOCK_NAME
from sparkflake.distribute.files import lock_record
from sparkflake.housekeeping.build_record import load_build_records
from sparkflake.launch.evidence import EvidenceRecord, dump_record

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
PROFILES = FIXTURE.parent


def _build(cache: Path, out: Path, compression: str, capsys) -> dict:
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache),
                 "--compression", compression, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict, dict]:
    """One cache, two builds of the fixture: gzip first, then zstd (other layer blobs)."""
    root = tmp_path_factory.mktemp("gc")
    records = {}
    for compression in ("gzip", "zstd"):
        stdout = root / f"{compression}.json"
        with open(stdout, "w") as handle:
            result = subprocess.run(
                [sys.executable, "-m", "sparkflake.cli", "build", str(FIXTURE), "--offline", "-o", str(root / compression),
                 "--cache", str(root / "cache"), "--compression", compression, "--json"],
                stdout=handle, check=True)
        assert result.returncode == 0
        records[compression] = json.loads(stdout.read_text())
        time.sleep(1.1)  # the records' times order the builds (seconds)
    return root / "cache", records["gzip"], records["zstd"]


@pytest.fixture
def cache(built, tmp_path) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(built[0], copy, symlinks=True)
    yield copy
    remove_tree(copy)


def _files(root: Path) -> dict[str, int]:
    return {str(path.relative_to(root)): path.lstat().st_size for path in root.rglob("*")}


def _foreign(cache: Path) -> list[Path]:
    placed = [cache / "notes.txt", cache / "blobs" / "sha256" / "README", cache / "trees" / "mine",
              cache / "oci" / "blobs" / "sha256" / "keep-me", cache / "runtime" / "not-a-scratch"]
    for path in placed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the operator's\n")
    return placed


def test_gc_dry_run_removes_nothing(cache, capsys):
    before = _files(cache)
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--profiles-dir", str(PROFILES)]) == 0
    out = capsys.readouterr().out
    assert "would remove" in out and "nothing removed (dry run: pass --apply)" in out
    assert _files(cache) == before


def test_gc_keeps_what_the_kept_build_uses_and_foreign_files(cache, built, tmp_path, capsys):
    _, gzip_build, zstd_build = built
    foreign = _foreign(cache)
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--apply", "--json",
                 "--profiles-dir", str(PROFILES)]) == 0
    report = json.loads(capsys.readouterr().out)
    removed = {Path(item["path"]) for item in report["removals"]}
    gzip_only = {layer["digest"] for layer in gzip_build["layers"]} - {layer["digest"] for layer in zstd_build["layers"]}
    assert {cache / "oci" / "blobs" / "sha256" / digest.removeprefix("sha256:") for digest in gzip_only} <= removed
    assert all(path.exists() for path in foreign)
    [kept] = load_build_records(cache)
    assert kept.record.manifest_digest == zstd_build["manifest"]
    for name in kept.record.inputs:
        assert (cache / "blobs" / "sha256" / name).is_file()
    for key in kept.record.trees:
        assert (cache / "trees" / key / "tree").is_dir()
    for digest in kept.record.blobs:
        assert (cache / "oci" / "blobs" / "sha256" / digest.removeprefix("sha256:")).is_file()
    # the order: trees before input blobs before the layer store
    kinds = [item["kind"] for item in report["removals"]]
    assert kinds == sorted(kinds, key=["assembled trees", "git sources", "input blobs", "layer store",
                                       "build records"].index)
    # nothing the kept build used is gone: the rebuild takes every layer from the cache
    again = _build(cache, tmp_path / "again", "zstd", capsys)
    assert again["manifest"] == zstd_build["manifest"]
    assert all(layer["cached"] for layer in again["layers"])


def test_gc_keeps_the_builds_of_a_deployed_image(cache, built, capsys):
    _, gzip_build, _ = built
    deployed = cache.parent / "digests.json"
    deployed.write_text(json.dumps({"manifest": gzip_build["manifest"], "config": gzip_build["config"]}))
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--apply", "--json",
                 "--deployed", str(deployed), "--profiles-dir", str(PROFILES)]) == 0
    assert json.loads(capsys.readouterr().out)["removals"] == []
    assert len(load_build_records(cache)) == 2


def test_gc_keeps_the_builds_of_an_image_an_evidence_record_names(cache, built, tmp_path, capsys):
    """A deployed image known from launch's evidence (profiles/<name>/evidence/*.json)."""
    _, gzip_build, _ = built
    profiles = tmp_path / "profiles"
    shutil.copytree(FIXTURE, profiles / "fixture")
    (profiles / "fixture" / "evidence").mkdir()
    (profiles / "fixture" / "evidence" / "deployed.json").write_bytes(dump_record(EvidenceRecord(
        profile="fixture", status="implemented", origin="local", manifest_digest=gzip_build["manifest"],
        config_digest=gzip_build["config"], settings_hash=None, measured=(), recorded="2026-12-02",
        source="the ranks run it")))
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--json", "--profiles-dir", str(profiles)]) == 0
    assert json.loads(capsys.readouterr().out)["removals"] == []
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "1", "--json", "--profiles-dir", str(PROFILES)]) == 0
    assert json.loads(capsys.readouterr().out)["removals"] != []


def test_gc_refuses_bad_retention_and_records(cache, capsys):
    assert main(["cache", "gc", "--cache", str(cache), "--keep", "0"]) == 2
    assert "keep at least the last build" in capsys.readouterr().err
    assert main(["cache", "gc", "--cache", str(cache), "--keep-image", "sha256:abc"]) == 2
    assert "expected sha256:<64 lowercase hex>" in capsys.readouterr().err
    [first, _] = load_build_records(cache)
    first.path.chmod(0o644)
    first.path.write_text(first.path.read_text().replace('"inputs": [', '"inputs": [7, '))
    before = _files(cache)
    assert main(["cache", "gc", "--cache", str(cache), "--apply", "--profiles-dir", str(PROFILES)]) == 2
    assert f"{first.path}: $.inputs[0]: expected a string, got integer 7" in capsys.readouterr().err
    assert _files(cache) == before  # a record it cannot read stops gc before anything goes


def test_gc_without_any_build_record_refuses_and_removes_nothing(cache, capsys):
    remove_tree(cache / "builds")
    before = _files(cache)
    assert main(["cache", "gc", "--cache", str(cache), "--apply", "--profiles-dir", str(PROFILES)]) == 2
    assert "no build record, so gc cannot tell what any build uses" in capsys.readouterr().err
    assert _files(cache) == before


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_cleanup_removes_only_leftovers_no_process_holds(cache, tmp_path, capsys):
    foreign = _foreign(cache)
    hour_ago = time.time() - 7200
    dead = cache / "work" / generated_name("fixture", pid=_dead_pid())
    alive = cache / "work" / generated_name("fixture")
    for path in (dead, alive):
        (path / "trees").mkdir(parents=True)
    stale_lock, held_lock = cache / "locks" / ("a" * 64), cache / "locks" / ("b" * 64)
    stale_lock.parent.mkdir(exist_ok=True)
    for path in (stale_lock, held_lock):
        path.write_bytes(b"")
        os.utime(path, (hour_ago, hour_ago))
    quarantined = cache / "quarantine" / "blobs" / f"{'c' * 64}.20261202T000000Z"
    quarantined.parent.mkdir(parents=True)
    quarantined.write_bytes(b"rotten")
    free_scratch, busy_scratch = cache / "runtime" / "fixture", cache / "runtime" / "other"
    for path in (free_scratch, busy_scratch):
        (path / "root").mkdir(parents=True)
        (path / LOCK_NAME).write_text("1\n")
    received = tmp_path / "received"
    received.mkdir()
    found_aside = received / "image.tar.mismatch-20261202T000102Z"  # found under the name: maybe the operator's
    found_aside.write_bytes(b"wrong copy")
    mismatch = received / ".image.tar.partial.mismatch-20261202T000102Z"  # received wrong: the receiver's
    mismatch.write_bytes(b"wrong bytes received")
    receiver_lock = received / ".image.tar.lock"
    receiver_lock.write_bytes(lock_record(received / "image.tar", _dead_pid()))
    os.utime(receiver_lock, (hour_ago, hour_ago))
    (received / "image.tar").write_bytes(b"the good copy")
    leftovers = {dead, stale_lock, quarantined, free_scratch, mismatch, receiver_lock}
    with open(held_lock) as lock, open(busy_scratch / LOCK_NAME) as busy:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fcntl.flock(busy, fcntl.LOCK_EX)
        before = _files(cache)
        assert main(["cache", "cleanup", "--cache", str(cache), "--received", str(received), "--json"]) == 0
        planned = {Path(item["path"]) for item in json.loads(capsys.readouterr().out)["removals"]}
        assert planned == leftovers
        assert _files(cache) == before and mismatch.exists()  # dry run
        assert main(["cache", "cleanup", "--cache", str(cache), "--received", str(received), "--apply"]) == 0
        assert "6 entries removed" in capsys.readouterr().out
    assert not any(path.exists() for path in leftovers)
    assert all(path.exists() for path in (*foreign, alive, held_lock, busy_scratch, received / "image.tar", found_aside))


def test_verify_quarantines_an_altered_blob_and_du_shows_it(cache, capsys):
    store = cache / "oci" / "blobs" / "sha256"
    victim = next(path for path in sorted(store.iterdir()) if len(path.name) == 64)
    victim.chmod(0o644)
    victim.write_bytes(victim.read_bytes() + b"!")
    assert main(["cache", "verify", "--cache", str(cache)]) == 1
    out = capsys.readouterr().out
    assert f"ALTERED {victim}: its bytes hash to sha256 " in out and "1 altered" in out
    assert not victim.exists()
    [moved] = (cache / "quarantine" / "oci-blobs").iterdir()
    assert moved.name.startswith(victim.name + ".")
    assert not (cache / "oci" / "verified" / victim.name).exists()
    assert main(["cache", "du", "--cache", str(cache), "--json"]) == 0
    kinds = json.loads(capsys.readouterr().out)["kinds"]
    assert kinds["quarantine"]["entries"] == 1 and kinds["quarantine"]["leftover_bytes"] > 0
    assert main(["cache", "verify", "--cache", str(cache)]) == 0
    assert main(["cache", "du", "--cache", str(cache / "absent")]) == 2


@pytest.mark.parametrize("pid", [2**31, 10**30])
def test_a_leftover_named_with_a_pid_no_process_can_have_is_a_dead_ones(cache, capsys, pid):
    """os.kill of a number that does not fit a pid_t raised OverflowError out of every
    `cache` command that scans the cache (du, verify, gc, cleanup); no process can have
    that PID, so the entry is a dead run's."""
    leftover = cache / "work" / generated_name("fixture", pid=pid)
    (leftover / "trees").mkdir(parents=True)
    partial = cache / "partial" / f"{'d' * 64}.import.{pid}.0"
    partial.parent.mkdir(exist_ok=True)
    partial.write_bytes(b"x")
    for command in (["du"], ["verify"], ["gc"]):
        assert main(["cache", *command, "--cache", str(cache)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert main(["cache", "cleanup", "--cache", str(cache), "--json"]) == 0
    planned = {Path(item["path"]) for item in json.loads(capsys.readouterr().out)["removals"]}
    assert leftover in planned


def _synthetic_cache(root: Path, git_tree: str) -> Path:
    """A cache with one build record (it used git tree ``git_tree``) and nothing else."""
    cache = root / "synthetic"
    (cache / "builds" / "p").mkdir(parents=True)
    (cache / ".sparkflake-cache").touch()
    record = {"schema": "sparkflake.build-record/v1", "profile": "p", "built_at": "2026-12-01T00:00:00Z",
              "manifest_digest": "sha256:" + "a" * 64, "config_digest": "sha256:" + "a" * 64,
              "inputs": [], "git_trees": [git_tree], "trees": [], "blobs": []}
    (cache / "builds" / "p" / "20261201T000000Z-aaaaaaaaaaaa.json").write_text(json.dumps(record))
    (cache / "git" / "commits").mkdir(parents=True)
    return cache


_LIMITED = "import resource; resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20)); "


def _limited_child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a child with a timeout and an address-space limit: an unbounded read of
    a huge file or /dev/zero fails there (MemoryError) instead of exhausting this machine,
    a hang on a FIFO times out."""
    return subprocess.run([sys.executable, "-c", _LIMITED + script, *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_gc_reads_a_commit_record_only_from_a_small_regular_file(tmp_path):
    """A FIFO at git/commits/<rev> hung gc, a symlink to /dev/zero or a huge file was read
    whole (MemoryError, gigabytes resident): neither is a commit record now."""
    tree = "1" * 40
    cache = _synthetic_cache(tmp_path, tree)
    commits = cache / "git" / "commits"
    os.mkfifo(commits / ("0" * 40))
    (commits / ("2" * 40)).symlink_to("/dev/zero")
    with open(commits / ("3" * 40), "wb") as huge:  # sparse: no disk space taken
        huge.write(f"tree {tree}\n".encode())
        huge.truncate(1 << 30)
    (commits / ("4" * 40)).write_text(f"tree {tree}\n")  # a real record, of the kept build's tree
    (commits / ("5" * 40)).write_text(f"tree {'6' * 40}\n")  # a real record no kept build used
    result = _limited_child("import sys; from sparkflake.cli import main; sys.exit(main(sys.argv[1:]))",
                            "cache", "gc", "--cache", str(cache), "--json", "--profiles-dir", str(PROFILES))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    removed = {Path(item["path"]).name for item in report["removals"]}
    # the oversized file is no record: it names no kept tree, so it goes; the FIFO and the
    # symlink are not fetch.git's (not entries at all), so they stay
    assert removed == {"3" * 40, "5" * 40}


def test_a_commit_record_that_is_no_small_regular_file_names_no_tree(tmp_path):
    fifo, zero, big, good = (tmp_path / name for name in ("fifo", "zero", "big", "good"))
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    big.write_text(f"tree {'1' * 40}\n" + " " * 8192)  # past the bound: not read whole
    good.write_text(f"tree {'1' * 40}\n")
    result = _limited_child("import sys; from pathlib import Path; "
                            "from sparkflake.fetch.git import recorded_tree; "
                            "print([recorded_tree(Path(path)) for path in sys.argv[1:]])",
                            *map(str, (fifo, zero, big, tmp_path, good)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([None, None, None, None, "1" * 40])


@settings(max_examples=200, deadline=None)
@given(content=st.binary(max_size=200))
def test_any_commit_record_names_a_tree_or_none(tmp_path_factory, content: bytes):
    from sparkflake.fetch.git import recorded_tree

    path = tmp_path_factory.mktemp("commit") / ("0" * 40)
    path.write_bytes(content)
    tree = recorded_tree(path)
    assert tree is None or (content.startswith(b"tree ") and tree == content[5:].decode("ascii").strip())
