"""How a rank's agent reads its container engine's answers about the service's containers
(``service/rank_state.service_containers``): a container that goes away between ``ps`` and
``inspect`` is asked about again, a bounded number of times, and an answer that is not the
engine's JSON is refused by name. The engine here is a stand-in executable that answers
``ps --quiet`` and ``container inspect`` as podman does (one ID a line; a JSON array of
objects), so that the engine's failure can be made to happen every time; the real
engine's happy path runs in tests/service/test_service_netns.py."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sparkflake.core.container_engine import Engine
from sparkflake.core.errors import InputError
from sparkflake.service.rank_request import RankRequest
from sparkflake.service.rank_state import SERVICE_LABEL, service_containers, watch_container

CONTAINER_ID = "a" * 64


def _engine(tmp_path: Path, inspect_exit: int, inspect_stdout: str) -> tuple[Engine, Path]:
    calls = tmp_path / "calls"
    script = tmp_path / "podman"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:3]) + '\\n')\n"
        f"if sys.argv[1] == 'ps': print({CONTAINER_ID!r}); sys.exit(0)\n"
        f"sys.stdout.write({inspect_stdout!r})\n"
        f"if {inspect_exit}: sys.stderr.write('Error: no such container\\n')\n"
        f"sys.exit({inspect_exit})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return Engine("podman", str(script)), calls


def test_a_container_that_keeps_going_away_is_refused_after_three_tries_not_recursed_on(tmp_path):
    engine, calls = _engine(tmp_path, 125, "")
    with pytest.raises(InputError, match="podman container inspect: Error: no such container"):
        service_containers(engine, "glm")
    assert calls.read_text().splitlines() == ["ps --all", "container inspect"] * 3


@pytest.mark.parametrize(("answer", "refusal"), [
    ("not json", "not JSON"), ("[" * 100_000, "not JSON"), ("{}", "expected a JSON array of containers"),
])
def test_an_inspect_answer_that_is_not_a_json_array_is_refused_by_name(tmp_path, answer, refusal):
    engine, _ = _engine(tmp_path, 0, answer)
    with pytest.raises(InputError, match=f"^podman container inspect: {refusal}"):
        service_containers(engine, "glm")


def test_items_of_the_array_that_are_not_objects_are_no_containers(tmp_path):
    engine, _ = _engine(tmp_path, 0, '[1, "x", null]')
    assert service_containers(engine, "glm") == []


def test_the_engine_s_description_of_a_service_container_is_read(tmp_path):
    described = [{"Id": CONTAINER_ID, "Name": "/glm-r0", "Image": "sha256:" + "b" * 64,
                  "Config": {"Labels": {SERVICE_LABEL: "glm"}},
                  "State": {"Status": "running", "Running": True, "ExitCode": 0}}]
    engine, _ = _engine(tmp_path, 0, json.dumps(described))
    [container] = service_containers(engine, "glm")
    assert container["name"] == "glm-r0" and container["running"] is True and container["id"] == CONTAINER_ID


# ---- a container name is never read as the engine's flag ----------------------------------------


def test_a_watched_name_like_a_flag_is_no_flag_to_the_real_engine(tmp_path):
    """The name a watch waits on comes from the controller, which read it in the rank's own
    reply. ``podman wait -l`` is ``--latest``: before, a name "-l" waited for whichever
    container was created last (here a foreign one) and reported its exit as the service's."""
    runroot = Path(tempfile.mkdtemp(prefix="sfk-w-", dir="/tmp"))  # podman: a runroot under 50 characters
    try:
        engine_args = ("--root", str(tmp_path / "root"), "--runroot", str(runroot), "--storage-driver", "vfs",
                       "--cgroup-manager", "cgroupfs", "--events-backend", "file")
        podman = ["podman", *engine_args]
        (tmp_path / "empty").mkdir()
        subprocess.run(["tar", "-C", str(tmp_path / "empty"), "-cf", str(tmp_path / "empty.tar"), "."], check=True)
        subprocess.run([*podman, "import", "-q", str(tmp_path / "empty.tar"), "sfk-empty"], check=True,
                       capture_output=True)
        subprocess.run([*podman, "create", "--name", "foreign", "sfk-empty", "/x"], check=True, capture_output=True)
        request = RankRequest(service="glm", deployment="d1", rank=0, profile="glm53-dflash7",
                              env_file=str(tmp_path / "runtime.env"), engine="podman", engine_args=engine_args,
                              state_dir=str(tmp_path / "state"))
        watched = watch_container(request, "-l")
        assert watched["container"] == "-l"
        assert 'no container with name or ID "-l"' in watched["exit_code"], watched  # not the foreign one's 0
    finally:
        subprocess.run(["podman", "--root", str(tmp_path / "root"), "--runroot", str(runroot), "--storage-driver",
                        "vfs", "rm", "--all", "--force"], capture_output=True)
        shutil.rmtree(runroot, ignore_errors=True)
