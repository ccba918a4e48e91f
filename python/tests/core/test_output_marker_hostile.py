"""An output's marker (``.sparkflake-output.json``) is read from a directory anyone may have
written: a marker nested too deeply for the parser, one holding a lone surrogate (a
``\\ud800`` escape, which no UTF-8 encoder writes back) or one listing a chain of
directories deeper than Python's recursion limit is refused or walked without a
traceback, before any work is done."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.atomic_write import atomic_directory, record_written_entry
from sparkflake.core.errors import InputError
from sparkflake.core.output_marker import (
    OUTPUT_MARKER,
    check_entry_if_output,
    check_replaceable_output,
    check_written_entry,
    marker_bytes,
    output_paths,
    read_marker,
)

pytestmark = pytest.mark.nix_sandbox

_KIND = "sparkflake.output-directory"


def _output(out: Path) -> None:
    with atomic_directory(out, owned_output=True) as staging:
        (staging / "digests.json").write_text("{}\n")


def test_a_marker_nested_too_deeply_is_no_marker(tmp_path):
    # before: RecursionError from json.loads in read_marker, through every caller
    out = tmp_path / "out"
    _output(out)
    (out / OUTPUT_MARKER).write_text("[" * 50_000)
    assert read_marker(out) is None
    check_entry_if_output(out, "capabilities.json", "name another file")  # no marker: the operator named it
    with pytest.raises(InputError, match=r"digests\.json: exists and sparkflake did not write it"):
        check_written_entry(out, "digests.json", "name another file")
    with pytest.raises(InputError, match=rf"out: a directory sparkflake did not write \(no {OUTPUT_MARKER}"):
        check_replaceable_output(out)


def test_a_marker_holding_a_lone_surrogate_is_not_ours_and_nothing_fails_after_the_work(tmp_path):
    # before: read_marker took it, and rewriting it (record_written_entry, after an export's
    # archive was written) raised UnicodeEncodeError, leaving the archive unrecorded
    out = tmp_path / "out"
    _output(out)
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    for where in ("paths", "entries", "state"):
        document = json.loads(json.dumps(marker))
        if where == "paths":
            document["paths"]["\ud800x"] = "directory"
        elif where == "entries":
            document["entries"].append("\udfff")
        else:
            document["paths"]["digests.json"] = "symlink \ud800"
        (out / OUTPUT_MARKER).write_text(json.dumps(document))  # ensure_ascii: the escape as \\ud800
        assert read_marker(out) is None, where
        (out / "archive.tar").write_bytes(b"archive")
        record_written_entry(out, "archive.tar")  # not ours: left as it is
        (out / "archive.tar").unlink()


# every category but control characters: surrogates (Cs) included, which st.characters() leaves out
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cc",)), max_size=8)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(_TEXT, max_size=4) | _JSON, paths=st.dictionaries(_TEXT, _TEXT, max_size=4) | _JSON,
       depth=st.integers(0, 3000))
def test_whatever_the_marker_holds_it_is_read_or_refused_and_a_marker_read_is_written_back(
        tmp_path_factory, entries, paths, depth):
    out = tmp_path_factory.mktemp("out")
    document = {"kind": _KIND, "entries": entries, "paths": paths}
    nested = "[" * depth + json.dumps(document) + "]" * depth
    (out / OUTPUT_MARKER).write_text(nested)  # lone surrogates as \\u escapes (json.dumps' ensure_ascii)
    marker = read_marker(out)
    if marker is not None:
        assert depth == 0
        marker_bytes(marker.entries, marker.paths)  # what record_written_entry writes after the work


def _deep_chain(root: Path, depth: int) -> None:
    """``root/d/d/.../d/foreign.txt``, ``depth`` directories deep, each made relative to its
    parent (os.makedirs recurses once per level)."""
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=descriptor)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = below
        with open(os.open("foreign.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=descriptor), "w") as handle:
            handle.write("the operator's\n")
    finally:
        os.close(descriptor)


def _remove_chain(root: Path) -> None:
    """Remove what ``_deep_chain`` made, deepest first: shutil.rmtree (and pytest's cleanup
    of tmp_path with it) recurses once per level in Python 3.11."""
    descriptors = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    while "d" in os.listdir(descriptors[-1]):
        descriptors.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=descriptors[-1]))
    os.unlink("foreign.txt", dir_fd=descriptors[-1])
    for parent, below in zip(reversed(descriptors[:-1]), reversed(descriptors[1:]), strict=True):
        os.close(below)
        os.rmdir("d", dir_fd=parent)
    os.close(descriptors[0])


def test_a_marker_listing_directories_deeper_than_the_recursion_limit_is_walked(tmp_path):
    # before: _unwritten_paths recursed once per level, RecursionError at about 1,000
    out = tmp_path / "out"
    _output(out)
    _deep_chain(out, 1500)
    try:
        paths = {name: state for name, state in output_paths(out).items() if not name.endswith("foreign.txt")}
        (out / OUTPUT_MARKER).write_bytes(marker_bytes(["d", "digests.json"], paths))
        deepest = "/".join(["d"] * 1500) + "/foreign.txt"
        with pytest.raises(InputError, match=rf"out: holds entries sparkflake did not write \({deepest}\)"):
            check_replaceable_output(out)
    finally:
        _remove_chain(out)


def test_the_walk_names_what_it_named_before_in_the_same_order(tmp_path):
    """The explicit stack walks as the recursion did: a directory is entered where it is met,
    and the first five paths not listed, in sorted walk order, are named."""
    out = tmp_path / "out"
    _output(out)
    for name in ("a/x1", "a/b/x2", "a/c", "b1", "c/x3", "c/x4", "c/x5"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("f\n")
    paths = output_paths(out)
    for foreign in ("a/x1", "a/b/x2", "b1", "c/x3", "c/x4", "c/x5"):
        del paths[foreign]
    (out / OUTPUT_MARKER).write_bytes(marker_bytes(["a", "b1", "c", "digests.json"], paths))
    with pytest.raises(InputError, match=r"holds entries sparkflake did not write \(a/b/x2, a/x1, b1, c/x3, c/x4, "
                                         r"\.\.\.\)"):
        check_replaceable_output(out)
