"""The flake itself, offline: nixpkgs overridden by the stand-in in nix/offline-nixpkgs
(bin/nix-offline), the outputs the issue names, `nix flake check`, the built CLI and apps,
the dev shell and the formatter."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
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
        assert set(outputs["apps"][system]) >= {
            "default",
            "launch-rank",
            "service",
            "glm53-dflash7-copy-to-registry",
            "glm53-dflash7-load-into-podman",
            "fixture-image-copy-to-registry",
            "fixture-image-load-into-podman",
        }
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
    # sparkflake's wheel installed into a venv of the stand-in's python3 (3.13, as nixpkgs'),
    # beside the locked wheels: the package is in the store, not the checkout
    site = sparkflake / "lib" / "python3.13" / "site-packages" / "sparkflake" / "__init__.py"
    assert site.is_file()
    assert (sparkflake / "share" / "sparkflake" / "profiles" / "glm53-dflash7" / "profile.toml").is_file()
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
    service_help = nix_offline("run", ".#service", "--", "--help")
    assert service_help.returncode == 0, service_help.stderr
    assert "usage: sparkflake service" in service_help.stdout and "rollback" in service_help.stdout
    # outside any checkout, the launcher finds the profiles bundled in the package
    listed = subprocess.run([str(sparkflake / "bin" / "sparkflake"), "profile", "list"], capture_output=True,
                            text=True, check=False, cwd="/")
    assert listed.returncode == 0, listed.stderr
    assert {"glm53-dflash7", "glm53-mtp5"} <= set(listed.stdout.split())


@pytest.mark.slow
def test_dev_shell_has_the_tools_and_the_dependencies() -> None:
    completed = nix_offline(
        "develop",
        "--command",
        "python",
        "-c",
        "import hypothesis, pytest, zstandard, installer, packaging, importlib.metadata as m;"
        " print(*(m.version(name) for name in ('installer', 'packaging', 'zstandard', 'pytest')))",
    )
    assert completed.returncode == 0, completed.stderr
    uv_lock = tomllib.loads((REPO / "python/uv.lock").read_text())
    locked = {package["name"]: package["version"] for package in uv_lock["package"]}
    # the locked tools, not the package set's (installer 0.7.0, packaging 25.0, zstandard 0.23.0)
    assert completed.stdout.split()[-4:] == [locked[name] for name in ("installer", "packaging", "zstandard", "pytest")]
    ruff = nix_offline("develop", "--command", "ruff", "--version")
    assert ruff.returncode == 0, ruff.stderr
    assert ruff.stdout.strip() == f"ruff {locked['ruff']}"


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
