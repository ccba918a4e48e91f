"""The remote command OpenSSH hands to a rank's login shell (``$SHELL -c STRING``): every
shell a rank may log in with parses ``remote_command(words)`` back into ``words``. The
shells run here for real (bin/debian-packages.txt installs zsh and fish); fish reads \\\\
and \\' inside single quotes, where POSIX shells read nothing, and zsh expands a word
that begins with "=", so shlex.join's string is not safe for them."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.distribute.ssh import remote_command

SHELLS = ("/bin/sh", "/bin/bash", "/usr/bin/zsh", "/usr/bin/fish")
# what an argv word can hold: any character but NUL (and no lone surrogate: argv is bytes)
_WORDS = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
                  max_size=5)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fish writes its configuration and history below HOME and XDG_*: a directory of the
    test run's, never the machine's (a HOME of /nonexistent would be created)."""
    return tmp_path_factory.mktemp("shell-home")


def shell_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"), "LC_ALL": "C.UTF-8"}


def parsed_by(shell: str, command: str, home: Path) -> list[str]:
    """The words ``shell -c`` runs: printf (coreutils, not a builtin) writes each after a
    sentinel, NUL-terminated."""
    run = subprocess.run([shell, "-c", command], capture_output=True, timeout=30, env=shell_env(home))
    assert run.returncode == 0, (shell, command, run.stderr)
    return [word.decode("utf-8", "surrogateescape") for word in run.stdout.split(b"\0")[1:-1]]


@pytest.mark.parametrize("shell", SHELLS)
@settings(max_examples=25, deadline=None)
@given(words=_WORDS)
@example(words=["a\\", "; touch /tmp/pwned #"])  # fish: 'a\\' would end at the next quote
@example(words=["it's", "\\'", "'\\", "\\\\", ""])
@example(words=["=ls", "%self", "$(id)", "`id`", "~", "*", "{a,b}", "a\nb", "$HOME", "!"])
def test_every_shell_parses_the_remote_command_back_into_its_words(shell: str, home: Path, words: list[str]) -> None:
    command = remote_command(["/usr/bin/printf", "%s\\0", "sentinel", *words])
    assert parsed_by(shell, command, home) == words


def test_plain_words_stay_as_they_are_and_shlex_join_is_not_safe_for_fish(home: Path) -> None:
    assert remote_command(["python3", "-m", "sparkflake.distribute.agent", "--store", "/data/image-store"]) == \
        "python3 -m sparkflake.distribute.agent --store /data/image-store"
    # the case the hunt found: under fish, shlex.join's string runs a second command
    hostile = ["/usr/bin/printf", "%s\\0", "sentinel", "a\\", "; echo INJECTED #"]
    assert parsed_by("/usr/bin/fish", remote_command(hostile), home) == hostile[3:]
    fish = subprocess.run(["/usr/bin/fish", "-c", shlex.join(hostile)], capture_output=True, timeout=30,
                          env=shell_env(home))
    assert b"INJECTED" in fish.stdout or fish.returncode != 0
