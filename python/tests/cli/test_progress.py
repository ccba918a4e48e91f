"""--progress on a long command: plain lines a log keeps when stderr is not a terminal (a
pipe here), a bar on a terminal (a real pseudo-terminal), and nothing in a log unless asked."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkflake.cli._output import Progress

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
LINE = re.compile(r"^(?P<label>[a-z ]+): (?P<percent>\d{1,3})% \S+/\S+( .+)?$")


def _sparkflake(*argv: str, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *argv], stdout=subprocess.PIPE, stderr=stderr,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("progress")
    built = _sparkflake("build", str(FIXTURE), "--offline", "-o", str(base / "out"), "--cache", str(base / "cache"),
                        "--progress")
    assert built.returncode == 0, built.stderr
    lines = built.stderr.splitlines()
    assert "\r" not in built.stderr and lines
    assert all(LINE.fullmatch(line) and LINE.fullmatch(line)["label"] == "build" for line in lines), lines
    assert any(line.startswith("build: 100% ") and line.endswith(": layer") for line in lines)
    return base / "out"


def test_audit_prints_lines_in_a_log_only_when_asked(out: Path) -> None:
    asked = _sparkflake("audit", str(out / "oci"), "--progress")
    assert asked.returncode == 0, asked.stderr
    lines = asked.stderr.splitlines()
    assert lines and all(LINE.fullmatch(line)["label"] == "audit" for line in lines)
    assert lines[-1].startswith("audit: 100% ")
    quiet = _sparkflake("audit", str(out / "oci"))
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_terminal_gets_a_bar(out: Path) -> None:
    leader, follower = pty.openpty()
    try:
        done = _sparkflake("audit", str(out / "oci"), stderr=follower)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    assert b"\rauditing layers [" in shown and b"] 100% " in shown and b"\n" not in shown.rstrip(b"\r\n")


def test_lines_are_few_per_step_and_name_each_step(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress("build", enabled=True)
    for done in range(0, 1001):
        progress(done * 1024, 1000 * 1024, "layer python-env")
    progress(0, 3, "os-base: layer")
    progress(3, 3, "os-base: layer")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "build: 0% 0B/1000.0KiB layer python-env"
    assert lines[-2:] == ["build: 0% 0B/3B os-base: layer", "build: 100% 3B/3B os-base: layer"]
    assert len(lines) == 11 + 2  # every tenth of the way, and each new step


def test_without_the_flag_a_log_gets_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress("build", enabled=None)
    progress(1, 2, "x")
    progress.phase("probe")
    assert capsys.readouterr().err == ""
