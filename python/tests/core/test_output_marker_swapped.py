"""Two builds into one OUT: the second's check of OUT (its marker read, then its tree
walked) may straddle the first's swap of its new tree into OUT. Seen with two `sparkflake
image build`s into one -o, each with its own blob store (1 run in 25): "holds files changed
since sparkflake wrote them (oci/blobs/sha256/…); … pass --force", the marker of one tree
compared with the files of the other. A refusal now stands only when OUT stayed the same
directory throughout; otherwise the check is made again on what is there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkflake.core import output_marker
from sparkflake.core.atomic_write import atomic_directory
from sparkflake.core.errors import InputError
from sparkflake.core.output_marker import check_replaceable_output

pytestmark = pytest.mark.nix_sandbox


def _output(out: Path, mtime_ns: int) -> None:
    """An output holding ``blob`` (the same bytes every time) written at ``mtime_ns``, as
    two layouts hard-linking one blob from two stores hold it."""
    with atomic_directory(out, owned_output=True) as staging:
        (staging / "blob").write_bytes(b"the same layer")
        os.utime(staging / "blob", ns=(mtime_ns, mtime_ns))


def test_a_check_that_straddles_another_builds_swap_is_made_again(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    _output(out, 1_000_000_000)
    read_marker = output_marker.read_marker
    swapped = []

    def read_then_swap(directory: Path):
        marker = read_marker(directory)
        if not swapped:  # the other build swaps its tree in right after this marker was read
            swapped.append(True)
            _output(out, 2_000_000_000)
        return marker

    monkeypatch.setattr(output_marker, "read_marker", read_then_swap)
    check_replaceable_output(out)  # before: InputError "holds files changed since sparkflake wrote them (blob…"
    assert swapped


def test_a_file_changed_in_one_tree_is_still_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _output(out, 1_000_000_000)
    os.utime(out / "blob", ns=(3_000_000_000, 3_000_000_000))
    with pytest.raises(InputError, match="changed since sparkflake wrote them"):
        check_replaceable_output(out)
