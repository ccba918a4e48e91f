"""The package's two tiers (docs/architecture.md, DESIGN.md): domain-free libraries at the
bottom (core, then oci), each importing only the libraries below it and never a stage;
above them one package per stage in flow order, importing the libraries and the stages
before it; and no import cycle between modules. The imports are read from the source
(every ``import`` and ``from … import``, at module level or inside a function), so a local
import is no way around the order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SOURCE = Path(__file__).resolve().parents[2] / "src" / "sparkflake"
# The libraries, bottom first: domain-free, each may import itself and the libraries before it.
LIBRARIES = ("core", "oci")
# The stages in flow order, bottom first: each may import every library, itself and every
# stage before it. The workflows (one per command) sit above every stage, the CLI above them.
STAGES = (
    "profile", "lock", "fetch", "compose", "signing", "audit", "runtime",
    "distribute", "launch", "service", "housekeeping", "workflows", "cli",
)
STAGE_ORDER = LIBRARIES + STAGES


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at ``root``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The package modules ``module`` imports (``from pkg import submodule`` names the
    submodule), with the line of each import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            targets = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                for alias in node.names
            ]
        else:
            continue
        found += [(target, node.lineno) for target in targets if target in known]
    return found


def stage_of(module: str) -> str | None:
    """The stage a module belongs to; None for the package root (it holds the version)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def order_violations(root: Path, order: tuple[str, ...], libraries: tuple[str, ...] = ()) -> list[str]:
    """Every import that goes up ``order`` (libraries first, then stages), each named with
    its file and line; an import from one of ``libraries`` into a stage is named as such."""
    modules = module_files(root)
    known = set(modules)
    problems = []
    for module, path in modules.items():
        stage = stage_of(module)
        if stage is None:
            continue
        if stage not in order:
            problems.append(f"{module}: belongs to no stage (stages: {', '.join(order)})")
            continue
        for target, line in imported_modules(module, path, known):
            target_stage = stage_of(target)
            if target_stage is None or target_stage not in order or order.index(target_stage) <= order.index(stage):
                continue
            if stage in libraries and target_stage not in libraries:
                why = f"{target_stage} is a stage; the library {stage} imports only libraries"
            else:
                why = f"{target_stage} is a later {'library' if target_stage in libraries else 'stage'}"
            problems.append(f"{path.relative_to(root.parent)}:{line}: {stage} imports {target} ({why})")
    return problems


def import_cycles(root: Path) -> list[list[str]]:
    """Strongly connected groups of modules that import each other (Tarjan)."""
    modules = module_files(root)
    known = set(modules)
    edges = {module: {target for target, _ in imported_modules(module, path, known)} for module, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in edges[node]:
                cycles.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_imports_a_later_stage() -> None:
    assert order_violations(SOURCE, STAGE_ORDER, LIBRARIES) == []


def test_the_libraries_import_no_stage() -> None:
    """Stated on its own, the rule the first tier stands for: not one import from a library
    (core, oci) names a module of a stage."""
    modules = module_files(SOURCE)
    known = set(modules)
    into_stages = [
        f"{path.relative_to(SOURCE.parent)}:{line}: {target}"
        for module, path in modules.items()
        if stage_of(module) in LIBRARIES
        for target, line in imported_modules(module, path, known)
        if stage_of(target) not in (None, *LIBRARIES)
    ]
    assert into_stages == []


def test_no_import_cycle_between_modules() -> None:
    assert import_cycles(SOURCE) == []


def test_every_stage_is_a_package() -> None:
    for stage in STAGE_ORDER:
        assert (SOURCE / stage / "__init__.py").is_file(), stage
    top_level = {path.stem for path in SOURCE.glob("*.py")} | {path.name for path in SOURCE.iterdir() if path.is_dir() and (path / "__init__.py").is_file()}
    assert top_level - {"__init__"} == set(STAGE_ORDER)


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sparkflake" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "sparkflake"


@pytest.mark.parametrize(
    "importer",
    [
        "from ..oci.layer import Layer\n",  # relative, from a submodule
        "from sparkflake.oci import layer\n",  # absolute, a submodule by name
        "def f():\n    from ..oci import layer\n",  # local import
        "import sparkflake.oci.layer\n",
    ],
)
def test_an_upward_import_is_found_however_it_is_spelled(tmp_path: Path, importer: str) -> None:
    root = write_package(tmp_path, {
        "__init__.py": "", "core/__init__.py": "", "core/digest.py": importer,
        "oci/__init__.py": "", "oci/layer.py": "from ..core import digest\n",
    })
    [problem] = order_violations(root, ("core", "oci"))
    assert problem.startswith("sparkflake/core/digest.py:") and "core imports sparkflake.oci" in problem
    assert import_cycles(root) == [["sparkflake.core.digest", "sparkflake.oci.layer"]]


def test_a_library_importing_any_stage_is_named(tmp_path: Path) -> None:
    """oci below every stage: its import of compose, the first stage that could feed it, is
    refused, though compose stands before most stages."""
    root = write_package(tmp_path, {
        "__init__.py": "", "core/__init__.py": "", "oci/__init__.py": "", "compose/__init__.py": "",
        "oci/layer.py": "from ..core import errors\nfrom ..compose import layer_input\n",
        "core/errors.py": "", "compose/layer_input.py": "from ..oci import layer\n",
    })
    [problem] = order_violations(root, ("core", "oci", "compose"), ("core", "oci"))
    assert problem == (
        "sparkflake/oci/layer.py:2: oci imports sparkflake.compose.layer_input "
        "(compose is a stage; the library oci imports only libraries)"
    )


def test_a_module_outside_every_stage_is_named(tmp_path: Path) -> None:
    root = write_package(tmp_path, {"__init__.py": "", "helpers.py": "", "core/__init__.py": ""})
    assert order_violations(root, ("core",)) == ["sparkflake.helpers: belongs to no stage (stages: core)"]
