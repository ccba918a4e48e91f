"""The image's bytecode compiled on the host (runtime.bytecode): each pyc is where, and what,
the image's own interpreter would look for under PYTHONPYCACHEPREFIX; another magic number
or an optimization level compiles nothing."""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.runtime import bytecode

PREFIX_INSIDE = "/tmp/sparkflake-pycache"


def _facts(**changes) -> bytecode.InterpreterFacts:
    values = {"magic": importlib.util.MAGIC_NUMBER.hex(), "cache_tag": sys.implementation.cache_tag,
              "optimize": 0, "dont_write_bytecode": False,
              "path": ("", "/usr/lib/python3.11", "/usr/lib/python311.zip", "/opt/venv/lib/python3.11/site-packages")}
    values.update(changes)
    return bytecode.InterpreterFacts(**values)


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    files = {
        "usr/lib/python3.11/json/__init__.py": "VALUE = 1\n",
        "opt/venv/lib/python3.11/site-packages/pkg/mod.py": "def f():\n    return 2\n",
        "opt/venv/lib/python3.11/site-packages/pkg/broken.py": "def (:\n",
        "opt/venv/lib/python3.11/site-packages/pkg/data.txt": "not python\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    os.utime(root / "usr/lib/python3.11/json/__init__.py", (1, 1))  # the layers' fixed mtime
    # a path reached through a symlink is left to the image's interpreter
    os.symlink("mod.py", root / "opt/venv/lib/python3.11/site-packages/pkg/alias.py")
    return root


def _expected_cache_file(inside: str) -> str:
    """Where CPython itself caches ``inside`` with sys.pycache_prefix set (what
    PYTHONPYCACHEPREFIX sets): importlib._bootstrap_external.cache_from_source."""
    saved = sys.pycache_prefix
    sys.pycache_prefix = PREFIX_INSIDE
    try:
        return importlib.util.cache_from_source(inside)
    finally:
        sys.pycache_prefix = saved


def test_each_pyc_is_where_and_what_the_image_interpreter_reads(tmp_path):
    root = _root(tmp_path)
    pycache = tmp_path / "pycache"
    done = bytecode.precompile(root, pycache, _facts(), workers=2)
    assert (done.compiled, done.refused, done.kept, done.skipped_reason) == (2, 1, 0, None)
    for inside in ("/usr/lib/python3.11/json/__init__.py", "/opt/venv/lib/python3.11/site-packages/pkg/mod.py"):
        cfile = pycache / os.path.relpath(_expected_cache_file(inside), PREFIX_INSIDE)
        data = cfile.read_bytes()
        source = (root / inside.lstrip("/")).stat()
        # the checks SourceLoader.get_code makes before it trusts a timestamp pyc
        flags = importlib._bootstrap_external._classify_pyc(data, inside, {})
        assert flags == 0
        importlib._bootstrap_external._validate_timestamp_pyc(data, int(source.st_mtime), source.st_size, inside, {})
        assert marshal.loads(data[16:]).co_filename == inside
    assert not list(pycache.rglob("alias*")) and not list(pycache.rglob("broken*"))
    again = bytecode.precompile(root, pycache, _facts(), workers=1)
    assert (again.compiled, again.kept) == (0, 2)


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"magic": "0d0d0d0a"}, "bytecode magic 0d0d0d0a"),
    ({"cache_tag": "cpython-313"}, "cache tag cpython-313"),
    ({"optimize": 1}, "optimization level 1"),
])
def test_another_interpreter_compiles_its_own(tmp_path, changes, fragment):
    root = _root(tmp_path)
    done = bytecode.precompile(root, tmp_path / "pycache", _facts(**changes))
    assert done.compiled == 0 and fragment in (done.skipped_reason or "")
    assert not (tmp_path / "pycache").exists()


def test_a_directory_reached_through_a_symlink_is_left_to_the_image(tmp_path):
    root = _root(tmp_path)
    os.symlink("python3.11", root / "usr/lib/python3")
    done = bytecode.precompile(root, tmp_path / "pycache", _facts(path=("/usr/lib/python3",)))
    assert done.compiled == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True), min_size=1, max_size=4))
def test_cache_file_is_cpython_s_own_layout(parts):
    inside = "/" + "/".join(["opt", *parts]) + ".py"
    placed = bytecode._cache_file(Path(PREFIX_INSIDE), inside, sys.implementation.cache_tag)
    assert str(placed) == _expected_cache_file(inside)
