"""A config that is not a JSON document (issue 28, class 13) is bad input, not a
mismatch: the audit reports it under document.parse as an error and exits 2, as `image
inspect` and `runtime check` refuse it, naming the blob and the place in it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.hostile_layers import hostile_layout

SAFE = [[("usr", "dir", "")]]


def _with_config(layout: Path, config: bytes) -> Path:
    """``layout`` with its config replaced by ``config`` (the manifest and index follow)."""
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_text())
    digest = hashlib.sha256(config).hexdigest()
    (blobs / digest).write_bytes(config)
    manifest["config"].update(digest=f"sha256:{digest}", size=len(config))
    manifest_bytes = json.dumps(manifest).encode()
    manifest_digest = hashlib.sha256(manifest_bytes).hexdigest()
    (blobs / manifest_digest).write_bytes(manifest_bytes)
    index["manifests"][0].update(digest=f"sha256:{manifest_digest}", size=len(manifest_bytes))
    (layout / "index.json").write_text(json.dumps(index))
    return layout


@pytest.mark.parametrize("config, message", [
    (b'{"architecture": "arm64", ', "not valid JSON: Expecting property name enclosed in double quotes (line 1, column 27)"),
    (b"[]", "expected a JSON object"),
    (b"{\"architecture\": \"\xff\"}", "not UTF-8 text (byte offset 18)"),
])
def test_a_malformed_config_is_bad_input(tmp_path, config, message):
    layout = _with_config(hostile_layout(tmp_path / "oci", SAFE), config)
    for argv in (["audit", f"oci:{layout}"], ["image", "inspect", str(layout)]):
        completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", *argv], capture_output=True, text=True,
                                   timeout=120, check=False)
        output = completed.stdout + completed.stderr
        assert completed.returncode == 2, output
        assert "document.parse" in output and message in output and "Traceback" not in output
    assert "ERR  document.parse" in subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "audit", f"oci:{layout}"], capture_output=True, text=True,
        timeout=120, check=False).stdout
