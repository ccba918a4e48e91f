"""The lock file of a directory one run holds (``held_alone``, the runtime check's
``--scratch``): the run writes its pid into it, so whatever else stands at its name is
refused, naming the path, and never written through."""

from __future__ import annotations

import os
import stat

import pytest

from sparkflake.core.directory_lock import LOCK_NAME, held_alone
from sparkflake.core.errors import InputError

pytestmark = pytest.mark.nix_sandbox


def test_a_hard_link_as_the_lock_is_refused_and_its_other_name_kept(tmp_path):
    # before: the operator's file was truncated and held the pid afterwards
    victim = tmp_path / "victim.txt"
    victim.write_text("the operator's data\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.link(victim, scratch / LOCK_NAME)
    with pytest.raises(InputError, match=rf"{scratch / LOCK_NAME}: has 2 links"):
        with held_alone(scratch, "another runtime check"):
            pass
    assert victim.read_text() == "the operator's data\n"


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_anything_but_a_regular_file_as_the_lock_is_refused_naming_it(tmp_path, kind):
    # before: a FIFO gave "sparkflake: error: Invalid argument", naming no file
    victim = tmp_path / "victim.txt"
    victim.write_text("the operator's data\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    lock = scratch / LOCK_NAME
    {"fifo": os.mkfifo, "symlink": lambda path: os.symlink(victim, path), "directory": os.mkdir}[kind](lock)
    with pytest.raises(InputError, match=rf"^{lock}: (is|not a regular file)"):
        with held_alone(scratch, "another runtime check"):
            pass
    assert victim.read_text() == "the operator's data\n"
    assert os.path.lexists(lock) and not stat.S_ISREG(os.lstat(lock).st_mode)


def test_the_lock_holds_the_pid_of_its_holder(tmp_path):
    with held_alone(tmp_path / "scratch", "another runtime check"):
        assert (tmp_path / "scratch" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
