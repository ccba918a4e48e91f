"""A checkpoint's replication manifest (``distribute.manifest.build_manifest``): every
regular file below the root, by relative POSIX path, with its size and sha256 (against
hashlib), in byte order of the path; replication's own record and ``.*.partial``/``.*.lock``
files left out; the record round-trips through ``manifest_bytes``/``manifest_from_document``;
a symlink to a file or a directory (not followed: its files would be left out) or a FIFO
is refused with ``InputError`` naming it."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.distribute.manifest import (
    RECORD_NAME,
    build_manifest,
    compare_directory,
    manifest_bytes,
    manifest_from_document,
)

pytestmark = pytest.mark.distribute

_names = st.text("abcé.-_09", min_size=1, max_size=6).filter(lambda name: name not in (".", ".."))
_files = st.dictionaries(st.lists(_names, min_size=1, max_size=3).map("/".join), st.binary(max_size=200), max_size=6)
_skipped = st.sampled_from([RECORD_NAME, ".x.partial", ".model.safetensors.lock", "d/.y.partial"])


def _plant(root, files):
    """Write what can be written (a name that is another's directory is left out)."""
    planted = {}
    for relative, content in sorted(files.items()):
        target = root / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            continue
        planted[relative] = content
    return planted


@given(_files, st.lists(_skipped, max_size=2, unique=True))
def test_the_manifest_lists_every_file_by_path_size_and_sha256(tmp_path_factory, files, skipped) -> None:
    root = tmp_path_factory.mktemp("ckpt")
    planted = _plant(root, files)
    for name in skipped:
        if name.split("/")[0] in planted:
            continue
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"replication's own")
    entries = build_manifest(root)
    expected = sorted(((path, len(content), hashlib.sha256(content).hexdigest()) for path, content in planted.items()
                       if not any(path == name for name in skipped)), key=lambda entry: entry[0].encode())
    assert [(entry.path, entry.size, entry.sha256) for entry in entries] == expected
    assert manifest_from_document(json.loads(manifest_bytes(entries)), "m") == entries


@given(_files.filter(bool), st.sampled_from(["file-link", "dir-link", "fifo", "dangling"]), st.data())
def test_a_file_that_is_no_regular_file_is_refused_by_name(tmp_path_factory, files, kind, data) -> None:
    root = tmp_path_factory.mktemp("ckpt")
    planted = _plant(root, files)
    if not planted:
        return
    at = root / (data.draw(st.sampled_from(sorted(planted))) + ".odd")
    if kind == "file-link":
        at.symlink_to(root / sorted(planted)[0])
    elif kind == "dir-link":
        elsewhere = tmp_path_factory.mktemp("elsewhere")
        (elsewhere / "a.safetensors").write_bytes(b"weights")
        at.symlink_to(elsewhere)
    elif kind == "dangling":
        at.symlink_to(root / "nowhere")
    else:
        os.mkfifo(at)
    with pytest.raises(InputError, match=f"^{at}: only regular files can be replicated$"):
        build_manifest(root)


@given(
    st.dictionaries(st.from_regex(r"[a-z]{1,6}\.safetensors", fullmatch=True), st.binary(max_size=50), max_size=3),
    st.sampled_from(["weights", "d/weights", "d/e/weights"]),
    st.booleans(),
)
def test_a_symlink_to_a_directory_is_refused_by_name_not_skipped(tmp_path_factory, files, link, inside) -> None:
    """A Hugging Face snapshot made of links: the linked directory's files are never left
    out of the manifest silently; the link is refused like a link to a file."""
    box = tmp_path_factory.mktemp("box")
    root = box / "ckpt"
    (root / "d" / "e").mkdir(parents=True)
    (root / "config.json").write_bytes(b"{}")
    target = root / "d" / "e" if inside else box / "elsewhere"
    target.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (target / name).write_bytes(content)
    (root / link).symlink_to(target)
    with pytest.raises(InputError, match=f"^{root / link}: only regular files can be replicated$"):
        build_manifest(root)
    # a copy holding such a link reports it as a path the manifest does not list
    report = compare_directory(root, [])
    assert link in report["extra"]
