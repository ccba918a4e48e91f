"""SIGINT and SIGTERM held back while a run's directory is made (core/interrupts.py,
core/atomic_write.run_directory): a signal sent inside the hold is delivered after it, where
the caller's cleanup already covers what was made; a build interrupted at every moment is
tests/workflows/test_build_signals.py."""

from __future__ import annotations

import os
import signal
import time

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
