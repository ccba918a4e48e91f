"""The command as an operator meets it: every command group loads and documents itself,
usage errors exit 2 without a traceback."""

import subprocess
import sys

import pytest

from sparkflake.cli import build_parser, main


def _commands():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


def test_every_command_group_is_registered():
    assert {"hash", "lock", "profile", "image", "build", "audit", "status", "fetch",
            "launch-rank", "recipe", "fanout", "publish", "replicate", "receipt"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([command, "--help"])
    assert stopped.value.code == 0
    assert command in capsys.readouterr().out


def test_top_level_help_and_usage_errors():
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "--help"], capture_output=True, text=True)
    assert completed.returncode == 0 and "Exit codes" in completed.stdout
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "no-such-command"], capture_output=True, text=True)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli"], capture_output=True, text=True)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
