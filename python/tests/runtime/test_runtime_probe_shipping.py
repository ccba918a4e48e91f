"""The probe (``runtime/in_image/``) runs in the image's interpreter from the copy
``probe_runner.ship_probe`` puts in the sandbox: that copy must be the whole program (every
module it imports) and import nothing but the standard library, its own modules and the
image's packages. Checked on the source, and by running the shipped copy in a plain
CPython 3.11 that has none of the image's packages (Debian 12's python3)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from sparkflake.runtime.probe_runner import PROBE_DIRECTORY, PROBE_MODULES, ship_probe

# The image's packages the probe's code imports (what it judges), by top-level name
IMAGE_PACKAGES = {"torch", "vllm", "sparkcache", "b12x", "flashinfer", "fastsafetensors"}
HOST_PYTHON = Path("/usr/bin/python3")


def _imports(path: Path) -> list[tuple[int, int, str]]:
    """(line, relative level, top-level name) of every import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, 0, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.level, (node.module or "").split(".")[0]))
    return found


def test_every_module_of_the_probe_is_shipped():
    on_disk = {path.name for path in PROBE_DIRECTORY.glob("*.py")} - {"__init__.py"}
    assert on_disk == set(PROBE_MODULES)


def test_the_probe_imports_only_the_standard_library_its_own_modules_and_the_image():
    own = {name.removesuffix(".py") for name in PROBE_MODULES}
    problems = []
    for name in PROBE_MODULES:
        for line, level, top in _imports(PROBE_DIRECTORY / name):
            if level:
                problems.append(f"{name}:{line}: relative import (the shipped copy is no package)")
            elif top not in sys.stdlib_module_names and top not in own and top not in IMAGE_PACKAGES:
                problems.append(f"{name}:{line}: imports {top}, which the image's interpreter may lack")
    assert not problems, problems


def test_the_shipped_probe_runs_alone_and_names_what_the_interpreter_lacks(tmp_path):
    assert HOST_PYTHON.is_file(), "Debian 12's python3 (bin/bootstrap installs it) stands in for the image's"
    work = tmp_path / "sandbox-tmp"
    work.mkdir()
    ship_probe(work)
    request = {"expected_versions": {"vllm": "0.33.0"},
               "cases": [{"name": "plain", "serve_args": ["/models/target"], "env": {"VLLM_HOST_IP": "10.0.0.1"}}]}
    (work / "request.json").write_text(json.dumps(request))
    # -E -s: none of the host's PYTHON* variables or user site, as in the sandbox; the
    # working directory is elsewhere, so the probe finds its modules beside itself only
    completed = subprocess.run([str(HOST_PYTHON), "-E", "-s", str(work / "probe.py"), str(work / "request.json"),
                                str(work / "result.json")], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                               capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((work / "result.json").read_text())
    assert result["schema"] == "sparkflake.runtime-probe/v1"
    assert "fatal" not in result, result.get("traceback")
    assert result["imports"]["torch"]["ok"] is False
    assert result["imports"]["torch"]["error"].startswith("ModuleNotFoundError: No module named 'torch'")
    assert result["imports"]["vllm"]["ok"] is False
    # without vLLM nothing is judged, and the result says why rather than pretending
    assert result["cases"] == [] and result["capabilities"] == {}
    assert result["versions"] == {"vllm": None}
