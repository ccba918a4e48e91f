"""The Nix route (nix/image.nix with the offline nixpkgs stand-in) and the CLI route give
the fixture image the same digests, equal to profiles/fixture/expected-digests.json; and
the real profiles' image, -env and -os-base derivations evaluate over fixed-output fetches
of the lock."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparkflake.compose.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((REPO / "profiles" / "fixture" / "expected-digests.json").read_text())

EXPRESSION = """
let
  repo = {repo};
  lib = import (repo + "/nix/offline-nixpkgs/lib.nix");
  pkgs = import (repo + "/nix/offline-nixpkgs/pkgs.nix") {{ inherit lib; system = builtins.currentSystem; }};
  sparkflake = pkgs.callPackage (repo + "/nix/package.nix") {{ }};
  fetchLocked = import (repo + "/nix/fetch-locked.nix");
  src = builtins.path {{
    path = repo;
    name = "source";
    filter = path: type: !(builtins.elem (baseNameOf path) [
      ".venv" ".git" "result" "out" ".hypothesis" "__pycache__" ".pytest_cache" ".ruff_cache"
    ]);
  }};
in
import (repo + "/nix/image.nix") {{ inherit pkgs sparkflake fetchLocked src; }}
"""

NIX_OPTIONS = ["--option", "substituters", "", "--option", "sandbox", "false"]


@pytest.fixture(scope="module")
def expression(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nix") / "images.nix"
    path.write_text(EXPRESSION.format(repo=REPO))
    return path


# slow: it needs the Nix store, which the flake's own pytest check (a Nix build) has not.
@pytest.mark.slow
def test_nix_build_and_cli_build_same_digests(expression: Path, tmp_path: Path) -> None:
    built = subprocess.run(
        ["nix-build", str(expression), "-A", "fixture-image", "--no-out-link", *NIX_OPTIONS],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[-1]
    nix_digests = json.loads((Path(built) / "digests.json").read_text())
    cli = build_profile(
        BuildRequest(profile=str(REPO / "profiles" / "fixture"), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True)
    )
    assert nix_digests["manifest"] == cli.image.manifest_digest == EXPECTED["manifest"]
    assert nix_digests["config"] == cli.image.config_digest == EXPECTED["config"]
    assert (Path(built) / "receipt.json").read_bytes() == (tmp_path / "out" / "receipt.json").read_bytes()
    subprocess.run(["nix-build", str(expression), "-A", "fixture-digests", "--no-out-link", *NIX_OPTIONS],
                   check=True, capture_output=True)


@pytest.mark.slow
def test_real_profile_derivations_evaluate(expression: Path) -> None:
    attributes = ["glm53-dflash7", "glm53-mtp5", "glm53-dflash7-env", "glm53-mtp5-env", "glm53-dflash7-os-base"]
    arguments = [argument for attribute in attributes for argument in ("-A", attribute)]
    derivations = subprocess.run(
        ["nix-instantiate", str(expression), *arguments, *NIX_OPTIONS], check=True, capture_output=True, text=True
    ).stdout.split()
    assert len(derivations) == len(attributes)
    shown = subprocess.run(["nix-store", "--query", "--references", derivations[0]], check=True, capture_output=True, text=True).stdout
    assert "sparkflake-inputs-glm53-dflash7.drv" in shown
    inputs = next(line for line in shown.splitlines() if line.endswith("sparkflake-inputs-glm53-dflash7.drv"))
    fetches = subprocess.run(["nix-store", "--query", "--references", inputs], check=True, capture_output=True, text=True).stdout.split()
    # one fixed-output fetch per locked file (wheels, the vllm sdist, debs)
    assert any("vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl" in line for line in fetches)
    assert any("vllm-0.33.0.tar.gz" in line for line in fetches)
    assert len([line for line in fetches if line.endswith(".drv")]) > 200
