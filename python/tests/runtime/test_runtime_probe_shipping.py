"""The probe (``runtime/in_image/``) runs in the image's interpreter from the copy
``probe_runner.ship_probe`` puts in the sandbox: that copy must be the whole program (every
module it imports) and import nothing but the standard library, its own modules and the
image's packages. Checked on the source, and by running the shipped copy in a plain
CPython 3.11 that has none of the image's packages (Debian 12's python3)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkflake.runtime.probe_runner import PROBE_DIRECTORY, PROBE_MODULES, ship_probe

# The image's packages the probe's code imports (what it judges), by top-level name: triton
# (torch's) and cutlass (nvidia-cutlass-dsl, b12x's) for how kernels are built
IMAGE_PACKAGES = {"torch", "vllm", "sparkcache", "b12x", "flashinfer", "fastsafetensors", "triton", "cutlass"}
HOST_PYTHON = Path("/usr/bin/python3")
# the probe wraps os.environ's class to record reads; the tests put it back
_ENVIRON_GETITEM = type(os.environ).__getitem__
_ENVIRON_CONTAINS = type(os.environ).__contains__


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


def _probe_support():
    """The shipped probe_support module, loaded from its file under its own name (the
    probe's modules are not sparkflake modules)."""
    spec = importlib.util.spec_from_file_location("shipped_probe_support", PROBE_DIRECTORY / "probe_support.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_forked_step_returns_its_value_and_the_env_it_read(tmp_path, monkeypatch):
    support = _probe_support()
    monkeypatch.setenv("SPARKFLAKE_TEST_READ", "1")
    support.track_environ_reads()
    try:
        pid = support.run_forked(lambda: {"read": os.environ.get("SPARKFLAKE_TEST_READ")}, str(tmp_path / "r.json"))
        assert support.forked_result("reading", pid, str(tmp_path / "r.json"), timeout=60) == {"value": {"read": "1"}}
        assert "SPARKFLAKE_TEST_READ" in support.ENV_READS
    finally:
        type(os.environ).__getitem__ = _ENVIRON_GETITEM
        type(os.environ).__contains__ = _ENVIRON_CONTAINS


def test_a_forked_step_that_raises_or_dies_is_named(tmp_path):
    support = _probe_support()
    pid = support.run_forked(lambda: 1 / 0, str(tmp_path / "raises.json"))
    assert support.forked_result("dividing", pid, str(tmp_path / "raises.json"), timeout=60) == {
        "error": "ZeroDivisionError: division by zero"}
    pid = support.run_forked(lambda: os.kill(os.getpid(), signal.SIGKILL), str(tmp_path / "dies.json"))
    assert support.forked_result("dying", pid, str(tmp_path / "dies.json"), timeout=60) == {
        "error": f"the child dying ended with wait status {signal.SIGKILL} and no result"}


def test_a_forked_step_that_hangs_is_killed_at_its_bound(tmp_path):
    support = _probe_support()
    pid = support.run_forked(lambda: time.sleep(600), str(tmp_path / "hangs.json"))
    started = time.monotonic()
    produced = support.forked_result("sleeping", pid, str(tmp_path / "hangs.json"), timeout=1)
    assert produced == {"error": "the child sleeping did not finish within 1 s and was killed"}
    assert time.monotonic() - started < 30
    with pytest.raises(ChildProcessError):  # reaped: nothing of it is left
        os.waitpid(pid, os.WNOHANG)
