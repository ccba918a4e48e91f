"""The flake itself, offline: nixpkgs overridden by the stand-in in nix/offline-nixpkgs
(bin/nix-offline), the outputs the issue names, `nix flake check`, the built CLI and apps,
the dev shell and the formatter."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NIX_OFFLINE = REPO / "bin" / "nix-offline"
SYSTEMS = {"x86_64-linux", "aarch64-linux"}


def nix_offline(*argv: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NIX_OFFLINE), *argv], capture_output=True, text=True, check=False, timeout=timeout
    )


def current_system() -> str:
    completed = nix_offline("eval", "--impure", "--raw", "--expr", "builtins.currentSystem")
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def build(installable: str) -> Path:
    completed = nix_offline("build", "--no-link", "--json", installable)
    assert completed.returncode == 0, completed.stderr
    (result,) = json.loads(completed.stdout)
    return Path(result["outputs"]["out"])


def test_the_override_command_is_the_documented_one() -> None:
    text = NIX_OFFLINE.read_text()
    assert "--override-input nixpkgs path:./nix/offline-nixpkgs" in text
    for document in ["README.md", "docs/architecture.md"]:
        assert (
            "--override-input nixpkgs path:./nix/offline-nixpkgs" in (REPO / document).read_text()
        )


def test_flake_outputs_for_both_systems() -> None:
    completed = nix_offline("flake", "show", "--json")
    assert completed.returncode == 0, completed.stderr
    outputs = json.loads(completed.stdout)
    assert set(outputs["packages"]) == SYSTEMS
    for system in SYSTEMS:
        assert set(outputs["packages"][system]) >= {
            "sparkflake",
            "default",
            "glm53-dflash7",
            "glm53-mtp5",
        }
        assert set(outputs["apps"][system]) >= {"default", "launch-rank"}
        assert set(outputs["checks"][system]) >= {"pytest", "ruff", "nix-parse", "fixture-digests"}
        assert set(outputs["devShells"][system]) == {"default"}
        assert outputs["formatter"][system]["type"] == "derivation"
        assert outputs["packages"][system]["sparkflake"]["name"] == "sparkflake-0.1.0"
    assert outputs["overlays"]["default"]["type"] == "nixpkgs-overlay"


@pytest.mark.slow
def test_flake_check_passes_offline() -> None:
    completed = nix_offline("flake", "check", "--print-build-logs")
    assert completed.returncode == 0, completed.stderr[-20000:]
    assert "running flake checks" in completed.stderr


@pytest.mark.slow
def test_the_built_cli_and_its_apps_run() -> None:
    sparkflake = build(".#sparkflake")
    assert build(".#default") == sparkflake
    # built from the source by the nixpkgs builder: the package is in the store, not the checkout
    site = sparkflake / "lib" / "python3.11" / "site-packages" / "sparkflake" / "__init__.py"
    assert site.is_file()
    for program in ["sparkflake", "sparkflake-launch-rank"]:
        assert (sparkflake / "bin" / program).is_file()
    help_text = subprocess.run(
        [str(sparkflake / "bin" / "sparkflake"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "usage: sparkflake" in help_text
    ran = nix_offline("run", ".", "--", "--help")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == help_text
    launch_help = nix_offline("run", ".#launch-rank", "--", "--help")
    assert launch_help.returncode == 0, launch_help.stderr
    assert "launch-rank" in launch_help.stdout


@pytest.mark.slow
def test_dev_shell_has_the_tools_and_the_dependencies() -> None:
    completed = nix_offline(
        "develop",
        "--command",
        "python",
        "-c",
        "import hypothesis, pytest, zstandard, installer, packaging; print('imports ok')",
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().endswith("imports ok")
    ruff = nix_offline("develop", "--command", "ruff", "--version")
    assert ruff.returncode == 0, ruff.stderr
    assert ruff.stdout.startswith("ruff ")


@pytest.mark.slow
def test_formatter_normalizes_whitespace_and_keeps_the_meaning(tmp_path: Path) -> None:
    nixfmt = build(f".#formatter.{current_system()}") / "bin" / "nixfmt"
    messy = tmp_path / "messy.nix"
    messy.write_bytes(b"{ a = 1;   \r\n  b = [ 1 2 ];\t\n}\n\n\n")
    literal = tmp_path / "literal.nix"
    literal_text = "''\n  keep this trailing space \n''\n"
    literal.write_text(literal_text)
    clean = tmp_path / "clean.nix"
    clean.write_text("{ a = 1; }\n")

    check = subprocess.run([str(nixfmt), "--check", str(tmp_path)], capture_output=True, text=True)
    assert check.returncode == 1
    assert "messy.nix: needs formatting" in check.stderr
    assert messy.read_bytes() == b"{ a = 1;   \r\n  b = [ 1 2 ];\t\n}\n\n\n"

    formatted = subprocess.run([str(nixfmt), str(tmp_path)], capture_output=True, text=True)
    assert formatted.returncode == 0, formatted.stderr
    assert messy.read_bytes() == b"{ a = 1;\n  b = [ 1 2 ];\n}\n"
    assert literal.read_text() == literal_text
    assert "literal.nix: left unchanged" in formatted.stderr
    assert clean.read_text() == "{ a = 1; }\n"
    again = subprocess.run([str(nixfmt), "--check", str(tmp_path)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
