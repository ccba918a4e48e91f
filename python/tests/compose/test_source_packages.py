"""Parsers and hashers of the source-package overlays: SparkRing's sparkcache-source-tree/v1
digest (against a second formulation of its definition), the torch-op scan of Python and of
ELF read-only data (against a shared object gcc builds here, and readelf's section table)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.compose.elf import read_sections
from sparkflake.compose.native_interface import (
    OpUse,
    missing_ops,
    native_names,
    python_interface,
    unresolved_imports,
)
from sparkflake.compose.source_packages import package_parent, source_tree_sha256
from sparkflake.core.errors import InputError


def reference_source_sha256(root: Path) -> str:
    """The definition read literally: domain string, then for every regular file (sorted by
    relative POSIX path, cache and build directories and bytecode skipped) the 4-byte LE
    path length, the path, and sha256 of the bytes with CRLF as LF."""
    digest = hashlib.sha256(b"sparkcache-source-tree/v1\x00")
    paths = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix())
    for path in paths:
        relative = path.relative_to(root)
        if {"__pycache__", ".pytest_cache", "build"} & set(relative.parts) or path.suffix in (".pyc", ".pyo"):
            continue
        encoded = relative.as_posix().encode()
        digest.update(len(encoded).to_bytes(4, "little") + encoded)
        digest.update(hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).digest())
    return digest.hexdigest()


_segment = st.sampled_from(["a", "b.py", "__pycache__", "build", "x.pyc", "é", "data.json", "sub", "y.pyo", ".pytest_cache"])
_trees = st.dictionaries(
    st.lists(_segment, min_size=1, max_size=3).map("/".join),
    st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"\r\n")),
    min_size=1,
    max_size=10,
)


@settings(max_examples=40)
@given(files=_trees)
def test_source_tree_digest_follows_its_definition(tmp_path_factory: pytest.TempPathFactory, files: dict) -> None:
    root = tmp_path_factory.mktemp("pkg")
    written = {}
    for relative, content in sorted(files.items()):
        target = root / relative
        if any(parent in written for parent in map(str, Path(relative).parents)) or target.exists():
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            continue
        written[relative] = content
    counted = [
        p for p in root.rglob("*")
        if p.is_file() and not {"__pycache__", ".pytest_cache", "build"} & set(p.relative_to(root).parts)
        and p.suffix not in (".pyc", ".pyo")
    ]
    if not counted:
        with pytest.raises(InputError, match="no files to digest"):
            source_tree_sha256(root)
        return
    assert source_tree_sha256(root) == reference_source_sha256(root)


def test_source_tree_digest_reads_crlf_as_lf_and_sees_every_change(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "m.py").write_bytes(b"x = 1\r\n")
    (tmp_path / "b" / "m.py").write_bytes(b"x = 1\n")
    assert source_tree_sha256(tmp_path / "a") == source_tree_sha256(tmp_path / "b")
    (tmp_path / "b" / "m.py").write_bytes(b"x = 2\n")
    assert source_tree_sha256(tmp_path / "a") != source_tree_sha256(tmp_path / "b")
    (tmp_path / "a" / "link.py").symlink_to("m.py")
    with pytest.raises(InputError, match="not a regular file"):
        source_tree_sha256(tmp_path / "a")


def test_package_parent_takes_the_top_or_src_and_refuses_both(tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    assert package_parent(tmp_path, "pkg", "pkg-git") == tmp_path / "src"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    with pytest.raises(InputError, match="found pkg and src/pkg"):
        package_parent(tmp_path, "pkg", "pkg-git")
    with pytest.raises(InputError, match="found neither"):
        package_parent(tmp_path, "other", "other-git")


# --------------------------------------------------------------------------- torch ops

_identifier = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)


@given(namespace=st.from_regex(r"_[A-Za-z0-9_]{0,8}", fullmatch=True), op=_identifier, prefix=st.sampled_from(["", "x = ", "return "]))
def test_python_op_uses_finds_every_call(tmp_path_factory: pytest.TempPathFactory, namespace: str, op: str, prefix: str) -> None:
    root = tmp_path_factory.mktemp("py")
    (root / "m.py").write_text(f"import torch\n{prefix}torch.ops.{namespace}.{op}(a, b)\ntorch.ops.aten.add(a)\ntorch.ops.vllm.x(a)\n")
    (root / "n.txt").write_text("torch.ops._C.in_a_text_file(a)\n")
    uses = python_interface({"pkg/m.py": root / "m.py", "pkg/n.txt": root / "n.txt"}, "pkg").op_uses
    assert uses == {(namespace, op): "pkg/m.py"}


@pytest.fixture(scope="module")
def extension(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared object with op strings the way TORCH_LIBRARY registrations leave them."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed (bin/debian-packages.txt)")
    root = tmp_path_factory.mktemp("so")
    (root / "ops.c").write_text(
        'const char *schemas[] = {"rms_norm(Tensor! result, Tensor input, float eps) -> ()",\n'
        '  "paged_attention_v2", "fused_add_rms_norm(Tensor! input) -> ()"};\n'
        'int not_an_op_symbol(void) { return 0; }\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(root / "_C.abi3.so"), str(root / "ops.c")], check=True)
    return root / "_C.abi3.so"


def test_native_names_read_op_strings_from_rodata(extension: Path) -> None:
    names = native_names([extension])
    assert {"rms_norm", "paged_attention_v2", "fused_add_rms_norm"} <= names
    assert "not_an_op_symbol" not in names  # a function name is in .dynstr, not in .rodata
    uses = {("_C", "rms_norm"): "vllm/a.py", ("_C", "b12x_ckv_gather"): "vllm/b.py", ("_C", "old"): "vllm/c.py",
            ("_C", "default"): "vllm/d.py"}
    assert missing_ops(uses, {("_C", "old"): "vllm/c.py"}, names) == [OpUse("_C", "b12x_ckv_gather", "vllm/b.py")]


def test_read_sections_agrees_with_readelf(extension: Path) -> None:
    listing = subprocess.run(["readelf", "-S", "-W", str(extension)], capture_output=True, text=True, check=True).stdout
    expected = []
    for line in listing.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 5 and fields[1] == ".rodata":
            expected.append((".rodata", int(fields[4], 16), int(fields[5], 16)))
    assert expected and read_sections(extension, (".rodata",)) == expected
    assert read_sections(Path(__file__), (".rodata",)) is None


def test_module_imports_resolve_to_python_packages_or_compiled_modules(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import vllm._C\nfrom vllm.model_executor.layers import x\n  import vllm._moe_C  # noqa\n"
                                   "import os.path\nx = 'import vllm.in_a_string'\nfrom vllm import y\n")
    imports = python_interface({"vllm/m.py": tmp_path / "m.py"}, "vllm").imports
    assert imports == {"vllm._C": "vllm/m.py", "vllm.model_executor.layers": "vllm/m.py", "vllm._moe_C": "vllm/m.py"}
    image = ["vllm/_C.abi3.so", "vllm/model_executor/layers/__init__.py", "vllm/m.py"]
    assert unresolved_imports(imports, {}, image) == [("vllm._moe_C", "vllm/m.py")]
    assert unresolved_imports(imports, {"vllm._moe_C": "vllm/old.py"}, image) == []  # the wheel's own Python imports it
