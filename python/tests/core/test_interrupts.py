"""SIGINT and SIGTERM held back while a run's directory is made (core/interrupts.py,
core/atomic_write.run_directory): a signal sent inside the hold is delivered after it, where
the caller's cleanup already covers what was made; a build interrupted at every moment is
tests/workflows/test_build_signals.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkflake.core.atomic_write import run_directory
from sparkflake.core.interrupts import interrupts_held


class Raised(Exception):
    pass


@pytest.fixture
def raising_sigterm():
    def handler(signum, frame):
        raise Raised(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_sent_inside_the_hold_is_delivered_after_it(raising_sigterm):
    reached = []
    with pytest.raises(Raised):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler would have raised here, unheld
            reached.append("end of the hold")
    assert reached == ["end of the hold"]
    # the mask is back: a signal now is delivered at once
    with pytest.raises(Raised):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)


def test_a_signal_while_the_run_directory_is_made_leaves_nothing(tmp_path, raising_sigterm, monkeypatch):
    import sparkflake.core.atomic_write as atomic_write

    made = atomic_write.make_run_directory

    def make_then_signal(parent, name):
        path = made(parent, name)
        os.kill(os.getpid(), signal.SIGTERM)  # lands right after the mkdir, before any caller names it
        return path

    monkeypatch.setattr(atomic_write, "make_run_directory", make_then_signal)
    with pytest.raises(Raised):
        with run_directory(tmp_path, "run"):
            pytest.fail("the body runs after the pending signal is delivered, never before")
    assert list(tmp_path.iterdir()) == []


def test_the_run_directory_is_removed_whatever_ends_the_body(tmp_path):
    with pytest.raises(ValueError):
        with run_directory(tmp_path, "run") as work:
            (work / "partial").write_bytes(b"half")
            raise ValueError("stage failed")
    assert list(tmp_path.iterdir()) == []
    with run_directory(tmp_path, "run") as work:
        assert work.is_dir() and work.parent == tmp_path and work.name.startswith("run.")
    assert list(tmp_path.iterdir()) == []



# A SIGTERM raised (as the CLI raises it) at the one step of ProcessPoolExecutor.submit where
# the work item is recorded but its id not queued yet: run in a process of its own, since the
# unheld pool never ends.
_SUBMIT_SCENARIO = """
import os, queue, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from sparkflake.core import worker_processes

class Raised(Exception):
    pass

def handler(signum, frame):
    raise Raised(signum)

class SignalledQueue(queue.Queue):
    puts = 0

    def put(self, item, block=True, timeout=None):
        SignalledQueue.puts += 1
        if SignalledQueue.puts == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the second work id is not queued yet
        super().put(item, block, timeout)

def blocked():
    return sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))

signal.signal(signal.SIGTERM, handler)
if sys.argv[1] == "worker_pool":
    pool = worker_processes.worker_pool(2)
else:
    pool = ProcessPoolExecutor(2, initializer=worker_processes.die_with_parent, initargs=(os.getpid(),))
pool._work_ids = SignalledQueue()
try:
    with pool:
        first = pool.submit(blocked)
        pool.submit(blocked)
        time.sleep(5)
except Raised:
    print("raised after the pool ended; the worker blocked", first.result())
"""


def test_a_signal_inside_a_worker_pools_submit_is_delivered_after_it_and_the_pool_ends(tmp_path):
    script = tmp_path / "scenario.py"
    script.write_text(_SUBMIT_SCENARIO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script), "worker_pool"], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
    assert (done.returncode, done.stdout) == (0, "raised after the pool ended; the worker blocked []\n"), done.stderr
    # the same moment in a bare ProcessPoolExecutor: its shutdown waits forever for the
    # work item that was recorded but never queued (what hung a SIGTERM'd build)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, str(script), "bare"], capture_output=True, timeout=8, env=env, check=False)


HELD_WITH_A_THREAD = """
import os, signal, threading, time
from sparkflake.cli import _signals
from sparkflake.core.interrupts import interrupts_held
waiting = threading.Event()
threading.Thread(target=waiting.wait, daemon=True).start()  # SIGINT unblocked in it, as in a pool's worker
reached = []
try:
    with _signals.InterruptsRaised():
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)  # the main thread blocks it: the kernel gives it to the other
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:  # instructions: CPython would run the handler here
                pass
            reached.append("end of the hold")
except KeyboardInterrupt:
    print("raised after" if reached else "raised inside the hold")
"""


def test_a_signal_the_kernel_gives_another_thread_is_still_held():
    """With the main thread's mask alone, a signal went to another thread and CPython ran the
    handler in the main thread inside the hold: a build's worker process forked inside
    WorkerPool.submit was left waiting for work, and the exit waited for it for ever (a
    full run of test_build_signals; py-spy showed the parent in multiprocessing's exit
    join, the worker in its call queue's get). The CLI's handler defers to the hold."""
    for _ in range(5):
        shown = subprocess.run([sys.executable, "-c", HELD_WITH_A_THREAD], capture_output=True, text=True,
                               timeout=60, check=False)
        assert shown.stdout.strip() == "raised after", shown.stdout + shown.stderr


def test_a_signal_right_after_a_file_is_listed_in_an_outputs_marker_is_delivered_after_its_rename(
    tmp_path, monkeypatch
):
    # a file a command adds to a build's OUT is listed in OUT's marker before it is renamed
    # in; a signal between the two left the marker listing a file OUT did not hold, and the
    # next build refused to replace OUT ("holds files changed since sparkflake wrote them")
    import sparkflake.core.atomic_write as atomic_write
    from sparkflake.cli import main

    out = tmp_path / "out"
    fixture = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
    assert main(["build", str(fixture), "--offline", "-o", str(out), "--cache", str(tmp_path / "cache")]) == 0
    assert (out / atomic_write.OUTPUT_MARKER).is_file()
    listed = atomic_write.record_written_entry

    def list_then_signal(directory, name, staged=None):
        listed(directory, name, staged)
        os.kill(os.getpid(), signal.SIGTERM)  # lands right after the marker is written

    monkeypatch.setattr(atomic_write, "record_written_entry", list_then_signal)

    def handler(signum, frame):
        raise Raised(signum)

    # set after the build: the CLI puts back the handlers from before its import when a
    # command ends, not the ones it found (a fixture's would be gone by now)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(Raised):
            atomic_write.write_bytes_atomic(out / "publish.json", b"{}\n", listed=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (out / "publish.json").read_bytes() == b"{}\n"
    atomic_write.check_replaceable_output(out)  # the marker lists what OUT holds
