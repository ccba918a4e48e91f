"""A profile path where something other than a regular file stands is refused saying what
stands there; before, a FIFO, a directory or a symlink to /dev/zero was "no such profile
file", and the operator looked for a file that was there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkflake.core.errors import InputError
from sparkflake.profile.lookup import profile_path


def _place(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")


_KINDS = [("FIFO", "a FIFO"), ("directory", "a directory"), ("zero", "a symlink to a character device")]


@pytest.mark.parametrize(("kind", "shown"), _KINDS)
def test_a_path_given_says_what_stands_there(tmp_path: Path, kind: str, shown: str) -> None:
    given = tmp_path / "mine" / "profile.toml"
    _place(given, kind)
    # the file, or the profile's directory (a directory given is where profile.toml is looked for)
    for text in (str(given), str(given.parent)) if kind != "directory" else (str(given.parent),):
        with pytest.raises(InputError) as refused:
            profile_path(text)
        assert refused.value.message == f"{given}: is {shown}, expected profile.toml (a regular file)"


@pytest.mark.parametrize(("kind", "shown"), _KINDS)
def test_a_name_looked_up_says_what_stands_there(tmp_path: Path, kind: str, shown: str) -> None:
    standing = tmp_path / "profiles" / "odd" / "profile.toml"
    _place(standing, kind)
    with pytest.raises(InputError) as refused:
        profile_path("odd", tmp_path / "profiles")
    assert refused.value.message == f"{standing}: is {shown}, expected profile.toml (a regular file)"


def test_nothing_there_is_still_named_as_missing(tmp_path: Path) -> None:
    (tmp_path / "profiles" / "good").mkdir(parents=True)
    (tmp_path / "profiles" / "good" / "profile.toml").write_text("")
    with pytest.raises(InputError) as refused:
        profile_path("absent", tmp_path / "profiles")
    assert refused.value.message == f"no profile named 'absent' in {tmp_path / 'profiles'} (profiles: good)"
    dangling = tmp_path / "dangling.toml"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match=r"no such profile file"):
        profile_path(str(dangling))
    linked = tmp_path / "linked.toml"  # a symlink to a regular file is that file
    linked.symlink_to(tmp_path / "profiles" / "good" / "profile.toml")
    assert profile_path(str(linked)) == linked
