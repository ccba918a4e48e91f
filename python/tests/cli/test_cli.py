"""The command as an operator meets it: every command group loads and documents itself,
usage errors exit 2 without a traceback."""

import os
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


def test_verify_imports_only_what_verifying_needs():
    """`sparkflake verify` is timed against `cosign verify` (bench/bench_sign.py): its parser
    imports its own group, not every group's modules, and nothing that only signing
    (PyNaCl, the receipt reader) or pulling (atomic writes) needs."""
    probe = (
        "import sys\n"
        "from sparkflake.cli import build_parser\n"
        "build_parser('verify')\n"
        "import sparkflake.signing.cosign\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(completed.stdout.split())
    assert "sparkflake.cli.verify" in loaded and "sparkflake.oci.remote" in loaded
    needless = {"nacl", "nacl.secret", "cryptography.hazmat.primitives.kdf.scrypt", "sparkflake.cli.sign",
                "sparkflake.compose.receipt", "sparkflake.core.atomic_write", "sparkflake.oci.types",
                "sparkflake.cli.build", "pkgutil", "tempfile", "cryptography.hazmat.primitives.serialization", "shutil"}
    assert needless & loaded == set()


@pytest.mark.parametrize("name", ["_output", "_parsers", "no_such_group", "verify/../sign"])
def test_a_name_that_is_no_command_group_is_a_usage_error(name):
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", name], capture_output=True, text=True)
    assert completed.returncode == 2 and "invalid choice" in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("columns", ["50", "120", "junk", "0"])
def test_help_fits_the_width_columns_says(columns):
    """The help is as wide as $COLUMNS (80 when it is no positive number and stdout is no
    terminal), as argparse makes it through shutil.get_terminal_size."""
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "verify", "--help"], capture_output=True,
                               text=True, check=True, env={**os.environ, "COLUMNS": columns})
    width = int(columns) if columns.isdigit() and int(columns) > 0 else 80
    longest = max(len(line) for line in completed.stdout.splitlines())
    assert width - 12 <= longest <= width - 2
