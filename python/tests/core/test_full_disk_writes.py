"""A full disk (ENOSPC, a real tmpfs filled up) while an output is written (a file, an output
directory's marker, a staged OCI layout): the error names the file it was for, the previous
output stays as it was and nothing staged is left."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest
from fixtures.full_disk import fill, small_disk

from sparkflake.core.atomic_write import (
    OUTPUT_MARKER,
    atomic_directory,
    atomic_file,
    write_bytes_atomic,
)
from sparkflake.oci.layout import StagedLayout


def sha256_digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


@pytest.mark.parametrize("size", [100, 3 << 20])  # buffered, then written at the close; written at once
def test_a_write_onto_a_full_disk_names_the_file_and_keeps_the_previous_one(tmp_path, size):
    with small_disk(tmp_path / "disk") as disk:
        target = disk / "state.json"
        write_bytes_atomic(target, b'{"previous": true}\n')
        fill(disk)
        with pytest.raises(OSError) as raised:
            write_bytes_atomic(target, b"x" * size)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
        assert target.read_bytes() == b'{"previous": true}\n'
        assert sorted(os.listdir(disk)) == ["filler", "state.json"]


def test_a_full_disk_under_atomic_file_names_the_file(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        fill(disk)
        with pytest.raises(OSError) as raised, atomic_file(disk / "blob") as sink:
            for _ in range(4):
                sink.write(b"y" * (1 << 20))
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(disk / "blob")
        assert os.listdir(disk) == ["filler"]


def test_an_output_marker_onto_a_full_disk_names_it_and_keeps_the_previous_output(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        out = disk / "out"
        with atomic_directory(out, owned_output=True) as staging:
            (staging / "digests.json").write_bytes(b"{}\n")
        before = {path.name: path.read_bytes() for path in out.iterdir()}
        with pytest.raises(OSError) as raised, atomic_directory(out, owned_output=True) as staging:
            (staging / "digests.json").write_bytes(b'{"new": true}\n')
            fill(disk)  # the marker, written last into the staging directory, finds no room
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(staging / OUTPUT_MARKER)
        assert {path.name: path.read_bytes() for path in out.iterdir()} == before
        assert sorted(os.listdir(disk)) == ["filler", "out"]


def test_a_layout_staged_on_a_full_disk_names_the_file_and_keeps_the_previous_layout(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        layout = disk / "layout"
        with StagedLayout(layout) as staged:
            staged.write_blob(sha256_digest(b"old"), b"old")
            staged.commit(b'{"schemaVersion": 2, "manifests": []}')
        before = {str(path): path.read_bytes() for path in layout.rglob("*") if path.is_file()}
        fill(disk)
        with pytest.raises(OSError) as raised, StagedLayout(layout) as staged:
            staged.write_blob(sha256_digest(b"new"), b"new")
        assert raised.value.errno == errno.ENOSPC
        assert raised.value.filename == str(staged.blob_path(sha256_digest(b"new")))
        assert {str(path): path.read_bytes() for path in layout.rglob("*") if path.is_file()} == before
        assert sorted(os.listdir(disk)) == ["filler", "layout"]
