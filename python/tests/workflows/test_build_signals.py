"""SIGTERM and SIGINT (issue 28, class 7): what `timeout`, systemd and Ctrl-C send end a
real `sparkflake build` of the fixture profile at any moment with 143 / 130, one line on
stderr and no traceback; the staging directory, the run's work directory and its memory
scratch are gone and the previous output is byte for byte what it was (or, the signal held
while the swap ran, the new one is there whole: the same files, a new marker). An interrupt
while the CLI starts (importing its command modules) prints no traceback either."""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkflake.core.atomic_write import OUTPUT_MARKER, check_replaceable_output

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def _cli(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sparkflake.cli", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _tree(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` by relative path, with its sha256."""
    return {str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(directory.rglob("*")) if path.is_file()}


def _image_files(tree: dict[str, str]) -> dict[str, str]:
    return {name: digest for name, digest in tree.items() if name != OUTPUT_MARKER}


def _left_by(pid: int, *places: Path) -> list[Path]:
    return [entry for place in places if place.is_dir() for entry in place.iterdir() if f".pid{pid}." in entry.name]


@pytest.mark.slow
@pytest.mark.parametrize("signum, status, line", [(signal.SIGTERM, 143, "sparkflake: terminated"),
                                                  (signal.SIGINT, 130, "sparkflake: interrupted")])
def test_a_signalled_build_leaves_the_previous_output_and_no_staging(tmp_path, signum, status, line):
    out, cache = tmp_path / "out", tmp_path / "cache"
    first = _cli("build", str(FIXTURE), "-o", str(out), "--cache", str(cache), "--offline")
    assert first.wait(timeout=600) == 0, first.stderr.read() if first.stderr else ""
    previous = _tree(out)
    rng = random.Random(int(signum))
    staged_hits = 0
    for attempt in range(4):
        build = _cli("build", str(FIXTURE), "-o", str(out), "--cache", str(cache), "--offline", "--no-tree-cache")
        deadline = time.monotonic() + 120
        # half the attempts wait until the output is being staged, half signal at a random moment
        while time.monotonic() < deadline and build.poll() is None:
            if attempt % 2 == 0 and _left_by(build.pid, tmp_path):
                time.sleep(rng.uniform(0, 0.05))
                staged_hits += 1
                break
            if attempt % 2 == 1 and time.monotonic() > deadline - 120 + rng.uniform(0.3, 2.5):
                break
            time.sleep(0.002)
        build.send_signal(signum)
        _, error = build.communicate(timeout=120)
        assert "Traceback" not in error, error
        if build.returncode in (0, -signum):
            # it finished first (the build is deterministic: the same output, but for its marker,
            # which records when each file was written), or the signal came while the
            # interpreter exited, after sparkflake's handlers were gone
            assert _image_files(_tree(out)) == _image_files(previous) and _left_by(build.pid, tmp_path) == []
            previous = _tree(out)
            continue
        assert build.returncode == status, error
        assert line in error
        assert _left_by(build.pid, tmp_path, cache / "work", Path("/dev/shm")) == []
        # the previous output; or, a signal held while the swap ran, the new one swapped in
        # whole: the same files, its marker (when each was written) listing them all
        assert _image_files(_tree(out)) == _image_files(previous)
        check_replaceable_output(out)
        previous = _tree(out)
    assert staged_hits >= 1  # at least one signal arrived while the output was staged


# The console script's two lines (pip's and installer's entry-point wrapper), with a mark
# between them: from then on every interrupt is sparkflake's to handle. Before it, the
# interpreter's own start-up (site, encodings) prints what it prints.
CONSOLE_SCRIPT = """
import sys
from sparkflake.cli import main
sys.stderr.write("started\\n"); sys.stderr.flush()
sys.exit(main())
"""


def test_an_interrupt_while_the_cli_starts_prints_no_traceback():
    """The command modules are imported inside ``main`` (most of the start-up time)."""
    command = [sys.executable, "-c", CONSOLE_SCRIPT, "profile", "list", "--profiles-dir", str(FIXTURE.parent)]
    listing = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout
    rng = random.Random(28)
    for _ in range(8):
        started = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert started.stderr is not None and started.stderr.readline() == "started\n"
        time.sleep(rng.uniform(0.0, 0.3))
        started.send_signal(signal.SIGINT)
        output, error = started.communicate(timeout=60)
        assert "Traceback" not in error and "KeyboardInterrupt" not in error, error
        if started.returncode == -signal.SIGINT:
            # the signal came while the interpreter exited, after the command had printed all
            # it prints: CPython's finalization puts SIGINT's default action back
            assert output == listing, error
            continue
        assert started.returncode in (130, 0), error  # interrupted, or done before the signal


def test_an_error_raised_while_an_interrupt_unwinds_is_that_interrupt(capsys):
    """Python's thread pool cut inside Thread.start cannot be joined: the RuntimeError its
    shutdown raises while the interrupt unwinds is reported as the interrupt."""
    import argparse

    from sparkflake.cli._output import run_handler
    from sparkflake.cli._signals import Interrupted, Terminated

    def cut(interrupt: KeyboardInterrupt):
        def handler(_args):
            try:
                raise interrupt
            except KeyboardInterrupt:
                raise RuntimeError("cannot join thread before it is started") from None
        return argparse.Namespace(handler=handler)

    assert run_handler(cut(Interrupted())) == 130 and capsys.readouterr().err == "sparkflake: interrupted\n"
    assert run_handler(cut(Terminated())) == 143 and capsys.readouterr().err == "sparkflake: terminated\n"
    with pytest.raises(RuntimeError, match="not an interrupt"):
        run_handler(argparse.Namespace(handler=lambda _args: (_ for _ in ()).throw(RuntimeError("not an interrupt"))))
