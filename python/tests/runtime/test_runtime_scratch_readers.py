"""What the runtime check reads back after the interpreter check: the bytecode cache's
record in its scratch (another run, or anyone, may have left anything there), the image
interpreter's facts, the probe's progress lines and result (the image's own code writes
them), and the sandboxed run's output file. Each is read with a bound from a regular file
of the check's own: a FIFO is not waited on, a symlink is not followed (nor written
through), deep nesting is no traceback. The sandbox is stood in for by the host's Python
(``sandbox.sandbox_argv`` replaced), so no image with an interpreter is needed."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkflake.core.errors import InputError
from sparkflake.runtime import bytecode, probe_runner, sandbox
from sparkflake.runtime.check_report import CheckReport
from sparkflake.runtime.probe_runner import INSIDE, PROGRESS_FILE, CaseProgress, HostWork, run_probe

DEEP = "[" * 50_000  # deeper than json's parser may recurse


def _returns_while_a_fifo_waits(call: Callable[[], object], fifo: Path) -> bool:
    """``call`` returns within 10 s although ``fifo`` has no writer. If it blocks (the open
    of a FIFO without O_NONBLOCK), a writer is opened to release it, so the test ends."""
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(10)
    if not worker.is_alive():
        return True
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    worker.join(10)
    return False


def _sandbox_standing_in(monkeypatch, facts_line: str, probe_script: str) -> None:
    """``sandbox_argv`` gives the host's Python in place of bwrap and the image's: the
    interpreter's facts call prints ``facts_line``; the probe runs ``probe_script`` with
    WORK, the run directory bound at ``INSIDE``, defined."""

    def argv(root: Path, command: list[str], env: object, binds: list[tuple[Path, str, bool]]) -> list[str]:
        work = next((host for host, inside, _ in binds if inside == INSIDE), None)
        if work is None:
            return [sys.executable, "-c", f"print({facts_line!r})"]
        return [sys.executable, "-c", f"from pathlib import Path\nWORK = Path({str(work)!r})\n{probe_script}"]

    monkeypatch.setattr(sandbox, "sandbox_argv", argv)


def _run_probe(tmp_path: Path) -> CheckReport:
    root, scratch = tmp_path / "root", tmp_path / "scratch"
    root.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    report = CheckReport()
    run_probe(report, root, scratch, "/usr/bin/python3", image_env={}, cases=[], expected_versions={}, timeout=60,
              host_work=HostWork(root, set()), binds=[])
    return report


def _details(report: CheckReport, check_id: str) -> list[str]:
    return [check.detail for check in report.checks if check.id == check_id]


def test_a_result_nested_too_deeply_is_a_failed_probe_not_a_traceback(tmp_path, monkeypatch):
    # before: RecursionError from json.loads of result.json, and from the facts' line
    _sandbox_standing_in(monkeypatch, DEEP, f"(WORK / 'result.json').write_text({DEEP!r})")
    report = _run_probe(tmp_path)
    assert any("printed no interpreter facts" in detail for detail in _details(report, "runtime.bytecode"))
    assert any(detail.startswith("the probe's result is not JSON") for detail in _details(report, "runtime.probe"))


def test_a_result_that_is_a_symlink_is_not_followed_nor_copied(tmp_path, monkeypatch):
    """Before: the image's code could make result.json a symlink to a host file: the check
    read it and copied the whole of it into the scratch's probe-result.json."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    _sandbox_standing_in(monkeypatch, "{}", f"(WORK / 'result.json').symlink_to({str(secret)!r})")
    report = _run_probe(tmp_path)
    detail = _details(report, "runtime.probe")[0]
    assert detail.startswith("the probe's result is not read: ") and "result.json: is a symlink" in detail
    assert not (tmp_path / "scratch" / "probe-result.json").exists()


def test_the_result_kept_in_the_scratch_replaces_a_symlink_there_not_its_target(tmp_path, monkeypatch):
    # before: shutil.copyfile wrote the probe's result through a symlink left at the name
    victim = tmp_path / "victim.txt"
    victim.write_text("the operator's\n")
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "probe-result.json").symlink_to(victim)
    (tmp_path / "scratch" / "pycache.json").symlink_to(victim)
    _sandbox_standing_in(monkeypatch, "{}", "(WORK / 'result.json').write_text('{\"schema\": \"other\"}')")
    _run_probe(tmp_path)
    assert victim.read_text() == "the operator's\n"
    assert (tmp_path / "scratch" / "probe-result.json").read_text() == '{"schema": "other"}'
    assert json.loads((tmp_path / "scratch" / "pycache.json").read_text())["tree"]


@pytest.mark.parametrize("kind", ["deep", "fifo"])
def test_the_bytecode_caches_record_is_read_bounded(tmp_path, kind):
    """Before: pycache.json was read whole with read_bytes(): a FIFO hung the check, deep
    nesting gave RecursionError (and a symlink to /dev/zero was read without end: not
    tried here, it exhausts memory; rootfs.read_scratch_record, the reader, is tested with
    one). Such a record is none: the cache is started afresh."""
    scratch = tmp_path / "scratch"
    (scratch / "pycache").mkdir(parents=True)
    (scratch / "pycache" / "old.pyc").write_bytes(b"x")
    record = scratch / "pycache.json"
    if kind == "deep":
        record.write_text(DEEP)
    else:
        os.mkfifo(record)
    found: list[Path] = []
    assert _returns_while_a_fifo_waits(lambda: found.append(probe_runner._verified_pycache(scratch)), record)
    assert found == [scratch / "pycache"] and os.listdir(scratch / "pycache") == []


def test_the_progress_file_made_a_fifo_is_not_waited_on(tmp_path):
    # before: the poll's open blocked for ever, and the probe's timeout with it
    path = tmp_path / PROGRESS_FILE
    os.mkfifo(path)
    follower = CaseProgress(path, None)
    assert _returns_while_a_fifo_waits(follower, path)
    follower()  # refused once, then not opened again
    assert follower.lines == [f"the probe's progress is not followed: {path}: not a regular file; it is where "
                              "sparkflake keeps the probe's progress lines (remove it)"]


def test_the_progress_file_made_a_symlink_shows_no_host_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    path = tmp_path / PROGRESS_FILE
    path.symlink_to(secret)
    follower = CaseProgress(path, None)
    follower()
    assert len(follower.lines) == 1 and "root:x" not in follower.lines[0] and "is a symlink" in follower.lines[0]


def test_a_progress_line_nested_too_deeply_is_reported_not_raised(tmp_path):
    path = tmp_path / PROGRESS_FILE
    path.write_text(DEEP + "\n")
    follower = CaseProgress(path, None)
    follower()
    assert follower.lines == [f"the probe wrote a progress line that is not JSON: {DEEP.encode()[:200]!r}"]


@pytest.mark.parametrize("kind", ["hard link", "symlink"])
def test_the_sandboxed_runs_output_file_is_never_written_through(tmp_path, kind):
    """Before: opened with open(path, "wb"): the operator's file a hard link or symlink at
    scratch/interpreter-facts.out named was truncated and filled with the run's output."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the operator's\n")
    out = tmp_path / "interpreter-facts.out"
    (os.link if kind == "hard link" else os.symlink)(victim, out)
    with pytest.raises(InputError, match=rf"^{out}: (has 2 links|is a symlink)"):
        sandbox.run_sandboxed([sys.executable, "-c", "print('output')"], timeout=60, stderr_path=out)
    assert victim.read_text() == "the operator's\n"


def test_the_sandboxed_runs_tail_is_read_from_its_own_file(tmp_path):
    """The sandboxed code can write the probe's run directory: before, a symlink it put in
    place of stderr.log had the host file's end shown as the run's output."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    out = tmp_path / "stderr.log"
    script = (f"import os, sys; print('the run wrote this', flush=True); os.unlink({str(out)!r}); "
              f"os.symlink({str(secret)!r}, {str(out)!r})")
    run = sandbox.run_sandboxed([sys.executable, "-c", script], timeout=60, stderr_path=out)
    assert run.returncode == 0 and run.stderr_tail == "the run wrote this\n"


def test_the_interpreters_facts_are_read_back_and_their_file_removed(tmp_path, monkeypatch):
    facts = {"magic": "a70d0d0a", "cache_tag": "cpython-311", "optimize": 0, "dont_write_bytecode": False,
             "path": ["/usr/lib/python3.11"]}
    _sandbox_standing_in(monkeypatch, json.dumps(facts), "")
    found = bytecode.interpreter_facts(tmp_path, "/usr/bin/python3", {}, tmp_path)
    assert isinstance(found, bytecode.InterpreterFacts) and found.cache_tag == "cpython-311"
    assert not (tmp_path / "interpreter-facts.out").exists()
