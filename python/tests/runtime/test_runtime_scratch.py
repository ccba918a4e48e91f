"""The runtime check's scratch (``--scratch DIR``, default ``CACHE/runtime/<profile>``): it
unpacks into and replaces what it keeps there, so it works only in an absent or empty
directory (then marked) or in its own scratch; an operator's directory is refused before
anything in it is touched, however its entries are named. Images are built by sparkflake's
own OCI builder (no Python in them: a check that gets past its scratch stops at
``runtime.interpreter``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from fixtures.one_layer_image import write_one_layer_image

from sparkflake.cli import main
from sparkflake.core.directory_lock import LOCK_NAME
from sparkflake.runtime.scratch import SCRATCH_MARKER


def _image(tmp: Path) -> Path:
    return write_one_layer_image(tmp, {"etc/os-release": b"ID=none\n"})[0]


def _snapshot(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            for path in sorted(root.rglob("*"))}


def _check(image: Path, *options: str, timeout: float = 600) -> tuple[int, list[dict], str]:
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "runtime", "check", str(image), "--profile",
                                "glm53-dflash7", "--json", *options], capture_output=True, text=True, timeout=timeout,
                               check=False)
    assert "Traceback" not in completed.stderr
    failed = [c for c in json.loads(completed.stdout)["checks"] if c["status"] in ("fail", "error")]
    return completed.returncode, failed, completed.stderr


def _operators(directory: Path, names: list[str]) -> None:
    for name in names:
        (directory / name).mkdir(parents=True)
        (directory / name / "notes.txt").write_text("the operator's\n")


def test_an_operators_directory_as_scratch_is_refused_and_left_as_it_was(tmp_path):
    """V10: `runtime check OUT --scratch DIR` removed DIR/root, DIR/mounts, DIR/pycache,
    DIR/driver and DIR/interpreter-facts.out of an operator's directory, and left its own
    files there."""
    image = _image(tmp_path / "a")
    scratch = tmp_path / "mine"
    _operators(scratch, ["root", "mounts", "pycache", "driver"])
    (scratch / "interpreter-facts.out").write_text("the operator's\n")
    (scratch / "plan.txt").write_text("the operator's\n")
    before = _snapshot(scratch)
    code, failed, _ = _check(image, "--scratch", str(scratch))
    assert code == 2 and [c["id"] for c in failed] == ["runtime.scratch"], failed
    assert f"{scratch}: not a runtime check's scratch: holds plan.txt, which the check did not write" \
        in failed[0]["detail"] and "choose another --scratch" in failed[0]["detail"]
    assert _snapshot(scratch) == before


def test_a_directory_holding_only_names_the_check_writes_is_not_its_scratch_without_proof(tmp_path):
    """Names alone prove nothing: a directory of an operator's ``root/`` and ``driver/`` has no
    marker, no lock file of a check and no unpacked root's record."""
    image = _image(tmp_path / "a")
    scratch = tmp_path / "mine"
    _operators(scratch, ["root", "driver"])
    before = _snapshot(scratch)
    code, failed, _ = _check(image, "--scratch", str(scratch))
    assert code == 2 and [c["id"] for c in failed] == ["runtime.scratch"], failed
    assert f"{scratch}: not a runtime check's scratch (no {SCRATCH_MARKER})" in failed[0]["detail"]
    assert _snapshot(scratch) == before


def test_an_empty_directory_is_adopted_and_a_scratch_of_an_earlier_version_kept(tmp_path):
    image = _image(tmp_path / "a")
    scratch = tmp_path / "empty"
    scratch.mkdir()
    code, failed, _ = _check(image, "--scratch", str(scratch))
    assert failed[0]["id"] == "runtime.interpreter", failed  # past the scratch: this image has no Python
    assert (scratch / SCRATCH_MARKER).is_file() and (scratch / "root" / "etc" / "os-release").is_file()
    # as a check of an earlier version left it: its lock file and unpacked root, no marker
    (scratch / SCRATCH_MARKER).unlink()
    assert (scratch / LOCK_NAME).is_file()
    code, failed, _ = _check(image, "--scratch", str(scratch))
    assert failed[0]["id"] == "runtime.interpreter", failed
    assert (scratch / SCRATCH_MARKER).is_file()


def test_the_default_scratch_in_the_cache_works_and_cleanup_takes_only_a_checks_scratch(tmp_path, capsys):
    image = _image(tmp_path / "a")
    cache = tmp_path / "cache"
    code, failed, _ = _check(image, "--cache", str(cache))
    assert failed[0]["id"] == "runtime.interpreter", failed
    default = cache / "runtime" / "glm53-dflash7"
    assert (default / SCRATCH_MARKER).is_file()
    # a directory in runtime/ with a lock file's name but the operator's files in it is not a scratch
    mine = cache / "runtime" / "mine"
    _operators(mine, ["root"])
    (mine / LOCK_NAME).write_text("1\n")
    (mine / "plan.txt").write_text("the operator's\n")
    assert main(["cache", "cleanup", "--cache", str(cache), "--json"]) == 0
    assert [Path(item["path"]) for item in json.loads(capsys.readouterr().out)["removals"]] == [default]
    assert main(["cache", "cleanup", "--cache", str(cache), "--apply"]) == 0
    assert not default.exists() and (mine / "plan.txt").is_file() and (mine / "root" / "notes.txt").is_file()
    assert sorted(os.listdir(mine)) == [LOCK_NAME, "plan.txt", "root"]


def test_a_cache_that_is_not_sparkflakes_is_refused_before_the_check_writes_into_it(tmp_path):
    # before: `runtime check --cache DIR` wrote DIR/runtime/<profile> and DIR/capabilities/ into any directory
    image = _image(tmp_path / "a")
    mine = tmp_path / "mine"
    _operators(mine, ["runtime"])
    (mine / "thesis.tex").write_text("years of work\n")
    before = _snapshot(mine)
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "runtime", "check", str(image), "--profile",
                                "glm53-dflash7", "--cache", str(mine)], capture_output=True, text=True, timeout=600,
                               check=False)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    assert f"{mine}: not a sparkflake cache: it has no .sparkflake-cache and holds thesis.tex" in completed.stderr
    assert _snapshot(mine) == before


def test_a_fifo_where_the_record_would_be_is_no_proof_and_is_not_waited_on(tmp_path):
    from sparkflake.runtime.rootfs import RECORD_NAME
    from sparkflake.runtime.scratch import scratch_problem

    scratch = tmp_path / "mine"
    (scratch / "root").mkdir(parents=True)
    os.mkfifo(scratch / RECORD_NAME)  # opened for reading without O_NONBLOCK, it would block for ever
    problem = scratch_problem(scratch)
    assert problem is not None and problem.startswith(f"{scratch}: not a runtime check's scratch")


DEEP_RECORD = "[" * 50_000  # deeper than json's parser may recurse


def test_a_record_nested_too_deeply_proves_nothing_and_is_no_traceback(tmp_path, capsys):
    """Before: RecursionError from the proof's json.loads, in the check and in `cache du`,
    `cleanup` and `verify` (which take CACHE/runtime/<profile> for a scratch by it)."""
    from sparkflake.runtime.rootfs import RECORD_NAME

    image = _image(tmp_path / "a")
    scratch = tmp_path / "mine"
    scratch.mkdir()
    (scratch / RECORD_NAME).write_text(DEEP_RECORD)
    code, failed, _ = _check(image, "--scratch", str(scratch))
    assert code == 2 and [c["id"] for c in failed] == ["runtime.scratch"], failed
    assert f"{scratch}: not a runtime check's scratch (no {SCRATCH_MARKER})" in failed[0]["detail"]
    cache = tmp_path / "cache"
    (cache / "runtime" / "p").mkdir(parents=True)
    (cache / ".sparkflake-cache").touch()
    (cache / "runtime" / "p" / RECORD_NAME).write_text(DEEP_RECORD)
    for command in (["du"], ["cleanup", "--apply"], ["verify"]):
        assert main(["cache", *command, "--cache", str(cache)]) == 0, command
    assert (cache / "runtime" / "p" / RECORD_NAME).read_text() == DEEP_RECORD  # not a scratch: not removed


def test_a_symlink_as_the_scratch_is_refused_and_what_it_points_to_left_alone(tmp_path):
    """Before: the default CACHE/runtime/<profile> was followed out of the cache, and the
    check unpacked into (and would replace what was in) the directory it pointed to."""
    image = _image(tmp_path / "a")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache = tmp_path / "cache"
    (cache / "runtime").mkdir(parents=True)
    (cache / ".sparkflake-cache").touch()
    default = cache / "runtime" / "glm53-dflash7"
    default.symlink_to(elsewhere)
    for options in (["--cache", str(cache)], ["--scratch", str(default)]):
        code, failed, _ = _check(image, *options)
        assert code == 2 and [c["id"] for c in failed] == ["runtime.scratch"], failed
        assert f"{default}: is a symlink (to {elsewhere})" in failed[0]["detail"]
        assert os.listdir(elsewhere) == [] and default.is_symlink()


def test_an_earlier_runs_record_that_is_no_file_is_not_waited_on_or_read_whole(tmp_path):
    """The scratch is the check's (its marker), but what stands at the unpacked root's
    record is read bounded: before, a FIFO hung `runtime check`, a symlink to /dev/zero
    gave MemoryError, and deep nesting RecursionError. Such a record is not reused: the
    root is unpacked again."""
    from sparkflake.runtime.rootfs import RECORD_NAME

    image = _image(tmp_path / "a")
    for kind in ("fifo", "zero", "deep"):
        scratch = tmp_path / kind
        scratch.mkdir()
        (scratch / SCRATCH_MARKER).touch()
        if kind == "fifo":
            os.mkfifo(scratch / RECORD_NAME)
        elif kind == "zero":
            os.symlink("/dev/zero", scratch / RECORD_NAME)
        else:
            (scratch / RECORD_NAME).write_text(DEEP_RECORD)
        code, failed, _ = _check(image, "--scratch", str(scratch), timeout=60)
        assert failed[0]["id"] == "runtime.interpreter", (kind, failed)  # unpacked afresh: this image has no Python
        assert json.loads((scratch / RECORD_NAME).read_bytes())["schema"] == "sparkflake.unpacked-root/v1"
