"""A full disk (ENOSPC, a real tmpfs filled up) while an output is written: the error names
the file it was for, the previous file stays as it was and nothing staged is left."""

from __future__ import annotations

import errno
import os

import pytest
from fixtures.full_disk import fill, small_disk

from sparkflake.core.atomic_write import atomic_file, write_bytes_atomic


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
