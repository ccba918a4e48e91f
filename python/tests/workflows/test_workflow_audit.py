"""The audit's workflow (workflows/audit.py): an unreadable target is told apart from other
bad input (the CLI's --json report of it), the checks of what was asked for are added to
the report, and the record is written only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.one_layer_image import write_one_layer_image

from sparkflake.core.errors import InputError
from sparkflake.workflows.audit import AuditRequest, UnreadableTarget, audit_target


def test_an_unreadable_target_is_its_own_refusal(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not an archive")
    with pytest.raises(UnreadableTarget) as raised:
        audit_target(AuditRequest(target=f"docker-archive:{junk}"))
    assert raised.value.exit_code == 2 and str(junk) in raised.value.message
    # bad input that is not the target (a malformed --expect) is refused before it is opened
    with pytest.raises(InputError) as malformed:
        audit_target(AuditRequest(target=f"docker-archive:{junk}", expect=("sha256:00@manifest",)))
    assert not isinstance(malformed.value, UnreadableTarget)


def test_the_cli_reports_an_unreadable_target_as_json_and_exits_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not an archive")
    completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", "audit", f"docker-archive:{junk}", "--json"],
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 2, completed.stderr
    report = json.loads(completed.stdout)
    assert report["kind"] == "sparkflake.audit" and report["passed"] is False
    [check] = report["checks"]
    assert check["status"] == "error" and completed.stderr.startswith("sparkflake: error: ")
    assert check["detail"] in completed.stderr and "Traceback" not in completed.stderr


def test_a_passing_audit_writes_its_record_when_asked(tmp_path: Path) -> None:
    out, manifest = write_one_layer_image(tmp_path, {"file": b"content\n"})
    layout = out / "oci"
    record = tmp_path / "record.json"
    report = audit_target(AuditRequest(target=f"oci:{layout}", expect=(f"{manifest}@manifest",), record_file=record,
                                       key_file=str(tmp_path / "cosign.pub")))
    assert report.exit_code == 0, [check for check in report.checks if check.status != "pass"]
    assert report.manifest_digest == manifest
    # a key is for registry targets: the signature check is skipped, named, for a layout
    [signature] = [check for check in report.checks if check.id == "signature"]
    assert signature.status == "skip" and "docker://" in signature.detail
    written = json.loads(record.read_bytes())
    assert written["kind"] == "sparkflake.digest-verification" and written["digests"]["manifest"]["digest"] == manifest
    unrecorded = audit_target(AuditRequest(target=f"oci:{layout}", expect=(f"{manifest}@manifest",)))
    assert unrecorded.exit_code == 0 and sorted(path.name for path in tmp_path.iterdir()) == [
        "out", "record.json", "store", "tree"]
