"""The Nix side of the repository: every .nix file parses, flake.lock pins exactly nixpkgs,
python/uv.lock and the host-tool venv agree, the overlay adds the CLI and the images."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HOST_VENV_PYTHON = Path("/opt/sparkflake/venv/bin/python")


def nix_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "*.nix"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(REPO / name for name in listed if (REPO / name).is_file())


def parse(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix-instantiate", "--parse", "--store", "dummy://", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def nix_eval_json(expression: str) -> object:
    completed = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expression],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_every_nix_file_parses() -> None:
    files = nix_files()
    names = {path.relative_to(REPO).as_posix() for path in files}
    assert {
        "flake.nix",
        "nix/fetch-locked.nix",
        "checks/default.nix",
        "overlays/default.nix",
    } <= names
    assert "nix/offline-nixpkgs/flake.nix" in names
    failures = {str(path): parse(path).stderr for path in files if parse(path).returncode != 0}
    assert failures == {}


def test_the_parse_check_catches_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.nix"
    broken.write_text("{ a = 1; b = ; }\n")
    completed = parse(broken)
    assert completed.returncode != 0
    assert "broken.nix" in completed.stderr


def test_flake_lock_pins_exactly_nixpkgs_by_rev_and_nar_hash() -> None:
    lock = json.loads((REPO / "flake.lock").read_text())
    assert lock["version"] == 7
    assert lock["root"] == "root"
    assert set(lock["nodes"]) == {"root", "nixpkgs"}
    assert lock["nodes"]["root"] == {"inputs": {"nixpkgs": "nixpkgs"}}
    locked = lock["nodes"]["nixpkgs"]["locked"]
    assert set(locked) == {"lastModified", "narHash", "owner", "repo", "rev", "type"}
    assert locked["type"] == "github"
    assert locked["owner"].lower() == "nixos"
    assert locked["repo"] == "nixpkgs"
    assert re.fullmatch(r"[0-9a-f]{40}", locked["rev"])
    assert locked["narHash"].startswith("sha256-")
    assert len(base64.b64decode(locked["narHash"].removeprefix("sha256-"), validate=True)) == 32
    # 2024-01-01 .. 2030-01-01: a real commit time, not a placeholder
    assert 1_704_067_200 < locked["lastModified"] < 1_893_456_000


def test_flake_has_one_input_and_the_lock_records_its_reference() -> None:
    inputs = nix_eval_json("(import ./flake.nix).inputs")
    assert inputs == {"nixpkgs": {"url": "github:NixOS/nixpkgs/nixos-unstable"}}
    original = json.loads((REPO / "flake.lock").read_text())["nodes"]["nixpkgs"]["original"]
    assert original == {
        "owner": "NixOS",
        "ref": "nixos-unstable",
        "repo": "nixpkgs",
        "type": "github",
    }


def test_host_venv_holds_exactly_the_locked_versions() -> None:
    uv_lock = tomllib.loads((REPO / "python/uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in uv_lock["package"] if p["name"] != "sparkflake"}
    # uv.lock spells names normalized (PEP 503: boolean.py is boolean-py); METADATA as published
    installed = json.loads(
        subprocess.run(
            [
                str(HOST_VENV_PYTHON),
                "-c",
                "import importlib.metadata as m, json; "
                "import re; print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version"
                " for d in m.distributions()}))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    # The venv is the test extra and the build group; every one of them at its locked version.
    for name in [
        "pytest",
        "hypothesis",
        "ruff",
        "setuptools",
        "zstandard",
        "installer",
        "packaging",
    ]:
        assert installed[name] == locked[name], name
    assert {name: version for name, version in installed.items() if name in locked} == {
        name: locked[name] for name in installed if name in locked
    }
    assert set(installed) <= set(locked)


@pytest.mark.parametrize(
    "relative", ["flake.nix", "nix", "checks", "overlays/default.nix", "bin", ".ci/run"]
)
def test_nothing_points_into_a_checkout(relative: str) -> None:
    # CI runs in a fresh clone elsewhere: no file may name this checkout's absolute path.
    target = REPO / relative
    files = [target] if target.is_file() else [p for p in target.rglob("*") if p.is_file()]
    offenders = [
        str(p) for p in files if "/work/" in p.read_text(encoding="utf-8", errors="replace")
    ]
    assert files and offenders == []


def test_overlay_adds_the_cli_and_the_images_to_a_package_set() -> None:
    expression = f"""
    let
      flake = builtins.getFlake "git+file://{REPO}";
      prev = (builtins.getFlake "path:{REPO}/nix/offline-nixpkgs").legacyPackages.x86_64-linux;
      final = prev // flake.overlays.default final prev;
    in {{
      cli = final.sparkflake.name;
      images = map (name: final.${{name}}.name) [ "glm53-dflash7" "glm53-mtp5" "fixture-image" ];
      ruffKept = final.ruff.name;
    }}
    """
    completed = subprocess.run(
        [
            "nix",
            "--extra-experimental-features",
            "nix-command flakes",
            "eval",
            "--impure",
            "--json",
            "--expr",
            expression,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == {
        "cli": "sparkflake-0.1.0",
        "images": [
            "sparkflake-image-glm53-dflash7",
            "sparkflake-image-glm53-mtp5",
            "sparkflake-image-fixture",
        ],
        "ruffKept": "ruff-0.12.11",
    }
