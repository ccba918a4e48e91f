"""The repository shape of DESIGN.md, the README's two quick-start commands and the CI hook
that ties the README's test command to .ci/run, and the bootstrap scripts."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkflake.cli import build_parser

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
# The project hook: the README's first line matching this appears verbatim in .ci/run.
TEST_COMMAND_LINE = re.compile(r"^\s*(\./|make |bin/|nix |sparkflake )[^#]*test")

LAYOUT = [
    "flake.nix",
    "flake.lock",
    "nix/package.nix",
    "nix/fetch-locked.nix",
    "nix/offline-nixpkgs/flake.nix",
    "overlays/default.nix",
    "overlays/vllm",
    "checks/default.nix",
    "profiles/glm53-dflash7/profile.toml",
    "profiles/glm53-mtp5/profile.toml",
    "python/pyproject.toml",
    "python/uv.lock",
    "python/src/sparkflake/__init__.py",
    "python/tests",
    "docs/quickstart.md",
    "docs/architecture.md",
    "bench",
    "README.md",
    ".ci/run",
    "bin/test",
    "bin/sparkflake",
    "bin/bootstrap",
    "bin/nix-offline",
    "bin/debian-packages.txt",
]
STAGES = [
    "core/",
    "profile/",
    "lock/",
    "fetch/",
    "compose/",
    "oci/",
    "signing/",
    "audit/",
    "runtime/",
    "distribute/",
    "launch/",
    "cli/",
]


@pytest.mark.parametrize("relative", LAYOUT)
def test_design_layout_exists(relative: str) -> None:
    assert (REPO / relative).exists(), relative


@pytest.mark.parametrize("stage", STAGES)
def test_one_module_or_package_per_stage(stage: str) -> None:
    package_root = REPO / "python" / "src" / "sparkflake"
    name = stage.rstrip("/")
    as_package = package_root / name / "__init__.py"
    as_module = package_root / f"{name}.py"
    assert as_package.is_file() or (not stage.endswith("/") and as_module.is_file()), stage


def quick_start_commands() -> list[str]:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_quick_start_is_exactly_the_main_job_and_the_test_command() -> None:
    assert quick_start_commands() == ["./bin/sparkflake build glm53-dflash7", "./bin/test"]


def test_readme_test_command_line_is_verbatim_in_ci_run() -> None:
    matching = [line for line in README.read_text().splitlines() if TEST_COMMAND_LINE.match(line)]
    assert matching, "README has no test command line"
    assert matching[0] == "./bin/test"
    assert matching[0] in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_main_job_is_a_real_cli_command() -> None:
    main_job = quick_start_commands()[0].split()
    assert main_job[0] == "./bin/sparkflake"
    arguments = build_parser().parse_args(main_job[1:])
    assert callable(arguments.handler)


def test_readme_names_every_document_and_only_documents_that_exist() -> None:
    named = set(re.findall(r"\bdocs/[a-z-]+\.md\b", README.read_text()))
    present = {f"docs/{path.name}" for path in (REPO / "docs").glob("*.md")}
    assert [name for name in sorted(named) if not (REPO / name).is_file()] == []
    assert sorted(present - named) == []


def test_architecture_reading_table_names_every_stage_package() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## Reading the code", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_]+)(?:/|\.py)` \|", table, re.M))
    source = REPO / "python" / "src" / "sparkflake"
    packages = {path.name for path in source.iterdir() if (path / "__init__.py").is_file()}
    modules = {path.stem for path in source.glob("*.py")} - {"__init__"}
    assert listed == packages | modules


PACKAGE = REPO / "python" / "src" / "sparkflake"
ARCHITECTURE = REPO / "docs" / "architecture.md"
# What architecture.md names by path: a file or directory of the checkout (its own top-level
# directories; python/-relative for the tests), or code of the package (`core/documents.
# read_regular_file`, `oci.layer_input.LayerInput`, `launch/conformance.py`). A name with a
# placeholder (`<stage>`, `*`) stands for no one path.
CHECKOUT_DIRECTORIES = ("python/", "tests/", "nix/", "checks/", "bin/", "docs/", "profiles/", "overlays/", "bench/")
CODE_NAME = re.compile(r"[a-z_][a-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_]*)*(?:\.py)?/?")
FILE_SUFFIXES = (".env", ".toml", ".json", ".md", ".lock", ".nix")


def code_name_exists(name: str) -> bool:
    """Whether ``name`` (slashes or dots, relative to the package) is a module of the
    package, or a name its module defines (and an attribute of that, for a method)."""
    parts = name.removesuffix("/").removesuffix(".py").replace("/", ".").split(".")
    for cut in range(len(parts), 0, -1):
        path = PACKAGE.joinpath(*parts[:cut])
        if (path / "__init__.py").is_file() or path.with_suffix(".py").is_file():
            value: object = importlib.import_module(".".join(["sparkflake", *parts[:cut]]))
            for attribute in parts[cut:]:
                if not hasattr(value, attribute):
                    return False
                value = getattr(value, attribute)
            return True
    return False


def named_in_architecture() -> list[str]:
    return re.findall(r"`([^`\n]+)`", ARCHITECTURE.read_text())


def test_every_path_architecture_names_exists() -> None:
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    missing = []
    for name in named_in_architecture():
        if any(mark in name for mark in "<>*…{}"):
            continue
        if name.startswith(CHECKOUT_DIRECTORIES):
            if not ((REPO / name).exists() or (REPO / "python" / name).exists()):
                missing.append(name)
        elif (CODE_NAME.fullmatch(name) and re.split(r"[./]", name)[0] in packages
              and not name.endswith(FILE_SUFFIXES) and not code_name_exists(name)):
            missing.append(name)
    assert missing == []


def test_every_entry_function_and_workflow_architecture_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    missing = []
    reading = text.split("## Reading the code", 1)[1].split("\n## ", 1)[0]
    for package, entries in re.findall(r"^\| `([a-z_]+)/` \| [^|]+ \| ([^|]*) \|", reading, re.M):
        missing += [f"{package}.{entry}" for entry in re.findall(r"`([^`]+)`", entries)
                    if not code_name_exists(f"{package}.{entry}")]
    workflows = text.split("## Workflows", 1)[1].split("\n## ", 1)[0]
    classes = {node.name for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ClassDef)}
    cell = r"((?:\\\||[^|])+)"  # a table cell: anything but an unescaped |
    rows = re.findall(rf"^\| `sparkflake {cell} \| {cell} \| {cell} \|$", workflows, re.M)
    assert len(rows) == workflows.count("\n| `sparkflake ")
    for _command, types, where in rows:
        missing += [name for name in re.findall(r"`([A-Z][A-Za-z]+)`", types) if name not in classes]
        module, *functions = re.findall(r"`([^`]+)`", where)
        missing += [f"{module}:{function}" for function in functions
                    if not code_name_exists(f"{module.removesuffix('.py')}.{function}")]
    assert missing == []


def test_a_name_the_package_lacks_is_found_missing() -> None:
    assert code_name_exists("oci/layout.StagedLayout") and code_name_exists("workflows/build.py")
    assert not code_name_exists("oci/layout.no_such_writer")
    assert not code_name_exists("oci/no_such_module")
    assert not code_name_exists("no_such_package")


@pytest.mark.parametrize(
    "script", [".ci/run", "bin/test", "bin/sparkflake", "bin/bootstrap", "bin/nix-offline"]
)
def test_scripts_are_executable_bash_that_parses(script: str) -> None:
    path = REPO / script
    assert os.access(path, os.X_OK), script
    assert path.read_text().startswith("#!/usr/bin/env bash\n")
    completed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def test_ci_runs_the_readme_test_command_from_its_own_checkout() -> None:
    ci_run = (REPO / ".ci" / "run").read_text()
    assert 'cd "$(dirname "${BASH_SOURCE[0]}")/.."' in ci_run
    assert ci_run.rstrip().endswith("./bin/test")


def _debian_packages() -> dict[str, str]:
    """bin/debian-packages.txt: package -> role ("main" or "")."""
    rows = {}
    for line in (REPO / "bin" / "debian-packages.txt").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            assert len(fields) <= 2 and fields[1:] in ([], ["main"]), line
            rows[fields[0]] = fields[1] if len(fields) == 2 else ""
    return rows


def test_debian_package_list_has_every_tool_the_tests_use() -> None:
    listed = set(_debian_packages())
    required = {"nix-bin", "skopeo", "umoci", "podman", "docker-registry", "openssh-server"}
    required |= {"iproute2", "dpkg-dev", "zstd", "python3-venv"}
    assert required <= listed


def test_the_main_job_installs_only_what_the_build_needs() -> None:
    # ./bin/sparkflake bootstraps with --main-job: the interpreter, HTTPS roots and git for
    # git inputs; nothing only the tests use (issue 32: the cold path installs what it needs)
    main = {package for package, role in _debian_packages().items() if role == "main"}
    assert main == {"python3-venv", "git", "ca-certificates"}
    assert '"$repo/bin/bootstrap" --main-job' in (REPO / "bin" / "sparkflake").read_text()


@pytest.mark.network
def test_bootstrap_is_idempotent() -> None:
    # After ./bin/test's own bootstrap, a run finds everything in place: nothing is installed.
    for argv in ([], ["--main-job"], []):
        completed = subprocess.run(
            [str(REPO / "bin" / "bootstrap"), *argv], capture_output=True, text=True, timeout=600
        )
        assert completed.returncode == 0, completed.stderr
        assert "installing" not in completed.stderr
        assert "creating" not in completed.stderr
        assert "WARNING" not in completed.stderr


def test_runtime_stage_imports_nothing_later_and_launch_reads_only_its_manifest() -> None:
    """Flow order: runtime comes after audit and before distribution and launch."""
    source = REPO / "python" / "src" / "sparkflake"
    later = re.compile(r"^\s*(from|import)\s+(\.\.|sparkflake\.)(launch|distribute|cli|workflows)\b", re.M)
    for path in (source / "runtime").glob("*.py"):
        assert not later.search(path.read_text()), path
    runtime_import = re.compile(r"^\s*from\s+\.\.runtime(\.[a-z_]+)?\s+import\s+([^\n]+)", re.M)
    for path in (source / "launch").glob("*.py"):
        for module, names in runtime_import.findall(path.read_text()):
            assert module == ".capabilities", (path, module, names)


@pytest.mark.parametrize("script", sorted(path.name for path in (REPO / "bench").glob("bench_*.py")))
def test_every_benchmark_starts(script: str) -> None:
    # a benchmark is run by hand, so nothing else would see that it no longer imports
    # (three imported netns_ranks from where tests/fixtures/ had moved it)
    shown = subprocess.run([sys.executable, str(REPO / "bench" / script), "--help"], capture_output=True,
                           text=True, timeout=120, check=False)
    assert shown.returncode == 0 and "usage:" in shown.stdout, shown.stderr[-2000:]
