"""`sparkflake service up` and `service down` on one site at once. Seen with four netns
ranks (3 runs in 6): down passed ranks 3 and 2 before up had started them ("stopped nothing")
and stopped ranks 1 and 0 after rank 0 was ready; up said ready (exit 0), down said ok
(exit 0), and ranks 2 and 3 were left running. A down now counts itself on each rank, and a
start admitted before it creates no container: the up fails and rolls back. Here the
interleaving is held in place by gates in the ranks' agent command, so it happens on every
run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from fixtures.service_site import ServiceWorld, world  # noqa: F401 - the module's four-rank world


def gated_agent(gates: Path) -> tuple[str, ...]:
    """The service's agent (with the test's PYTHONPATH, which SSH does not carry), made to
    wait: a start on ranks 1..3 until ``gates/ranks-passed``, and a stop of the whole
    service on rank 0 (a down's; a roll back names its deployment) until ``gates/up-done``."""
    python_path = os.environ.get("PYTHONPATH")
    exported = f"export PYTHONPATH='{python_path}'; " if python_path else ""
    script = (
        f'{exported}case "$1 $3" in '
        f"\"start \"*'\"rank\":0,'*) ;; "
        f'"start "*) while [ ! -e {gates}/ranks-passed ]; do sleep 0.05; done;; '
        f"\"stop \"*'\"rank\":0,'*) case \" $* \" in *\" --deployment \"*) ;; "
        f"*) while [ ! -e {gates}/up-done ]; do sleep 0.05; done;; esac;; "
        'esac; exec "$0" -m sparkflake.service.agent "$@"'
    )
    return ("/bin/sh", "-c", script, sys.executable)


def service_command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "service", *args, "--progress", "json", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_down_during_an_up_leaves_no_rank_running(world: ServiceWorld, tmp_path: Path) -> None:  # noqa: F811
    world.reset()
    gates = tmp_path / "gates"
    gates.mkdir()
    site = world.site_file(tmp_path / "site.toml", agent=gated_agent(gates))
    up = service_command("up", str(site))
    assert up.stderr is not None
    up_events: list[dict] = []

    def follow_up() -> None:  # the down's last stop waits until the up is ready or has failed
        assert up.stderr is not None
        for line in up.stderr:
            if line.startswith("{"):
                up_events.append(json.loads(line))
                if up_events[-1]["phase"] in ("ready", "failed"):
                    break
        (gates / "up-done").touch()

    for line in up.stderr:  # rank 0 started; the others wait at their gate
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("phase") == "started" and event.get("rank") == 0:
            break
    following = threading.Thread(target=follow_up)
    following.start()
    down = service_command("down", str(site))
    assert down.stderr is not None
    for line in down.stderr:  # last rank first: ranks 3, 2 and 1 passed, where nothing runs yet
        if line.startswith("{") and json.loads(line).get("rank") == 1:
            break
    (gates / "ranks-passed").touch()
    down_out, down_err = down.communicate(timeout=300)
    up_out, up_err = up.communicate(timeout=300)
    following.join(60)
    assert down.returncode == 0, down_err
    assert [world.containers(index) for index in range(4)] == [[]] * 4, (up_out[-2000:], down_out[-2000:])
    assert up.returncode == 1 and "a `service down` stopped the service on this rank" in up_err, up_err


def earlier_agent() -> tuple[str, ...]:
    """The agent of a sparkflake from before the count of downs, as ``service down`` meets
    it: ``stop --down`` refused as argparse refuses it (exit 2, the lines that version's
    agent wrote), every other command today's agent."""
    python_path = os.environ.get("PYTHONPATH")
    exported = f"export PYTHONPATH='{python_path}'; " if python_path else ""
    refusal = ("usage: sparkflake.service.agent [-h]",
               "                                {admit,start,commit,kept,status,stop,watch}",
               "                                ...",
               "sparkflake.service.agent: error: unrecognized arguments: --down")
    script = (f'{exported}case "$1 $* " in "stop "*" --down "*) '
              f"printf '%s\\n' {' '.join(repr(line) for line in refusal)} >&2; exit 2;; esac; "
              'exec "$0" -m sparkflake.service.agent "$@"')
    return ("/bin/sh", "-c", script, sys.executable)


def test_a_down_stops_ranks_whose_agent_takes_no_count_of_downs(world: ServiceWorld, tmp_path: Path) -> None:  # noqa: F811
    # a controller upgraded before its ranks: its down passes --down, which their agent
    # refuses; before, each such rank's stop failed and its container was left running
    world.reset()
    site = world.site_file(tmp_path / "site.toml", agent=earlier_agent())
    up_out, up_err = service_command("up", str(site)).communicate(timeout=300)
    assert all(world.containers(index) for index in range(4)), (up_out[-2000:], up_err[-2000:])
    down = service_command("down", str(site))
    down_out, down_err = down.communicate(timeout=300)
    assert down.returncode == 0, down_err
    assert [rank["ok"] for rank in json.loads(down_out)["ranks"]] == [True] * 4
    assert [world.containers(index) for index in range(4)] == [[]] * 4
