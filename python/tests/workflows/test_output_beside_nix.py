"""The CLI and Nix in one checkout: `sparkflake build` writes out/PROFILE by default, so the
`result` link `nix build` leaves in the same directory neither blocks it nor is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_default_build_output_is_out_profile_beside_a_nix_result_link(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "profiles").symlink_to(REPO / "profiles")
    store_path = tmp_path / "nix-store-output"
    store_path.mkdir()
    (checkout / "result").symlink_to(store_path)  # what `nix build .#fixture-image` leaves
    environ = {key: value for key, value in os.environ.items() if not key.startswith("SPARKFLAKE_")}
    environ["XDG_CACHE_HOME"] = str(tmp_path / "xdg-cache")
    built = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "build", "fixture", "--offline", "--cache", str(tmp_path / "cache")],
        cwd=checkout, env=environ, capture_output=True, text=True, timeout=900, check=False,
    )
    assert built.returncode == 0, built.stderr
    expected = json.loads((REPO / "profiles" / "fixture" / "expected-digests.json").read_text())
    digests = json.loads((checkout / "out" / "fixture" / "digests.json").read_text())
    assert digests["manifest"] == expected["manifest"]
    assert os.readlink(checkout / "result") == str(store_path) and list(store_path.iterdir()) == []
    assert "/out/" in (REPO / ".gitignore").read_text().splitlines()
