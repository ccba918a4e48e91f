"""The native-interface scan kept by content: a kept scan equals a fresh one, is found by
the file's sha256 alone, and a file whose bytes changed is scanned again."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.compose.native_interface import (
    PythonScan,
    PythonScanMemo,
    python_interface,
    scan_python,
)
from sparkflake.core.file_hashes import FileHashes

_LINES = st.one_of(
    st.sampled_from([
        "import vllm.model_executor.layers", "from vllm.attention import x", "  import vllm._C  # noqa",
        "from vllm import y", "import os.path", "x = 'import vllm.in_a_string'", "torch.ops._C.rms_norm(a, b)",
        "y = torch.ops._moe_C.topk_softmax.default(a)", "torch.ops.aten.add(a)", "torch.ops.vllm.unified(a)",
        "# torch.ops._C_cache_ops.reshape_and_cache(a)", "def f():\n    return torch.ops._C.rms_norm",
    ]),
    st.from_regex(r"(import|from) vllm(\.[a-z_]{1,6}){1,3}( import z)?", fullmatch=True),
    st.from_regex(r"torch\.ops\._[A-Za-z0-9_]{0,6}\.[a-z_][a-z0-9_]{0,8}\(x\)", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30),
)
_FILES = st.dictionaries(
    st.from_regex(r"vllm/[a-c]{1,2}(/[a-c]{1,2})?\.(py|txt)", fullmatch=True),
    st.lists(_LINES, max_size=8).map(lambda lines: "\n".join(lines).encode()),
    max_size=6,
)


def _write(root: Path, files: dict[str, bytes]) -> dict[str, Path]:
    placed = {}
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        placed[path] = target
    return placed


@given(files=_FILES)
@settings(max_examples=60)
def test_a_kept_scan_equals_a_fresh_scan(tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes]) -> None:
    root = tmp_path_factory.mktemp("scan")
    placed = _write(root, files)
    fresh = python_interface(placed, "vllm")
    table = root / "python-scan.json"
    hashes = FileHashes(root / "file-sha256.json", racy_window_ns=0)
    first = PythonScanMemo(table, "vllm", hashes.sha256)
    assert python_interface(placed, "vllm", first.scan) == fresh
    first.save()
    hashes.save()
    kept = PythonScanMemo(table, "vllm", FileHashes(root / "file-sha256.json", racy_window_ns=0).sha256)
    assert python_interface(placed, "vllm", kept.scan) == fresh
    for path, content in files.items():
        if path.endswith(".py"):
            assert kept.scan(placed[path]) == scan_python(content, "vllm")


def test_a_kept_scan_is_found_by_content_and_a_changed_file_is_scanned_again(tmp_path: Path) -> None:
    """The table is keyed by the sha256 of the bytes scanned: a planted scan under a file's
    digest is what the memo answers (it did not read the file), and the same file rewritten
    in place with its size and mtime restored (only ctime differs) is scanned afresh."""
    module = tmp_path / "m.py"
    module.write_bytes(b"torch.ops._C.old_op(x)\n")
    table = tmp_path / "python-scan.json"
    memo = PythonScanMemo(table, "vllm", FileHashes(tmp_path / "file-sha256.json", racy_window_ns=0).sha256)
    assert memo.scan(module) == PythonScan((("_C", "old_op"),), ())
    memo.save()
    document = json.loads(table.read_bytes())
    digest = hashlib.sha256(b"torch.ops._C.old_op(x)\n").hexdigest()
    assert set(document["files"]) == {digest}
    document["files"][digest] = [[["_C", "planted"]], ["vllm.planted"]]
    table.write_text(json.dumps(document))
    hashes = FileHashes(tmp_path / "file-sha256.json", racy_window_ns=0)
    assert PythonScanMemo(table, "vllm", hashes.sha256).scan(module) == PythonScan((("_C", "planted"),), ("vllm.planted",))
    hashes.save()
    status = module.stat()
    module.write_bytes(b"torch.ops._C.new_op(x)\n")  # same size
    os.utime(module, ns=(status.st_atime_ns, status.st_mtime_ns))
    again = PythonScanMemo(table, "vllm", FileHashes(tmp_path / "file-sha256.json", racy_window_ns=0).sha256)
    assert again.scan(module) == PythonScan((("_C", "new_op"),), ())


@pytest.mark.parametrize("document", [
    {"format": "sparkflake-python-scan-v1", "package": "other", "files": {}},
    {"format": "sparkflake-python-scan-v1", "package": "vllm", "files": {"d": [["_C", "op"], []]}},
    {"format": "sparkflake-python-scan-v1", "package": "vllm", "files": {"d": [[], "vllm.a"]}},
    {"format": "sparkflake-python-scan-v1", "package": "vllm", "files": {"d": {"a": 1, "b": 2}}},
    {"format": "sparkflake-python-scan-v1", "package": "vllm", "files": []},
    ["not", "a", "table"],
    {"format": "sparkflake-python-scan-v1", "package": "vllm"},
])
def test_a_kept_table_of_another_shape_is_dropped(tmp_path: Path, document: object) -> None:
    module = tmp_path / "m.py"
    module.write_bytes(b"import vllm.a.b\n")
    table = tmp_path / "python-scan.json"
    table.write_text(json.dumps(document))
    memo = PythonScanMemo(table, "vllm", FileHashes(None).sha256)
    assert memo.scan(module) == PythonScan((), ("vllm.a.b",))
