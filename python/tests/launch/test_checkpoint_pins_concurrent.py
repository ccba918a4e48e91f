"""Two `checkpoint pin` runs into one pins file at once (issue 28, class 8): each reads,
merges and writes the file under its update lock, so both roles are in it afterwards.
The test holds the lock while both runs start, so they are certainly concurrent: both
have hashed their checkpoint and wait for the same file when it is released."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from fixtures.launch import DRAFT_FILES, PROFILES, TARGET_FILES, write_checkpoint

from sparkflake.core.directory_lock import updating_file

PROFILE = str(PROFILES / "glm53-dflash7")

def _start_pin(directory: Path, role: str, pins: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "checkpoint", "pin", str(directory),
                             "--role", role, "--profile", PROFILE, "-o", str(pins)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _waiting_on(pid: int, lock: Path) -> bool:
    """Whether process ``pid`` has ``lock`` open (it opens it just before flock)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(Path(f"/proc/{pid}/fd/{fd.name}").resolve() == lock.resolve() for fd in fds.iterdir())
    except OSError:
        return False


def test_two_concurrent_pins_into_one_file_keep_both_roles(tmp_path):
    write_checkpoint(tmp_path / "target", TARGET_FILES)
    write_checkpoint(tmp_path / "draft", DRAFT_FILES)
    pins = tmp_path / "pins.json"
    lock = tmp_path / ".pins.json.sparkflake-lock"
    with updating_file(pins):
        runs = [_start_pin(tmp_path / role, role, pins) for role in ("target", "draft")]
        deadline = time.monotonic() + 60
        while not all(_waiting_on(run.pid, lock) for run in runs):
            assert time.monotonic() < deadline and all(run.poll() is None for run in runs), \
                [run.communicate() for run in runs]
            time.sleep(0.01)
        time.sleep(0.2)  # both are blocked in flock now
        assert not pins.exists()
    for run in runs:
        out, error = run.communicate(timeout=60)
        assert run.returncode == 0, error
    document = json.loads(pins.read_text())
    assert sorted(document["checkpoints"]) == ["draft", "target"]
    assert sorted(row["path"] for row in document["checkpoints"]["target"]["files"]) == sorted(TARGET_FILES)
    assert sorted(row["path"] for row in document["checkpoints"]["draft"]["files"]) == sorted(DRAFT_FILES)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".pins.json.sparkflake-lock", "draft", "pins.json",
                                                                "target"]
