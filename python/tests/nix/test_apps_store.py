"""`nix run .#<image>-copy-to-registry` never writes into the image's store path: it used to
put publish.json there (as root it succeeded and the path no longer verified; as another
user it failed after the push). The record goes to the caller's working directory, and
`nix store verify` still finds the store path intact after the app ran."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fixtures.oci import RegistryServer, registry_server  # noqa: F401 - pytest fixture

REPO = Path(__file__).resolve().parents[3]
NIX = ["nix", "--extra-experimental-features", "nix-command"]


@pytest.mark.slow
def test_copy_to_registry_records_in_the_working_directory_and_the_store_path_verifies(
    tmp_path: Path, registry_server: RegistryServer,  # noqa: F811
) -> None:
    built = subprocess.run([str(REPO / "bin/nix-offline"), "build", "--no-link", "--json", ".#fixture-image"],
                           capture_output=True, text=True, check=False, cwd=REPO)
    assert built.returncode == 0, built.stderr[-5000:]
    image = Path(json.loads(built.stdout)[0]["outputs"]["out"])
    listed = sorted(path.name for path in image.iterdir())
    target = f"{registry_server.host}/sparkflake/fixture:app"
    pushed = subprocess.run([str(REPO / "bin/nix-offline"), "run", ".#fixture-image-copy-to-registry", "--", target,
                             "--insecure"], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stderr[-5000:]
    manifest = json.loads((image / "digests.json").read_text())["manifest"]
    assert json.loads((tmp_path / "publish.json").read_text())["manifest_digest"] == manifest
    assert registry_server.head_manifest("sparkflake/fixture", "app")["Docker-Content-Digest"] == manifest
    assert sorted(path.name for path in image.iterdir()) == listed
    verified = subprocess.run([*NIX, "store", "verify", "--no-trust", str(image)], capture_output=True, text=True,
                              check=False)
    assert verified.returncode == 0, verified.stderr
    assert "was modified" not in verified.stderr and "hash mismatch" not in verified.stderr.lower()
