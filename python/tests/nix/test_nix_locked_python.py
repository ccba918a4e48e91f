"""What decides image bytes and check results in the Nix route comes from python/uv.lock
(nix/locked-python.nix), and the offline stand-in gives what nixpkgs at the pinned revision
gives (nix/offline-nixpkgs): Python 3.13, a bare python3, withPackages as a symlink tree,
python3Packages and ruff at that revision's versions. So a flake that took a Python package
or ruff from the package set would show other versions here, as it would against nixpkgs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UV_LOCK = tomllib.loads((REPO / "python/uv.lock").read_text())
LOCKED = {package["name"]: package for package in UV_LOCK["package"]}


def stand_in(repo: Path = REPO) -> str:
    return (
        f"(import {repo}/nix/offline-nixpkgs/pkgs.nix {{ lib = import {repo}/nix/offline-nixpkgs/lib.nix;"
        ' system = "x86_64-linux"; })'
    )


def locked_python(repo: Path = REPO) -> str:
    return f"(import {repo}/nix/locked-python.nix {{ inherit ({stand_in(repo)}) runCommand python3; }})"


def nix_eval(expression: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expression],
        capture_output=True, text=True, check=False,
    )


def nix_build(expression: str) -> Path:
    completed = subprocess.run(
        ["nix-build", "--no-out-link", "--option", "substituters", "", "--expr", expression],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0, completed.stderr[-5000:]
    return Path(completed.stdout.strip().splitlines()[-1])


def test_every_distribution_of_the_tools_is_the_wheel_uv_lock_pins() -> None:
    names = ["deflate", "hypothesis", "installer", "packaging", "pytest", "ruff", "setuptools", "sparkcache", "zstandard"]
    completed = nix_eval(
        f"let locked = {locked_python()}; in builtins.listToAttrs (map (name: {{ inherit name;"
        f" value = {{ inherit (locked.wheelOf name) url outputHash builder; }}; }}) {json.dumps(names).replace(',', ' ')})"
    )
    assert completed.returncode == 0, completed.stderr
    chosen = json.loads(completed.stdout)
    for name in names:
        wheels = {wheel["url"]: wheel["hash"].removeprefix("sha256:") for wheel in LOCKED[name]["wheels"]}
        assert chosen[name]["url"] in wheels, name
        assert chosen[name]["outputHash"] == wheels[chosen[name]["url"]], name
        assert chosen[name]["builder"] == "builtin:fetchurl"
    file_name = {name: chosen[name]["url"].rsplit("/", 1)[1] for name in names}
    # the interpreter's own ABI (nixpkgs' python3 is 3.13), the stable ABI, a static program
    assert re.fullmatch(r"zstandard-[^-]+-cp313-cp313-manylinux.*_x86_64\.whl", file_name["zstandard"])
    assert re.fullmatch(r"deflate-0\.9\.0-cp311-abi3-manylinux.*_x86_64\.whl", file_name["deflate"])
    assert re.fullmatch(r"ruff-[^-]+-py3-none-musllinux_1_2_x86_64\.whl", file_name["ruff"])
    assert file_name["installer"] == f"installer-{LOCKED['installer']['version']}-py3-none-any.whl"


def _tree_with_lock(tmp_path: Path, uv_lock_text: str) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "nix", repo / "nix")
    (repo / "python").mkdir()
    shutil.copy(REPO / "python/pyproject.toml", repo / "python")
    (repo / "python/uv.lock").write_text(uv_lock_text)
    (repo / "profiles").mkdir()
    return repo


def test_a_lock_without_a_usable_wheel_of_a_dependency_fails_evaluation_naming_it(tmp_path: Path) -> None:
    text = (REPO / "python/uv.lock").read_text()
    # zstandard keeps only its Windows wheels
    block = re.search(r'\[\[package\]\]\nname = "zstandard".*?(?=\n\[\[package\]\]|\Z)', text, re.S)
    assert block is not None
    lines = [line for line in block.group(0).splitlines() if "/zstandard-" not in line or "win_amd64" in line]
    repo = _tree_with_lock(tmp_path, text.replace(block.group(0), "\n".join(lines)))
    completed = nix_eval(f"{locked_python(repo)}.sparkflake.drvPath")
    assert completed.returncode != 0
    assert "python/uv.lock pins no wheel of zstandard 0.25.0 for CPython 3.13 on x86_64-linux" in completed.stderr


def test_a_lock_without_a_dependency_fails_evaluation_naming_it(tmp_path: Path) -> None:
    text = (REPO / "python/uv.lock").read_text()
    block = re.search(r'\[\[package\]\]\nname = "sparkcache".*?(?=\n\[\[package\]\]|\Z)', text, re.S)
    assert block is not None
    repo = _tree_with_lock(tmp_path, text.replace(block.group(0) + "\n", ""))
    completed = nix_eval(f"{locked_python(repo)}.sparkflake.drvPath")
    assert completed.returncode != 0
    assert "python/uv.lock has no package sparkcache" in completed.stderr


def test_the_stand_in_python3_is_a_bare_3_13() -> None:
    python3 = nix_build(f"{stand_in()}.python3")
    completed = subprocess.run(
        [str(python3 / "bin/python3"), "-c",
         "import sys, importlib.util; print(sys.version_info[:2], importlib.util.find_spec('installer'))"],
        capture_output=True, text=True, check=True,
    )
    assert completed.stdout.strip() == "(3, 13) None"
    assert nix_eval(f"{stand_in()}.python3.pythonVersion").stdout.strip() == '"3.13"'


@pytest.mark.slow
def test_the_stand_in_python_packages_are_the_revisions_versions_in_a_symlink_tree() -> None:
    env = nix_build(f"{stand_in()}.python3.withPackages (ps: [ ps.installer ps.packaging ps.zstandard ])")
    completed = subprocess.run(
        [str(env / "bin/python3"), "-c",
         "import json, importlib.metadata as m, installer, packaging, zstandard; print(json.dumps({"
         "'versions': [m.version(n) for n in ('installer', 'packaging', 'zstandard')],"
         " 'installer': installer.__file__}))"],
        capture_output=True, text=True, check=True,
    )
    report = json.loads(completed.stdout)
    assert report["versions"] == ["0.7.0", "25.0", "0.23.0"]
    # imported through the environment: the path is under the env, a link into the package
    assert report["installer"].startswith(f"{env}/lib/python3.13/site-packages/installer/")
    assert (env / "lib/python3.13/site-packages/installer").is_symlink()
    ruff = nix_build(f"{stand_in()}.ruff")
    version = subprocess.run([str(ruff / "bin/ruff"), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "ruff 0.12.11"


@pytest.mark.slow
def test_the_package_runs_on_python_3_13_with_the_locked_versions_only() -> None:
    package = nix_build(f"{locked_python()}.sparkflake")
    completed = subprocess.run([str(package / "bin/sparkflake"), "version", "--json"],
                               capture_output=True, text=True, check=True)
    versions = json.loads(completed.stdout)
    assert versions["python"].startswith("CPython 3.13.")
    for name in ("deflate", "installer", "packaging", "zstandard"):
        assert versions[name] == LOCKED[name]["version"], name
    # nothing of the stand-in's python3Packages is in the package's build closure
    derivation = subprocess.run(["nix-instantiate", "--expr", f"{locked_python()}.sparkflake"],
                                capture_output=True, text=True, check=True).stdout.strip()
    closure = subprocess.run(["nix-store", "--query", "--requisites", derivation],
                             capture_output=True, text=True, check=True).stdout
    assert "installer-0.7.0" not in closure and "packaging-25.0" not in closure and "zstandard-0.23" not in closure
    assert f"installer-{LOCKED['installer']['version']}-py3-none-any.whl" in closure


@pytest.mark.slow
def test_the_ruff_check_runs_the_locked_ruff_which_the_revisions_ruff_would_fail() -> None:
    # nixpkgs' ruff at the revision reports findings on this tree that the locked ruff does
    # not: a check that took pkgs.ruff would fail against nixpkgs, and does against the stand-in.
    revision_ruff = nix_build(f"{stand_in()}.ruff") / "bin/ruff"
    findings = subprocess.run([str(revision_ruff), "check", "--no-cache", "--output-format", "concise", "."],
                              capture_output=True, text=True, check=False, cwd=REPO)
    assert findings.returncode == 1 and re.search(r"Found \d+ errors?", findings.stdout + findings.stderr)
    derivation = subprocess.run(
        [str(REPO / "bin/nix-offline"), "eval", "--raw", ".#checks.x86_64-linux.ruff.drvPath"],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout
    closure = subprocess.run(["nix-store", "--query", "--requisites", derivation],
                             capture_output=True, text=True, check=True).stdout
    assert f"ruff-{LOCKED['ruff']['version']}-py3-none-musllinux_1_2_x86_64.whl" in closure
    assert "ruff-0.12" not in closure
