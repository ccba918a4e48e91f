"""A rank's copies never write through what stands at their side files' names, and a
clean-up of a fan-out directory takes only the receiver's own leftovers: a symlink or hard
link at ``.NAME.lock`` or ``.NAME.partial`` is refused (the operator's file keeps its bytes);
an operator's files named like the receiver's (``.session.lock``, ``.download.partial``,
``x.mismatch-<time>``) are never clean-up entries, and neither is a wrong file found under
the final name and moved aside (it may be the operator's own)."""

from __future__ import annotations

import hashlib
import io
import os
import time
from pathlib import Path

import pytest
from fixtures.raw_http import answer, raw_server

from sparkflake.core.errors import InputError
from sparkflake.distribute import download
from sparkflake.distribute.files import lock_path, made_by_receiver, partial_path
from sparkflake.distribute.receive import FAILED, INCOMPLETE, MISMATCH, OK, receive
from sparkflake.housekeeping.cache_entries import scan_received

CONTENT = b"layer bytes " * 4096
SHA = hashlib.sha256(CONTENT).hexdigest()
OPERATOR_BYTES = b"the operator's own file\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "operator" / "notes.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_bytes(OPERATOR_BYTES)
    return victim


def _receive(final: Path, stream: bytes = CONTENT) -> tuple[list[dict], dict]:
    replies: list[dict] = []
    return replies, receive(final, len(CONTENT), SHA, io.BytesIO(stream), replies.append)


@pytest.mark.parametrize("side", ["lock", "partial"])
@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_receiver_refuses_a_side_file_that_is_not_its_own(tmp_path, side, kind):
    victim = _victim(tmp_path)
    final = tmp_path / "dest" / "model.bin"
    final.parent.mkdir()
    planted = lock_path(final) if side == "lock" else partial_path(final)
    if kind == "symlink":
        planted.symlink_to(victim)
    else:
        os.link(victim, planted)
    replies, result = _receive(final)
    assert result["status"] == FAILED and str(planted) in result["message"]
    assert replies == [{"error": FAILED, "message": result["message"]}]  # the sender sends nothing
    assert victim.read_bytes() == OPERATOR_BYTES
    assert not final.exists()


def test_a_download_refuses_a_partial_that_is_a_symlink(tmp_path):
    victim = _victim(tmp_path)
    final = tmp_path / "dest" / "a.tar"
    final.parent.mkdir()
    partial_path(final).symlink_to(victim)
    sha = hashlib.sha256(CONTENT).hexdigest()
    served = answer(headers=(("Content-Length", str(len(CONTENT))),)) + CONTENT
    with raw_server(lambda method, path, headers, out: out.write(served)) as address, \
            pytest.raises(InputError) as refused:
        download.download(f"http://{address}/a.tar", final, sha, timeout=10)
    assert str(refused.value).startswith(f"{partial_path(final)}: is a symlink")
    assert victim.read_bytes() == OPERATOR_BYTES and not final.exists()


def _aged(path: Path) -> None:
    hours_ago = time.time() - 7200
    os.utime(path, (hours_ago, hours_ago))


def test_cleanup_takes_the_receivers_leftovers_and_never_an_operators_file(tmp_path):
    received = tmp_path / "received"
    received.mkdir()
    # the receiver's own: a copy cut short (its partial and its lock), and a wrong copy it received
    cut = received / "cut.bin"
    assert _receive(cut, CONTENT[:1000])[1]["status"] == INCOMPLETE
    wrong = received / "wrong.bin"
    assert _receive(wrong, b"x" * len(CONTENT))[1]["status"] == MISMATCH
    [wrong_aside] = received.glob(".wrong.bin.partial.mismatch-*")
    # a wrong file found under the final name, moved aside: maybe the operator's
    found = received / "found.bin"
    found.write_bytes(OPERATOR_BYTES)
    assert _receive(found)[1]["status"] == OK
    [found_aside] = received.glob("found.bin.mismatch-*")
    # the operator's files, named as a receiver names its own
    operators = [received / ".session.lock", received / ".download.partial", received / "x.mismatch-20240101T000000Z",
                 received / ".notes.partial.mismatch-20240101T000000Z"]
    for path in operators:
        path.write_bytes(OPERATOR_BYTES)
    for path in received.iterdir():
        _aged(path)

    entries = {entry.path for entry in scan_received(received)}
    assert entries == {partial_path(cut), lock_path(cut), wrong_aside, lock_path(wrong), lock_path(found)}
    assert not entries & {found_aside, *operators}
    assert made_by_receiver(lock_path(cut)) and not made_by_receiver(received / ".session.lock")
