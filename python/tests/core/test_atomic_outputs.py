"""The one output writer (``core.atomic_write``, issue 28 class 1): every atomic write
refuses a target that is not a regular file, at the moment it writes, whatever the CLI
checked before; a symlink is resolved first (its target gets the bytes, the link stays)."""

from __future__ import annotations

import os
import re
import stat
import subprocess

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sparkflake.core.atomic_write import (
    OUTPUT_MARKER,
    _name_check,
    atomic_directory,
    atomic_file,
    atomic_stream,
    generated_name,
    generated_name_parts,
    host_tag,
    record_written_entry,
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
@pytest.mark.parametrize(
    "kind",
    ["fifo", "directory", "symlink-to-fifo", pytest.param("character-device", marks=pytest.mark.root)],
)
def test_a_non_regular_target_is_refused_when_written(tmp_path, writer, kind):
    # mknod of a character device needs root; the suite runs as root (bin/test, CI), and a run
    # that is not root fails here instead of checking nothing (the Nix sandbox, which builds as
    # nixbld, deselects the `root` marker: checks/default.nix)
    assert kind != "character-device" or os.geteuid() == 0, "mknod needs root: run the tests as root"
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


# Leftover cleanup (issue 28, class 12) matches only names sparkflake generated: the shape
# and a check of the host, pid and random token that an operator's name does not have.
_NAME_PART = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=20)


@given(prefix=_NAME_PART, suffix=st.sampled_from(["", ".partial", ".old"]), pid=st.integers(1, 1 << 22))
def test_generated_names_are_recognised_with_their_parts(prefix, suffix, pid):
    name = generated_name(prefix, suffix, pid=pid)
    match = generated_name_parts(name)
    assert match is not None
    assert (match["prefix"], match["suffix"] or "", int(match["pid"]), match["host"]) == (prefix, suffix, pid, host_tag())


@given(prefix=_NAME_PART, pid=st.integers(1, 1 << 22), token=st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
       suffix=st.sampled_from(["", ".partial", ".old"]))
def test_names_of_the_same_shape_without_the_check_are_never_taken(prefix, pid, token, suffix):
    name = f"{prefix}.{host_tag()}.pid{pid}.{token}{suffix}"
    assume(token[8:] != _name_check(f"{prefix}.{host_tag()}.pid{pid}.{token[:8]}"))
    assert generated_name_parts(name) is None
    # and a generated name changed in any one character is not taken either
    generated = generated_name(prefix, suffix, pid=pid)
    position = len(prefix) + 1  # the host's first character
    altered = generated[:position] + ("x" if generated[position] != "x" else "y") + generated[position + 1:]
    assert generated_name_parts(altered) is None or generated_name_parts(altered)["host"] != host_tag()


def test_an_operator_directory_shaped_like_a_leftover_is_kept(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    operator = tmp_path / f".out.{host_tag()}.pid{gone.pid}.backup1234567890.old"
    operator.mkdir()
    (operator / "notes").write_text("mine\n")
    leftover = tmp_path / generated_name(".out", ".partial", pid=gone.pid)
    leftover.mkdir()
    with atomic_directory(tmp_path / "out") as staging:
        (staging / "new").write_text("new\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([operator.name, "out"])
    assert (operator / "notes").read_text() == "mine\n"


def test_a_forced_directory_output_still_never_replaces_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "out")
    with pytest.raises(InputError, match="is a FIFO; this output is a directory"):
        with atomic_directory(tmp_path / "out", owned_output=True, force=True):
            pass
    assert stat.S_ISFIFO(os.lstat(tmp_path / "out").st_mode) and os.listdir(tmp_path) == ["out"]


def _owned_output(out, files):
    """An output sparkflake wrote (``atomic_directory(owned_output=True)``) holding ``files``."""
    with atomic_directory(out, owned_output=True) as staging:
        for name, content in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(content)


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


_OUTPUT = {"digests.json": b"{}\n", "receipt.json": b"{\"a\": 1}\n", "oci/index.json": b"{}",
           "oci/blobs/sha256/ab": b"layer"}


def test_an_output_holding_files_added_inside_its_directories_is_not_replaced(tmp_path):
    out = tmp_path / "out"
    _owned_output(out, _OUTPUT)
    _owned_output(out, _OUTPUT)  # what sparkflake wrote alone: replaced
    (out / "oci" / "NOTES.txt").write_text("mine\n")
    (out / "oci" / "blobs" / "mine").mkdir()
    (out / "oci" / "blobs" / "mine" / "x").write_text("mine too\n")
    before = _tree(out)
    with pytest.raises(InputError, match=r"out: holds entries sparkflake did not write "
                                         r"\(oci/NOTES\.txt, oci/blobs/mine\); they would be lost; "
                                         r"choose another -o, move it away, or pass --force"):
        _owned_output(out, _OUTPUT)
    assert _tree(out) == before
    with atomic_directory(out, owned_output=True, force=True) as staging:
        (staging / "new").write_text("new\n")
    assert _tree(out) == {"new": b"new\n", OUTPUT_MARKER: (out / OUTPUT_MARKER).read_bytes()}


def test_an_output_whose_file_was_edited_is_not_replaced(tmp_path):
    out = tmp_path / "out"
    _owned_output(out, _OUTPUT)
    (out / "receipt.json").write_text('{"a": 1, "operator": "edited"}\n')
    with pytest.raises(InputError, match=r"out: holds files changed since sparkflake wrote them \(receipt\.json: "
                                         r"another size, modification time or kind\); the changes would be lost"):
        _owned_output(out, _OUTPUT)
    assert (out / "receipt.json").read_text() == '{"a": 1, "operator": "edited"}\n'
    # a file of the same size rewritten: its modification time tells
    os.remove(out / "receipt.json")  # a file removed is no loss
    (out / "oci" / "index.json").write_bytes(b"[]")
    with pytest.raises(InputError, match=r"changed since sparkflake wrote them \(oci/index\.json"):
        _owned_output(out, _OUTPUT)
    assert (out / "oci" / "index.json").read_bytes() == b"[]"


def test_a_file_sparkflake_rewrites_in_its_output_stays_its_own(tmp_path):
    """The runtime check adds to OUT/receipt.json, publish and export add files: the next
    build still replaces the output; an operator's edit is not adopted by such a rewrite."""
    out = tmp_path / "out"
    _owned_output(out, _OUTPUT)
    write_bytes_atomic(out / "receipt.json", b"{\"a\": 1, \"byproducts\": [\"runtime\"]}\n")
    (out / "published.json").write_text("{}\n")
    record_written_entry(out, "published.json")
    _owned_output(out, _OUTPUT)
    (out / "receipt.json").write_text("operator\n")
    write_bytes_atomic(out / "receipt.json", b"operator, then sparkflake\n")
    with pytest.raises(InputError, match=r"changed since sparkflake wrote them \(receipt\.json"):
        _owned_output(out, _OUTPUT)


def _earlier_output(out):
    """An output as an earlier sparkflake left it: its marker lists the top-level entries only."""
    blobs = out / "oci" / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (blobs / ("ab" * 32)).write_bytes(b"a blob")
    (out / "oci" / "index.json").write_text("{}")
    (out / "oci" / "oci-layout").write_text("{}")
    (out / "digests.json").write_text("{}")
    (out / OUTPUT_MARKER).write_text('{"kind": "sparkflake.output-directory", "entries": ["digests.json", "oci"]}')


def test_an_output_marked_by_an_earlier_sparkflake_is_replaced_when_it_holds_only_what_it_wrote(tmp_path):
    # an upgrade: the next build replaces the output the earlier version wrote, without --force
    out = tmp_path / "out"
    _earlier_output(out)
    _owned_output(out, {"digests.json": b"{\"new\": 1}\n"})
    assert (out / "digests.json").read_bytes() == b"{\"new\": 1}\n" and not (out / "oci").exists()


@pytest.mark.parametrize("added", ["oci/NOTES.txt", "oci/blobs/mine/x", "oci/blobs/sha256/not-a-digest", "extra.txt"])
def test_an_output_marked_by_an_earlier_sparkflake_holding_more_is_not_replaced(tmp_path, added):
    out = tmp_path / "out"
    _earlier_output(out)
    (out / added).parent.mkdir(parents=True, exist_ok=True)
    (out / added).write_text("mine\n")
    with pytest.raises(InputError, match=rf"holds entries sparkflake did not write \({re.escape(added.split('/x')[0])}"):
        _owned_output(out, _OUTPUT)
    assert (out / added).read_text() == "mine\n"
