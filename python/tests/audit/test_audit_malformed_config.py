"""A config that is not a JSON document (issue 28, class 13) is bad input, not a
mismatch: the audit reports it under document.parse as an error and exits 2, as `image
inspect` and `runtime check` refuse it, naming the blob and the place in it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fixtures.bomb_layers import with_config
from fixtures.hostile_layers import hostile_layout

SAFE = [[("usr", "dir", "")]]


@pytest.mark.parametrize("config, message", [
    (b'{"architecture": "arm64", ', "not valid JSON: Expecting property name enclosed in double quotes (line 1, column 27)"),
    (b"[]", "expected a JSON object"),
    (b"{\"architecture\": \"\xff\"}", "not UTF-8 text (byte offset 18)"),
])
def test_a_malformed_config_is_bad_input(tmp_path, config, message):
    layout = with_config(hostile_layout(tmp_path / "oci", SAFE), config)
    for argv in (["audit", f"oci:{layout}"], ["image", "inspect", str(layout)]):
        completed = subprocess.run([sys.executable, "-m", "sparkflake.cli", *argv], capture_output=True, text=True,
                                   timeout=120, check=False)
        output = completed.stdout + completed.stderr
        assert completed.returncode == 2, output
        assert "document.parse" in output and message in output and "Traceback" not in output
    assert "ERR  document.parse" in subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "audit", f"oci:{layout}"], capture_output=True, text=True,
        timeout=120, check=False).stdout
