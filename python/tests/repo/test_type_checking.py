"""The library is type-checked, strict, and the configuration cannot be relaxed unseen:
pyproject.toml's ``[tool.mypy]`` is ``strict`` over ``src`` with no global option beside it,
its overrides only name third-party (or in-image) modules without types, and what that
configuration does to a module of the package is shown by running the locked mypy on one.
``./bin/test`` and the flake check run it; a ``# type: ignore`` names its error code and
says why."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.nix_sandbox  # Python and the locked mypy only: also run by the flake check

PYTHON_DIR = Path(__file__).resolve().parents[2]
REPO = PYTHON_DIR.parent
PYPROJECT = PYTHON_DIR / "pyproject.toml"
SOURCE = PYTHON_DIR / "src" / "sparkflake"


def mypy_config() -> dict[str, object]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]


def test_the_configuration_is_strict_over_the_library_and_nothing_else_is_set() -> None:
    config = mypy_config()
    overrides = config.pop("overrides", [])
    # any other global key (ignore_missing_imports, disable_error_code, a strict flag set to
    # false, follow_imports) would weaken or narrow the check for every module
    assert config == {"files": ["src"], "python_version": "3.11", "strict": True}
    requires = tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"]
    assert requires == f">={config['python_version']}"  # checked for the oldest Python it runs on
    assert overrides, "the modules without types are named one by one"
    for override in overrides:
        assert set(override) == {"module", "ignore_missing_imports"}, override
        assert override["ignore_missing_imports"] is True
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        for module in modules:
            assert module not in ("*", ""), "a global ignore_missing_imports in disguise"
            assert module.split(".")[0] != "sparkflake", f"{module}: the library's own modules are checked"


def test_the_configuration_refuses_an_untyped_module_of_the_package(tmp_path: Path) -> None:
    """The locked mypy, run with the repository's configuration on a module named like the
    library's (``sparkflake.…``): an unannotated function and an implicit Any are errors."""
    package = tmp_path / "src" / "sparkflake"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "untyped.py").write_text("def double(value):\n    return value * 2\n")
    (package / "typed.py").write_text("def double(value: int) -> int:\n    return value * 2\n")
    command = [sys.executable, "-m", "mypy", "--config-file", str(PYPROJECT),
               "--cache-dir", str(tmp_path / "cache"), "--no-color-output"]
    untyped = subprocess.run([*command, str(package / "untyped.py")], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300, check=False)
    assert untyped.returncode == 1, untyped.stdout + untyped.stderr
    assert "untyped.py:1: error: Function is missing a type annotation  [no-untyped-def]" in untyped.stdout
    typed = subprocess.run([*command, str(package / "typed.py")], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, check=False)
    assert typed.returncode == 0, typed.stdout + typed.stderr


def test_bin_test_and_the_flake_check_run_mypy_over_the_library() -> None:
    bin_test = (REPO / "bin" / "test").read_text()
    assert re.search(r'^step mypy env -C "\$repo/python" "\$repo/\.venv/bin/mypy"$', bin_test, re.MULTILINE)
    checks = (REPO / "checks" / "default.nix").read_text()
    check = re.search(r"\n    mypy = pkgs\.runCommand .*?\n    '';\n", checks, re.DOTALL)
    assert check is not None, "checks/default.nix has no mypy check"
    assert "cd ${src}/python\n" in check.group(0) and '\n      mypy --cache-dir "$TMPDIR/mypy-cache"\n' in check.group(0)
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert any(re.match(r"mypy\b", requirement) for requirement in project["optional-dependencies"]["test"])
    lock = tomllib.loads((PYTHON_DIR / "uv.lock").read_text())
    assert [package["name"] for package in lock["package"] if package["name"] == "mypy"] == ["mypy"]


IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[a-z0-9-]+(?:,\s*[a-z0-9-]+)*\])?(?P<rest>.*)$")


def test_every_type_ignore_names_its_error_code_and_says_why() -> None:
    """Allowed only where a library's types are wrong: the code says which error, and a
    comment (on the line, or on the lines just above it) says why."""
    problems = []
    for path in sorted(SOURCE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            found = IGNORE.search(line)
            if found is None:
                continue
            where = f"{path.relative_to(PYTHON_DIR)}:{number}"
            if found["codes"] is None:
                problems.append(f"{where}: no error code")
            explained = found["rest"].strip().startswith("#") or (
                number > 1 and lines[number - 2].strip().startswith("#")
            )
            if not explained:
                problems.append(f"{where}: no comment saying why")
    assert problems == []
