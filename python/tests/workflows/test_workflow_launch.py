"""The launch's workflow (workflows/launch.py): which image is launched, a missing engine
said (not refused) under --dry-run and before the plan, and the one step that writes state
taken only when asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.launch import site_env, write_bound_profile, write_checkpoint, write_env

from sparkflake.core.errors import InputError
from sparkflake.launch.checks import CACHE_ROOT_MARKER
from sparkflake.workflows.launch import LaunchRequest, launch_inputs, plan_rank, start_rank

IMAGE = "sha256:" + "ab" * 32


def _site(tmp_path: Path) -> tuple[Path, Path]:
    """A glm53-mtp5 profile bound to a one-file target, and rank 1's env file."""
    target = write_checkpoint(tmp_path / "target", {"config.json": b"{}"})
    profile = write_bound_profile(tmp_path / "p", "glm53-mtp5", target, None)
    env_file = write_env(tmp_path, site_env(tmp_path, 1, draft=False, NCCL_NET="Socket"))
    return profile, env_file


@pytest.mark.parametrize(("image", "digests", "message"), [
    (IMAGE, "digests.json", "--image and --digests are exclusive"),
    ("sha256:AB", None, "--image 'sha256:AB': expected sha256:<64 lowercase hex>"),
    (None, "absent/digests.json", "--digests absent/digests.json: no such file"),
])
def test_the_image_to_launch_is_refused_when_it_is_not_one(image: str | None, digests: str | None,
                                                           message: str) -> None:
    request = LaunchRequest(rank=0, env_file="runtime.env", image=image, digests_file=digests)
    with pytest.raises(InputError) as raised:
        launch_inputs(request)
    assert raised.value.message == message and raised.value.exit_code == 2


def test_a_missing_engine_is_refused_unless_it_is_a_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman, no docker
    request = LaunchRequest(rank=0, env_file="runtime.env", engine="docker", image=IMAGE)
    with pytest.raises(InputError, match=r"no container engine found on PATH \(docker\)"):
        launch_inputs(request)
    inputs = launch_inputs(LaunchRequest(rank=0, env_file="runtime.env", engine="docker", image=IMAGE, dry_run=True))
    assert inputs.engine is None and inputs.image == IMAGE
    assert inputs.engine_problem is not None and inputs.engine_problem.check_id == "engine.detected"


def test_the_plan_writes_no_state_and_the_start_marks_the_cache_root(tmp_path: Path) -> None:
    profile, env_file = _site(tmp_path)
    request = LaunchRequest(rank=1, env_file=str(env_file), profile=str(profile), dry_run=True)
    inputs = launch_inputs(request)
    plan = plan_rank(request, inputs)
    assert plan.resolution.rank == 1 and plan.argv[0].endswith(("podman", "docker"))
    assert not (tmp_path / "cache").exists()  # checked, nothing written
    decisions = start_rank(plan)
    marker = json.loads((tmp_path / "cache" / CACHE_ROOT_MARKER).read_bytes())
    assert marker["physical_rank"] == 1 and marker["profile"] == "glm53-mtp5"
    assert {decision.path for decision in decisions} >= {str(plan.jit_dir)}


def test_the_cli_says_the_missing_engine_before_the_plans_report(tmp_path: Path) -> None:
    profile, env_file = _site(tmp_path)
    empty = tmp_path / "bin"
    empty.mkdir()
    completed = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "1", str(env_file), "--profile", str(profile),
         "--engine", "docker", "--dry-run", "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": str(empty)}, check=False,
    )
    assert completed.returncode == 2, completed.stderr  # checks that cannot judge without an engine
    lines = completed.stderr.splitlines()
    assert lines[0] == "sparkflake: [engine.detected] no container engine found on PATH (docker)"
    assert lines[-1].startswith("sparkflake: refusing to start rank 1: failed check(s): ")
    report = json.loads(completed.stdout)
    assert report["engine"] is None and report["rank"] == 1 and not report["ok"]
    assert not (tmp_path / "cache").exists()
