"""A tree's names reach a layer as the host's bytes: scan_layer_input reads names and
symlink targets as Python decoded them with its file system encoding, which is the host's
bytes in UTF-8 only when that encoding is UTF-8. Under another (an ISO-8859-1 locale,
LC_ALL=C with PYTHONUTF8=0) a non-ASCII name is refused rather than stored as other bytes
(an ISO-8859-1 locale made "é", c3 a9 on disk, c3 83 c2 a9 in the layer: another diffID)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci.layer_input import LayerInput, TreeSource
from sparkflake.oci.layer_tree import scan_layer_input
from sparkflake.oci.tar_stream import encode_name

# one path component, not ASCII, encodable in UTF-8 and short enough for any file system
NAMES = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="/\0"), min_size=1, max_size=20
).filter(lambda name: not name.isascii() and len(name.encode("utf-8")) <= 200)


def _tree(directory: str, name: str) -> Path:
    tree = Path(directory) / "tree"
    tree.mkdir()
    (tree / name).write_bytes(b"x")
    (tree / "link").symlink_to(name)
    return tree


@settings(max_examples=40, deadline=None)
@given(name=NAMES)
def test_a_non_ascii_name_and_link_target_are_stored_as_the_hosts_bytes(name: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        tree = _tree(directory, name)
        on_disk = {raw for raw in os.listdir(os.fsencode(tree))}
        entries = {scanned.entry.path: scanned.entry for scanned in scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),)))}
        assert {encode_name(path) for path in entries} == on_disk
        assert encode_name(entries["link"].link_target or "") == os.readlink(os.fsencode(tree / "link"))


@settings(max_examples=40, deadline=None)
@given(name=NAMES, encoding=st.sampled_from(["iso8859-1", "ascii", "cp1252"]))
def test_under_another_file_system_encoding_a_non_ascii_name_is_refused(name: str, encoding: str) -> None:
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        tree = _tree(directory, name)
        patch.setattr(sys, "getfilesystemencoding", lambda: encoding)
        with pytest.raises(InputError, match=f"file system encoding is {encoding}, not UTF-8"):
            scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),)))
        (tree / name).unlink()  # the symlink's target alone, dangling, is refused too
        with pytest.raises(InputError, match=r"symlink target of .*file system encoding"):
            scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),)))
        (tree / "link").unlink()
        (tree / "plain").write_bytes(b"")
        assert [e.entry.path for e in scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),)))] == ["plain"]
