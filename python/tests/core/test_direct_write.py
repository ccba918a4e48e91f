"""DirectWriter (O_DIRECT, double-buffered) and atomic_stream: the bytes on disk are
exactly the bytes handed over, in every mix of writes and file copies, aligned or not,
direct or buffered; errors name the file; an interrupted stream leaves the old file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkflake.core.atomic_write import atomic_stream
from sparkflake.core.direct_write import ALIGNMENT, DirectWriter
from sparkflake.core.errors import InputError

SHM = Path("/dev/shm")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.binary(max_size=3 * ALIGNMENT + 17)),
        st.tuples(st.just("copy"), st.integers(min_value=0, max_value=5 * ALIGNMENT), st.integers(0, 9000)),
    ),
    max_size=12,
)


def _replay(writer: DirectWriter, ops, source: Path, source_bytes: bytes) -> bytes:
    expected = bytearray()
    for op in ops:
        if op[0] == "write":
            writer.write(op[1])
            expected += op[1]
        else:
            _, offset, size = op
            with open(source, "rb", buffering=0) as handle:
                handle.seek(offset)
                copied = writer.copy_from(handle.fileno(), size)
            piece = source_bytes[offset : offset + size]
            assert copied == len(piece)  # fewer when the source ends first
            expected += piece
    return bytes(expected)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=operations,
    buffer_blocks=st.integers(min_value=1, max_value=3),
    buffers=st.integers(min_value=2, max_value=4),
    direct=st.booleans(),
    on_memory_fs=st.booleans(),
)
def test_bytes_on_disk_are_the_bytes_handed_over(tmp_path, ops, buffer_blocks, buffers, direct, on_memory_fs):
    source_bytes = os.urandom(6 * ALIGNMENT + 5)
    source = tmp_path / "source"
    source.write_bytes(source_bytes)
    folder = SHM if on_memory_fs else tmp_path
    target = folder / f"direct-write-test.{os.getpid()}"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        writer = DirectWriter(fd, str(target), buffer_size=buffer_blocks * ALIGNMENT, buffers=buffers, direct=direct)
        expected = _replay(writer, ops, source, source_bytes)
        writer.finish()
        assert writer.bytes_written == len(expected)
        os.close(fd)
        fd = -1
        assert target.read_bytes() == expected
    finally:
        if fd >= 0:
            os.close(fd)
        target.unlink(missing_ok=True)


def test_large_write_stays_direct_and_matches(tmp_path):
    """Many whole buffers and an unaligned tail on the test's file system: O_DIRECT
    is kept to the end (no silent fallback) and the file is byte-exact."""
    payload = os.urandom(3 << 20) + b"tail"
    target = tmp_path / "big"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    writer = DirectWriter(fd, str(target), buffer_size=256 * 1024, buffers=3)
    for start in range(0, len(payload), 100_003):
        writer.write(payload[start : start + 100_003])
    writer.finish()
    assert writer.direct is False  # switched off for the unaligned tail only
    os.close(fd)
    assert target.read_bytes() == payload


def test_direct_mode_is_on_while_whole_buffers_are_written(tmp_path):
    target = tmp_path / "aligned"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    writer = DirectWriter(fd, str(target), buffer_size=64 * 1024, buffers=2)
    writer.write(b"\1" * (4 * 64 * 1024))
    writer.finish()
    assert writer.direct is True  # nothing unaligned was left: never fell back
    os.close(fd)
    assert target.read_bytes() == b"\1" * (4 * 64 * 1024)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="multiple of 4096"):
        DirectWriter(0, "x", buffer_size=1000)
    with pytest.raises(ValueError, match="at least 2"):
        DirectWriter(0, "x", buffers=1)


def test_interrupted_stream_leaves_the_previous_file(tmp_path):
    target = tmp_path / "archive.tar"
    target.write_bytes(b"previous good archive")
    with pytest.raises(RuntimeError, match="interrupted"), atomic_stream(target) as sink:
        sink.write(b"x" * (9 << 20))
        raise RuntimeError("interrupted")
    assert target.read_bytes() == b"previous good archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive.tar"]


def test_stream_replaces_the_file_with_mode(tmp_path):
    target = tmp_path / "archive.tar"
    target.write_bytes(b"old")
    with atomic_stream(target) as sink:
        sink.write(b"new bytes")
    assert target.read_bytes() == b"new bytes"
    assert target.stat().st_mode & 0o777 == 0o644


_FULL_DISK = r"""
import resource, signal, sys
from sparkflake.core.atomic_write import atomic_stream
from sparkflake.core.errors import InputError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
try:
    with atomic_stream(sys.argv[1]) as sink:
        for _ in range(64):
            sink.write(b"z" * (1 << 20))
except InputError as exc:
    print(exc)
    sys.exit(3)
"""


def test_write_error_names_the_file_and_leaves_nothing(tmp_path):
    """A real write failure (the file-size limit: EFBIG past 1 MiB) is an InputError that
    names the target; no partial file is left beside it."""
    target = tmp_path / "out" / "archive.tar"
    completed = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(target)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 3, completed.stderr
    assert f"{target}: cannot write: File too large" in completed.stdout
    assert list(target.parent.iterdir()) == []


def test_archive_writer_reports_a_source_that_grew(tmp_path):
    from sparkflake.oci.tar_stream import EntryKind, TarEntry, write_tar_file

    source = tmp_path / "blob"
    source.write_bytes(b"a" * 1000)
    entry = TarEntry("blob", EntryKind.FILE, 0o644, size=999, source=str(source))
    with pytest.raises(InputError, match="changed size"), atomic_stream(tmp_path / "a.tar") as sink:
        write_tar_file([entry], sink, 0)
    assert not (tmp_path / "a.tar").exists()


# --- leftovers of killed runs, and the directory swap -----------------------------------

_KILLED_MID_WRITE = r"""
import os, signal, sys
from pathlib import Path
from sparkflake.core.atomic_write import atomic_directory, atomic_stream
target = Path(sys.argv[1])
if sys.argv[2] == "directory":
    with atomic_directory(target) as staging:
        (staging / "half.tar").write_bytes(b"x" * 100000)
        os.kill(os.getpid(), signal.SIGKILL)
else:
    with atomic_stream(target) as sink:
        sink.write(b"y" * (9 << 20))
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_run(target: Path, kind: str) -> None:
    completed = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(target), kind], check=False)
    assert completed.returncode == -9


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_the_next_run_removes_what_a_killed_run_left(tmp_path, kind):
    from sparkflake.core.atomic_write import atomic_directory

    target = tmp_path / ("out" if kind == "directory" else "archive.tar")
    _killed_run(target, kind)
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(f".{target.name}.") and leftovers[0].endswith(".partial")
    assert ".pid" in leftovers[0]
    if kind == "directory":
        with atomic_directory(target) as staging:
            (staging / "new").write_text("new")
        assert (target / "new").read_text() == "new"
    else:
        with atomic_stream(target) as sink:
            sink.write(b"new")
        assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_leftovers_of_live_processes_and_other_hosts_stay(tmp_path):
    from sparkflake.core.atomic_write import generated_name, host_tag, remove_leftovers

    host = host_tag()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        dead_pid = subprocess.Popen(["true"])
        dead_pid.wait()
        live = tmp_path / generated_name(".out", ".partial", pid=sleeper.pid)
        dead = tmp_path / generated_name(".out", ".partial", pid=dead_pid.pid)
        other_host = tmp_path / dead.name.replace(f".{host}.", ".otherhost.")
        unrelated = tmp_path / ".outer.partial"
        # an operator's directory of the generated shape, without the check
        look_alike = tmp_path / f".out.{host}.pid{dead_pid.pid}.0123456789abcdef.old"
        for path in (live, other_host, dead, unrelated, look_alike):
            path.mkdir()
        (tmp_path / "out").mkdir()
        assert remove_leftovers(tmp_path / "out") == [dead]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [live.name, other_host.name, unrelated.name, look_alike.name, "out"]
        )
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_swap_cut_between_its_renames_is_undone(tmp_path):
    """Where RENAME_EXCHANGE is missing the swap is two renames; a run killed between
    them leaves the target missing and the previous tree retired: the next run puts it
    back before anything else."""
    from sparkflake.core.atomic_write import generated_name, remove_leftovers

    gone = subprocess.Popen(["true"])
    gone.wait()
    retired = tmp_path / generated_name(".out", ".old", pid=gone.pid)
    retired.mkdir()
    (retired / "digests.json").write_text("previous")
    staged = tmp_path / generated_name(".out", ".partial", pid=gone.pid)
    staged.mkdir()
    remove_leftovers(tmp_path / "out")
    assert (tmp_path / "out" / "digests.json").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_directory_swap_is_one_exchange(tmp_path):
    """On this file system the previous directory and the new one trade places in one
    rename: the target is never missing."""
    from sparkflake.core.atomic_write import _exchange, atomic_directory

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "which").write_text("a")
    (second / "which").write_text("b")
    assert _exchange(first, second) is True
    assert (first / "which").read_text() == "b" and (second / "which").read_text() == "a"
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    with atomic_directory(target) as staging:
        (staging / "new").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "out"]
