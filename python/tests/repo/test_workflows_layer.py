"""The workflows layer (DESIGN.md, docs/architecture.md "Workflows"): one request → result
function per command, short linear sequences of stage calls that never print. Read from
the source, as the stage-order test reads the imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

SOURCE = Path(__file__).resolve().parents[2] / "src" / "sparkflake"
MAX_WORKFLOW_LINES = 80
MAX_POSITIONAL = 6
# Writing to the terminal is the CLI's: a workflow hands back a result
STANDARD_STREAMS = {"stdout", "stderr", "__stdout__", "__stderr__"}


def functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(), str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def positional_parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    return [argument.arg for argument in [*arguments.posonlyargs, *arguments.args]
            if argument.arg not in ("self", "cls")]


def long_functions(root: Path, limit: int) -> list[str]:
    return [f"{path.relative_to(root.parent)}:{function.lineno}: {function.name} has "
            f"{(function.end_lineno or function.lineno) - function.lineno + 1} lines"
            for path in sorted(root.rglob("*.py")) for function in functions(path)
            if (function.end_lineno or function.lineno) - function.lineno + 1 > limit]


def long_positional_lists(root: Path, limit: int) -> list[str]:
    return [f"{path.relative_to(root.parent)}:{function.lineno}: {function.name} takes "
            f"{len(positional_parameters(function))} positional parameters"
            for path in sorted(root.rglob("*.py")) for function in functions(path)
            if len(positional_parameters(function)) > limit]


def printing_names(root: Path) -> list[str]:
    """``print`` and ``sys.stdout``/``sys.stderr`` wherever they are named."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name) and node.id == "print":
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: print")
            elif (isinstance(node, ast.Attribute) and node.attr in STANDARD_STREAMS
                  and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: sys.{node.attr}")
    return found


def test_no_workflow_function_is_over_80_lines() -> None:
    assert long_functions(SOURCE / "workflows", MAX_WORKFLOW_LINES) == []


def test_no_function_of_the_package_takes_more_than_6_positional_parameters() -> None:
    # stage results travel as keyword arguments or records, never as long positional lists
    assert long_positional_lists(SOURCE, MAX_POSITIONAL) == []


def test_no_workflow_prints() -> None:
    assert printing_names(SOURCE / "workflows") == []


def test_the_rules_find_what_they_are_about(tmp_path: Path) -> None:
    root = tmp_path / "workflows"
    root.mkdir()
    body = "\n".join(f"    x{line} = {line}" for line in range(80))
    (root / "long.py").write_text(
        f"import sys\n\ndef long() -> None:\n{body}\n\n"
        "def wide(a, b, c, d, e, f, g, *, h) -> None:\n    print(a)\n\n"
        "class Step:\n    def narrow(self, a, b, c, d, e, f) -> None:\n        sys.stderr.write(a)\n"
        "        completed.stderr.strip()\n")
    assert long_functions(root, MAX_WORKFLOW_LINES) == ["workflows/long.py:3: long has 81 lines"]
    assert long_positional_lists(root, MAX_POSITIONAL) == ["workflows/long.py:85: wide takes 7 positional parameters"]
    assert printing_names(root) == ["workflows/long.py:86: print", "workflows/long.py:90: sys.stderr"]
