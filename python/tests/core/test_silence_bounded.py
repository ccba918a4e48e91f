"""A child run to its end unless it falls silent (``core/silence_bounded.py``): one that keeps
printing is never ended however long it runs, one that stops printing is ended after the
silence, its output is kept within bounds, and an interrupt ends the child with the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkflake.core import silence_bounded
from sparkflake.core.silence_bounded import run_bounded_by_silence


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_child_that_keeps_talking_runs_past_the_silence_limit():
    heard: list[bytes] = []  # each line of either stream, as it came
    began = time.monotonic()
    run = run_bounded_by_silence(_python("""
        import sys, time
        for k in range(8):
            print("blob", k, flush=True)
            print("debug", k, file=sys.stderr, flush=True)
            time.sleep(0.25)
        sys.exit(3)
    """), silence_seconds=1.0, on_line=heard.append)
    assert time.monotonic() - began >= 1.75  # longer than the limit: lines kept it going
    assert run.silent_for is None and run.returncode == 3
    assert run.stdout.splitlines() == [f"blob {k}" for k in range(8)]
    assert run.stderr.splitlines() == [f"debug {k}" for k in range(8)]
    assert [line for line in heard if line.startswith(b"blob")] == [f"blob {k}\n".encode() for k in range(8)]
    assert sorted(heard) == sorted(f"{kind} {k}\n".encode() for kind in ("blob", "debug") for k in range(8))


def test_a_child_that_falls_silent_is_ended_and_its_output_so_far_kept():
    began = time.monotonic()
    run = run_bounded_by_silence(_python("""
        import time
        print("Copying blob sha256:aa", flush=True)
        time.sleep(600)
    """), silence_seconds=0.5)
    assert 0.5 <= time.monotonic() - began < 10
    assert run.silent_for == 0.5 and run.returncode == -signal.SIGKILL
    assert run.stdout == "Copying blob sha256:aa\n"


def test_output_past_the_limit_is_read_and_dropped(monkeypatch):
    monkeypatch.setattr(silence_bounded, "OUTPUT_LIMIT", 1000)
    run = run_bounded_by_silence(_python("""
        import sys
        for k in range(10000):
            sys.stdout.write(f"line {k:05d}\\n")
        sys.stderr.write("x" * 200000)  # one line without end, cut at LINE_LIMIT
    """), silence_seconds=30)
    assert run.returncode == 0 and run.silent_for is None
    assert run.stdout == "".join(f"line {k:05d}\n" for k in range(90))  # 90 whole lines of 11 bytes
    assert run.stderr == ""  # its one (cut) line is 64 KiB, past the 1000 kept


def test_a_missing_program_raises_oserror():
    with pytest.raises(FileNotFoundError):
        run_bounded_by_silence(["/nonexistent/sparkflake-no-such-tool"], silence_seconds=1)


def test_an_interrupt_ends_the_child_with_the_run(tmp_path: Path):
    pid_file = tmp_path / "child.pid"
    child = _python(f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
    """)
    runner = subprocess.Popen(_python(f"""
        from sparkflake.core.silence_bounded import run_bounded_by_silence
        try:
            run_bounded_by_silence({child!r}, silence_seconds=300)
        except KeyboardInterrupt:
            raise SystemExit(130)
    """), env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and runner.poll() is None
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    runner.send_signal(signal.SIGINT)
    assert runner.wait(timeout=30) == 130
    with pytest.raises(ProcessLookupError):  # ended and reaped, not left running or a zombie
        os.kill(child_pid, 0)
