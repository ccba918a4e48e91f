"""What the rank's fan-out agent (``distribute/agent.py``) takes from the controller: the
JSON of ``--engine-args-json`` and ``--downstream-json``, and the documents on its stdin.
The controller is this program, but of whatever version the operator runs: what is not in
the shape this agent reads is refused as bad input (exit 2, one ``failed`` line the
controller shows), never a traceback on the rank whose last line the controller would
show instead."""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

import pytest

from sparkflake.distribute.agent import build_parser
from sparkflake.distribute.agent_protocol import run_protocol

IMAGE_ID = "sha256:" + "c" * 64


def _run(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes = b"",
         monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, dict]:
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = run_protocol(build_parser(), argv)
    lines = capsys.readouterr().out.splitlines()
    return code, json.loads(lines[-1])


@pytest.mark.parametrize("command", [
    ["import", "--archive", "/nonexistent.tar"],
    ["image-status"],
    ["import-layout", "--layout", "/nonexistent", "--tag", "t"],
])
@pytest.mark.parametrize("engine_args", ["{", "{}", '["--root", 1]', "[" * 100_000, "NaN"])
def test_engine_args_that_are_not_an_argv_list_are_refused_as_bad_input(capsys, command, engine_args):
    code, reply = _run([*command, "--engine", "podman", "--image-id", IMAGE_ID, "--engine-args-json", engine_args],
                       capsys)
    assert code == 2 and reply["status"] == "failed"
    assert reply["message"].startswith("--engine-args-json: ") and "expected a JSON array of strings" in reply["message"]


@pytest.mark.parametrize("downstream", ["not json", '{"a": 1}', "[1]"])
def test_a_relay_s_downstream_that_is_not_an_argv_list_is_refused(capsys, downstream):
    code, reply = _run(["relay", "--downstream-json", downstream], capsys)
    assert code == 2 and reply["status"] == "failed" and reply["message"].startswith("--downstream-json: ")


@pytest.mark.parametrize("stdin", [b"not json", b"[" * 100_000, b'{"files": 1}'])
def test_a_manifest_on_stdin_that_is_not_one_is_refused(capsys, monkeypatch, tmp_path, stdin):
    code, reply = _run(["check-manifest", "--dir", str(tmp_path)], capsys, stdin, monkeypatch)
    assert code == 2 and reply["status"] == "failed" and reply["message"].startswith("manifest (stdin)")


def test_a_commit_whose_identities_are_not_whole_numbers_rehashes_instead_of_raising(capsys, monkeypatch, tmp_path):
    # a blob whose reported identity cannot be one is checked by its bytes (held_identity):
    # missing here, so the commit is refused by name, not by int("x")
    plan = {"index": "e30=", "manifest": "e30=", "manifest_digest": "sha256:" + hashlib.sha256(b"{}").hexdigest(),
            "config": {"digest": IMAGE_ID, "size": 2, "mediaType": "application/vnd.oci.image.config.v1+json"},
            "layers": []}
    document = json.dumps({"plan": plan, "received": {IMAGE_ID: ["x", 1.5]}}).encode()
    code, reply = _run(["commit-layout", "--store", str(Path(tmp_path) / "store")], capsys, document, monkeypatch)
    assert code == 1 and reply["status"] == "failed"
    assert reply["message"].endswith(f"1 blobs of manifest {plan['manifest_digest']} are missing or wrong ({IMAGE_ID}); "
                                     "index.json not written")
