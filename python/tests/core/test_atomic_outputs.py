"""The one output writer (``core.atomic_write``, issue 28 class 1): every atomic write
refuses a target that is not a regular file, at the moment it writes, whatever the CLI
checked before; a symlink is resolved first (its target gets the bytes, the link stays)."""

from __future__ import annotations

import os
import stat

import pytest

from sparkflake.core.atomic_write import (
    atomic_directory,
    atomic_file,
    atomic_stream,
    write_bytes_atomic,
)
from sparkflake.core.errors import InputError

pytestmark = pytest.mark.nix_sandbox


def _writers():
    def stream(path, content):
        with atomic_stream(path, direct=False) as writer:
            writer.write(content)

    def handle(path, content):
        with atomic_file(path) as sink:
            sink.write(content)

    return {"write_bytes_atomic": write_bytes_atomic, "atomic_file": handle, "atomic_stream": stream}


@pytest.mark.parametrize("writer", sorted(_writers()))
@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink-to-fifo", "character-device"])
def test_a_non_regular_target_is_refused_when_written(tmp_path, writer, kind):
    if kind == "character-device" and os.geteuid() != 0:
        pytest.skip("mknod needs root (CI runs as root)")
    node = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(node)
    elif kind == "directory":
        node.mkdir()
    elif kind == "character-device":
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 7))
    else:
        os.mkfifo(tmp_path / "fifo")
        node.symlink_to(tmp_path / "fifo")
    before = os.lstat(node)
    with pytest.raises(InputError, match="an output is written to a regular file only"):
        _writers()[writer](node, b"{}\n")
    after = os.lstat(node)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert set(os.listdir(tmp_path)) == ({kind, "fifo"} if "symlink" in kind else {kind})  # no staging left


@pytest.mark.parametrize("writer", sorted(_writers()))
def test_a_symlink_to_a_regular_file_is_written_through(tmp_path, writer):
    (tmp_path / "real.json").write_bytes(b"old\n")
    (tmp_path / "link.json").symlink_to("real.json")
    _writers()[writer](tmp_path / "link.json", b"new\n")
    assert os.readlink(tmp_path / "link.json") == "real.json"
    assert (tmp_path / "real.json").read_bytes() == b"new\n"


def test_a_directory_output_is_not_swapped_with_a_file_or_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "out")
    with pytest.raises(InputError, match="is a FIFO; this output is a directory"):
        with atomic_directory(tmp_path / "out"):
            pass
    assert stat.S_ISFIFO(os.lstat(tmp_path / "out").st_mode) and os.listdir(tmp_path) == ["out"]
