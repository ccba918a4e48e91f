"""The two ends of a hop without the network: the receiver (resume, verify, move aside, full
disk, takeover of an orphaned receiver) and the relay (following a copy that is still
arriving), plus the ssh argv they are started with."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.distribute import files as files_module
from sparkflake.distribute import relay as relay_module
from sparkflake.distribute.files import inspect_copy, partial_path
from sparkflake.distribute.receive import MISMATCH, NO_SPACE, OK, receive
from sparkflake.distribute.relay import (
    CANCELLED,
    CONNECT_FAILED,
    DONE,
    PlannedFile,
    parse_plan,
    plan_line,
    read_plan_line,
    relay,
)
from sparkflake.distribute.site import SshOptions
from sparkflake.distribute.ssh import ssh_argv

AGENT = [sys.executable, "-m", "sparkflake.distribute.agent"]


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def run_receive(final: Path, content: bytes, stream: bytes | None = None) -> tuple[list[dict], dict]:
    replies: list[dict] = []
    result = receive(final, len(content), sha(content), io.BytesIO(content if stream is None else stream),
                     replies.append)
    return replies, result


@given(st.binary(max_size=3000), st.data())
def test_a_resumed_copy_is_byte_identical(tmp_path_factory, content: bytes, data) -> None:
    final = tmp_path_factory.mktemp("resume") / "archive.tar"
    cut = data.draw(st.integers(0, len(content)))
    partial_path(final).write_bytes(content[:cut])
    replies, result = run_receive(final, content, content[cut:])
    assert replies == [{"offset": cut}]
    assert result["status"] == OK and result["received"] == len(content) - cut
    assert final.read_bytes() == content and not partial_path(final).exists()


@given(st.binary(min_size=1, max_size=2000), st.data())
def test_a_wrong_stream_never_takes_the_final_name(tmp_path_factory, content: bytes, data) -> None:
    final = tmp_path_factory.mktemp("wrong") / "archive.tar"
    position = data.draw(st.integers(0, len(content) - 1))
    corrupted = bytearray(content)
    corrupted[position] ^= 0x01
    _, result = run_receive(final, content, bytes(corrupted))
    assert result["status"] == MISMATCH
    assert not final.exists() and not partial_path(final).exists()
    assert Path(result["moved_aside"]).read_bytes() == bytes(corrupted)


def test_an_early_end_keeps_the_partial_for_resume(tmp_path: Path) -> None:
    final = tmp_path / "a.tar"
    content = os.urandom(5000)
    _, result = run_receive(final, content, content[:1234])
    assert result["status"] == "incomplete" and partial_path(final).stat().st_size == 1234
    replies, result = run_receive(final, content, content[1234:])
    assert replies == [{"offset": 1234}] and result["status"] == OK


def test_existing_copies_are_reused_or_moved_aside(tmp_path: Path) -> None:
    final = tmp_path / "a.tar"
    content = os.urandom(4096)
    final.write_bytes(content)
    replies, result = run_receive(final, content, b"")
    assert replies == [{"offset": len(content)}] and result["reused"] is True
    final.write_bytes(b"something else entirely")
    replies, result = run_receive(final, content)
    assert result["status"] == OK and final.read_bytes() == content
    assert [p.read_bytes() for p in tmp_path.glob("a.tar.mismatch-*")] == [b"something else entirely"]
    # the read-only inspection reports without moving anything
    final.write_bytes(b"x" * 4096)
    state = inspect_copy(final, sha(content), len(content))
    assert state.exists and not state.matches and final.read_bytes() == b"x" * 4096


def test_the_free_space_check_refuses_before_any_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files_module, "free_bytes", lambda directory: 10)
    replies, result = run_receive(tmp_path / "a.tar", os.urandom(100))
    assert replies[0]["error"] == NO_SPACE and "needs 100 more bytes, 10 free" in replies[0]["message"]
    assert result["status"] == NO_SPACE and not list(tmp_path.glob("*a.tar*partial"))


def test_a_disk_filling_up_mid_copy_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "sfk-test-enospc", str(disk)], check=True)
    try:
        # the space was there when the copy started; something else took it meanwhile
        monkeypatch.setattr(files_module, "free_bytes", lambda directory: 1 << 40)
        _, result = run_receive(disk / "a.tar", os.urandom(3 << 20))
        assert result["status"] == NO_SPACE and "no space left on device" in result["message"]
        assert os.listdir(disk) == [".a.tar.lock"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_new_receiver_takes_over_from_an_orphaned_one(tmp_path: Path) -> None:
    final = tmp_path / "a.tar"
    content = os.urandom(3 << 20)
    args = ["receive"]
    plan = plan_line([PlannedFile(str(final), sha(content), len(content))])
    orphan = subprocess.Popen([*AGENT, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    orphan.stdin.write(plan)
    orphan.stdin.flush()
    assert json.loads(orphan.stdout.readline()) == {"offset": 0}
    orphan.stdin.write(content[: 1 << 20])
    orphan.stdin.flush()
    deadline = time.monotonic() + 10
    while partial_path(final).stat().st_size < 1 << 20:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # the orphan's connection is gone but it still holds the lock (stdin stays open)
    successor = subprocess.Popen([*AGENT, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    successor.stdin.write(plan)
    successor.stdin.flush()
    handshake = json.loads(successor.stdout.readline())
    assert handshake == {"offset": 1 << 20}
    assert orphan.wait(timeout=10) != 0
    successor.stdin.write(content[1 << 20:])
    successor.stdin.close()
    assert json.loads(successor.stdout.read().splitlines()[-1])["status"] == OK
    assert successor.wait() == 0 and final.read_bytes() == content


def test_the_relay_forwards_a_copy_while_it_is_still_arriving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay_module, "REPORT_SECONDS", 0.0)
    positions: list[int] = []
    upstream = tmp_path / "rank1" / "a.tar"
    downstream = tmp_path / "rank2" / "a.tar"
    upstream.parent.mkdir()
    content = os.urandom(2 << 20)

    def arrive() -> None:
        time.sleep(0.3)  # the relay starts before the first byte exists
        with open(partial_path(upstream), "wb") as sink:
            for start in range(0, len(content), 256 << 10):
                sink.write(content[start:start + (256 << 10)])
                sink.flush()
                time.sleep(0.05)
        os.replace(partial_path(upstream), upstream)

    writer = threading.Thread(target=arrive)
    writer.start()
    result = relay([PlannedFile(str(downstream), sha(content), len(content), source=str(upstream))],
                   [*AGENT, "receive"], progress=lambda index, position: positions.append(position))
    writer.join()
    assert result["status"] == DONE and result["sent"] == len(content)
    assert [r["status"] for r in result["results"]] == [OK]
    assert positions and positions == sorted(positions) and positions[-1] <= len(content)
    assert downstream.read_bytes() == content


def test_the_relay_reports_a_receiver_it_cannot_start(tmp_path: Path) -> None:
    result = relay([PlannedFile(str(tmp_path / "y"), "0" * 64, 10, source=str(tmp_path / "x"))], [sys.executable, "-c", "import sys; sys.stderr.write('ssh: connect to host "
                                                             "10.0.0.9 port 22: Connection refused\\n'); sys.exit(255)"])
    assert result["status"] == CONNECT_FAILED and result["returncode"] == 255
    assert "Connection refused" in result["stderr"]


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                        max_size=20), min_size=1, max_size=6))
def test_remote_argv_survives_the_remote_shell(remote: list[str]) -> None:
    argv = ssh_argv(SshOptions(identity_file="/k", known_hosts_file="/kh", cipher="aes128-gcm@openssh.com"),
                    "10.0.0.2", remote, bind="10.0.0.1")
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[argv.index("-b") + 1] == "10.0.0.1"
    assert argv[-3:-1] == ["--", "10.0.0.2"]  # the target is never read as an option
    assert shlex.split(argv[-1]) == remote


def test_a_cancelled_hop_changes_nothing_on_the_receiving_rank(tmp_path: Path) -> None:
    rank = tmp_path / "rank1"
    result = relay(lambda: None, [*AGENT, "receive"])
    assert result["status"] == CANCELLED
    assert not rank.exists()
    # the receiver alone, its stdin closed before the go: it exits and creates nothing
    alone = subprocess.run([*AGENT, "receive"], input=b"", capture_output=True)
    assert alone.returncode == 3 and json.loads(alone.stdout)["status"] == CANCELLED
    assert not rank.exists()


planned_files = st.lists(st.builds(
    PlannedFile,
    path=st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30).map(
        lambda tail: "/" + tail),
    sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
    size=st.integers(0, 1 << 50),
    source=st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30),
), max_size=8)


def read_from_pipe(raw: bytes) -> tuple[list[PlannedFile] | None, bytes]:
    """What read_plan_line makes of ``raw`` written to a pipe, and what it left unread."""
    read, write = os.pipe()
    try:
        os.write(write, raw)
        os.close(write)
        planned = read_plan_line(read)
        rest = os.read(read, 1 << 16)
    finally:
        os.close(read)
    return planned, rest


@given(planned_files)
def test_plan_line_round_trip(files: list[PlannedFile]) -> None:
    planned, _ = read_from_pipe(plan_line(files))
    assert planned == files


@given(st.binary(max_size=200))
def test_the_plan_parser_takes_only_a_well_formed_line(raw: bytes) -> None:
    planned, _ = read_from_pipe(raw)
    if planned is not None:
        assert raw.endswith(b"\n") and raw.count(b"\n") == 1
        assert parse_plan(json.loads(raw)) == planned


@given(planned_files, st.binary(min_size=1, max_size=50))
def test_bytes_after_the_plan_line_are_refused(files: list[PlannedFile], extra: bytes) -> None:
    planned, _ = read_from_pipe(plan_line(files) + extra)
    assert planned is None


@pytest.mark.parametrize("document", [
    {"files": [{"path": "relative", "sha256": "0" * 64, "size": 1, "source": ""}]},
    {"files": [{"path": "/a", "sha256": "0" * 63, "size": 1, "source": ""}]},
    {"files": [{"path": "/a", "sha256": "0" * 64, "size": -1, "source": ""}]},
    {"files": [{"path": "/a", "sha256": "0" * 64, "size": True, "source": ""}]},
    {"files": [{"path": "/a", "sha256": "0" * 64, "size": 1}]},
    {"files": [], "extra": 1},
    [],
])
def test_malformed_plans_are_refused(document: object) -> None:
    assert parse_plan(document) is None


def test_one_receiver_takes_several_files_and_reports_each(tmp_path: Path) -> None:
    contents = [os.urandom(5000), b"", os.urandom(70000)]
    sources = []
    for index, content in enumerate(contents):
        sources.append(tmp_path / f"src{index}")
        sources[-1].write_bytes(content)
    wrong = bytearray(contents[2])
    wrong[100] ^= 1
    expected = [sha(contents[0]), sha(contents[1]), sha(bytes(wrong))]  # the third is not what is sent
    planned = [PlannedFile(str(tmp_path / "dst" / f"f{index}"), digest, len(content), source=str(source))
               for index, (digest, content, source) in enumerate(zip(expected, contents, sources, strict=True))]
    seen: list[int] = []
    result = relay(planned, [*AGENT, "receive"], on_result=lambda index, outcome: seen.append(index))
    assert result["status"] == DONE and seen == [0, 1, 2]
    assert [r["status"] for r in result["results"]] == [OK, OK, MISMATCH]
    assert (tmp_path / "dst" / "f0").read_bytes() == contents[0] and (tmp_path / "dst" / "f1").read_bytes() == b""
    assert not (tmp_path / "dst" / "f2").exists()


@given(st.integers(1, 60_000), st.sampled_from(["[", '{"files": [', "[{}"]))
def test_a_plan_line_nested_too_deeply_is_a_malformed_plan(depth: int, opening: str) -> None:
    # before: RecursionError from json.loads, a traceback from `agent receive`
    planned, _ = read_from_pipe(opening.encode() + b"[" * depth + b"\n")
    assert planned is None


def test_the_receiver_given_a_deeply_nested_plan_changes_nothing_and_says_so() -> None:
    completed = subprocess.run([*AGENT, "receive"], input=b"[" * 50_000 + b"\n", capture_output=True, timeout=60)
    assert completed.returncode == 3 and b"Traceback" not in completed.stderr
    assert json.loads(completed.stdout) == {"status": CANCELLED}


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink to a device", "symlink to nothing"])
def test_a_final_name_that_is_no_file_is_refused_before_any_byte(tmp_path: Path, kind: str) -> None:
    """Before: a directory there was found only by the rename after the whole copy, in an
    error naming the partial copy (".a.tar.partial: Is a directory"); a FIFO, or a symlink
    to /dev/zero or to nothing, was deleted by that rename (it is not sparkflake's)."""
    final = tmp_path / "a.tar"
    make = {"directory": os.mkdir, "fifo": os.mkfifo, "symlink to a device": lambda path: os.symlink("/dev/zero", path),
            "symlink to nothing": lambda path: os.symlink(tmp_path / "gone", path)}[kind]
    make(final)
    before = os.lstat(final)
    replies, result = run_receive(final, b"content")
    expected = {"directory": "is a directory", "fifo": "is a FIFO", "symlink to a device":
                "is a character device (through a symlink)", "symlink to nothing": "is a symlink to "}[kind]
    assert result["status"] == "failed" and result["message"].startswith(f"{final}: {expected}"), result
    assert replies == [{"error": "failed", "message": result["message"]}]  # the sender sends nothing
    assert os.lstat(final).st_ino == before.st_ino and not partial_path(final).exists()
