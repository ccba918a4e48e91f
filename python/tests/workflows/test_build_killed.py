"""A build killed with SIGKILL at random moments leaves no process behind (its wheel
install workers die with it), and the next build removes the work and scratch
directories the dead one left, never those of a live build; a good build leaves none."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sparkflake.core.atomic_write import generated_name, host_tag, remove_dead_run_directories
from sparkflake.workflows.build import BuildRequest, build_profile

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
CHILD = """
import sys
from pathlib import Path
from sparkflake.workflows.build import BuildRequest, build_profile
build_profile(BuildRequest(profile=sys.argv[1], output_dir=Path(sys.argv[2]), cache_root=Path(sys.argv[3]),
                           offline=True, use_tree_cache=False))
"""


def processes_marked(marker: str) -> list[int]:
    """Every process whose environment carries ``marker`` (the build and what it forked)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0"):
            found.append(int(entry))
    return found


def children_of(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry))
    return children


def kill_build(tmp_path: Path, cache: Path, rng: random.Random, index: int) -> tuple[bool, list[int]]:
    """Start a build, SIGKILL it (while its workers run, or at a random moment), and
    return whether it had workers and which marked processes are left 3 s later."""
    marker = f"SPARKFLAKE_KILL_TEST={uuid.uuid4()}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    build = subprocess.Popen([sys.executable, "-c", CHILD, str(FIXTURE), str(tmp_path / f"out{index}"), str(cache)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    had_workers = False
    deadline = time.monotonic() + (rng.uniform(0.2, 3.0) if index % 2 else 60)
    while time.monotonic() < deadline and build.poll() is None:
        if children_of(build.pid):
            had_workers = True
            if index % 2 == 0:  # even runs: kill while the workers run
                time.sleep(rng.uniform(0, 0.2))
                break
        time.sleep(0.005)
    build.send_signal(signal.SIGKILL)
    build.wait()
    end = time.monotonic() + 3
    while processes_marked(marker) and time.monotonic() < end:
        time.sleep(0.05)
    return had_workers, processes_marked(marker)


@pytest.mark.slow
def test_sigkilled_builds_leave_no_process_and_the_next_build_cleans_up(tmp_path):
    cache = tmp_path / "cache"
    rng = random.Random(14)
    with_workers = 0
    for index in range(8):
        had_workers, left = kill_build(tmp_path, cache, rng, index)
        with_workers += had_workers
        for pid in left:  # do not leave them to the rest of the suite
            os.kill(pid, signal.SIGKILL)
        assert left == [], f"kill {index}: processes left behind: {left}"
    assert with_workers >= 4  # the kills did hit the worker pool
    work = cache / "work"
    work.mkdir(exist_ok=True)
    # what the kills left (a kill before the work directory was made leaves none), and one
    # of a process known to be gone, so the cleanup always has something to remove
    dead = subprocess.Popen(["true"])
    dead.wait()
    (work / generated_name("fixture", pid=dead.pid) / "trees").mkdir(parents=True)
    left_by_kills = [p.name for p in work.iterdir()]
    # a live build's directory (here: this test process's pid) must survive the cleanup
    live = work / generated_name("fixture")
    live.mkdir()
    other_host = work / generated_name("fixture", pid=1).replace(f".{host_tag()}.", f".x{host_tag()}.")
    other_host.mkdir()
    build_profile(BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "good", cache_root=cache, offline=True))
    assert sorted(p.name for p in work.iterdir()) == sorted([live.name, other_host.name]), left_by_kills
    scratch = [p for p in Path("/dev/shm").glob(f"sparkflake-fixture.{host_tag()}.pid*")
               if not Path(f"/proc/{p.name.split('.pid')[1].split('.')[0]}").exists()]
    assert scratch == []  # the memory scratch of the dead builds is gone too


def test_only_dead_runs_of_this_host_are_removed(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    dead_name = generated_name("p", pid=dead.pid)
    names = {
        "dead": dead_name,
        "live": generated_name("p"),
        "other-host": dead_name.replace(f".{host_tag()}.", f".elsewhere-{socket.gethostname()[:3]}x."),
        "other-shape": "p.notarun",
        # an operator's directory of the same shape whose check does not hold
        "look-alike": f"p.{host_tag()}.pid{dead.pid}.0123456789abcdef",
        "other-prefix": generated_name("q", pid=dead.pid),
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text("x")
    (tmp_path / names["dead"] / "ro").mkdir()
    (tmp_path / names["dead"] / "ro" / "f").write_text("x")
    (tmp_path / names["dead"] / "ro").chmod(0o555)
    removed = remove_dead_run_directories(tmp_path, "p.")
    assert [p.name for p in removed] == [names["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for k, n in names.items() if k != "dead")
