"""Does the retained native code register every torch op the overlaid Python calls?

The vLLM overlay replaces Python but keeps the wheel's compiled extensions, so Python from
another commit may call an op those extensions do not have (it would fail only on a GPU,
at the first call). Checkable without a GPU: vLLM's extensions register their ops from
C++ (``csrc/torch_bindings.cpp``: ``ops.def("rms_norm(Tensor! result, ...) -> ()")`` and
``ops.impl("rms_norm", ...)``), so each op name is a string in the ``.so``; the Python calls
them as ``torch.ops.<namespace>.<op>`` with namespaces that start with ``_`` (``_C``,
``_C_cache_ops``, ``_moe_C``, ...). Ops registered from Python (``torch.ops.vllm.*``,
``direct_register_custom_op``) and torch's own (``aten``) are not the extensions' and are
not checked.

The check is relative to the wheel: only op uses the overlay adds (used by the final
Python, not by the wheel's own Python) must be found in the retained extensions. The
wheel's Python and its extensions were built together; ops they reference conditionally
(other GPU architectures, ROCm) are upstream's business, not the overlay's.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .elf import read_sections

_OP_USE = re.compile(rb"torch\.ops\.(_[A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
# `import vllm.a.b` and `from vllm.a import …` at the start of a line (the module path only:
# a name imported from it may be an attribute)
_MODULE_IMPORT = re.compile(rb"^[ \t]*(?:import|from)[ \t]+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", re.M)
# an op schema ("name(" at the start of a string) or a bare name string ("\0name\0")
_SCHEMA_NAME = re.compile(rb"(?<![A-Za-z0-9_:])([A-Za-z_][A-Za-z0-9_]{0,127})\(")
_BARE_NAME = re.compile(rb"\x00([A-Za-z_][A-Za-z0-9_]{0,127})(?=\x00)")
_ATTRIBUTES = frozenset({"default", "overload"})  # torch.ops._C.op.default is the op


@dataclass(frozen=True)
class OpUse:
    namespace: str
    op: str
    path: str  # the first file using it, relative to site-packages


def python_op_uses(files: Mapping[str, Path]) -> dict[tuple[str, str], str]:
    """``(namespace, op) -> first path`` for every ``torch.ops._ns.op`` in the ``.py`` files
    (``path -> file``), in path order."""
    uses: dict[tuple[str, str], str] = {}
    for path in sorted(files):
        if not path.endswith(".py"):
            continue
        for match in _OP_USE.finditer(files[path].read_bytes()):
            key = (match.group(1).decode(), match.group(2).decode())
            uses.setdefault(key, path)
    return uses


# the string literals of ops.def/ops.impl are read-only data; the rest of an extension
# (code, CUDA fat binaries: most of its bytes) cannot hold them
STRING_SECTIONS = (".rodata",)


def python_module_imports(files: Mapping[str, Path], package: str) -> dict[str, str]:
    """``module -> first path`` for every absolute import of a submodule of ``package``."""
    imports: dict[str, str] = {}
    prefix = package.encode() + b"."
    for path in sorted(files):
        if path.endswith(".py"):
            for match in _MODULE_IMPORT.finditer(files[path].read_bytes()):
                if match.group(1).startswith(prefix):
                    imports.setdefault(match.group(1).decode(), path)
    return imports


def unresolved_imports(
    overlaid: Mapping[str, str], wheel_python: Mapping[str, str], image_paths: Iterable[str]
) -> list[tuple[str, str]]:
    """(module, path) for imports the overlay adds that no file of the image provides: no
    ``.py``, no package directory, no compiled module (``name.abi3.so``,
    ``name.cpython-311-aarch64-linux-gnu.so``) -- e.g. an extension the fork builds and
    the retained wheel lacks."""
    provided: set[str] = set()
    for path in image_paths:
        parts = path.split("/")
        stem = parts[-1].split(".", 1)[0]
        if parts[-1].endswith((".py", ".so")):
            provided.add(".".join([*parts[:-1], stem]))
        provided.update(".".join(parts[:i]) for i in range(1, len(parts)))  # the packages above
    return [(module, path) for module, path in sorted(overlaid.items())
            if module not in wheel_python and module not in provided]


def native_names(libraries: Iterable[Path]) -> frozenset[str]:
    """Every identifier a library's read-only data holds as a string or as an op schema's
    name (the whole file when it has no section table)."""
    names: set[str] = set()
    for library in libraries:
        sections = read_sections(library, STRING_SECTIONS)
        with open(library, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                continue
            ranges = [(offset, length) for _name, offset, length in sections] if sections else [(0, size)]
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                for offset, length in ranges:
                    # one NUL before the range, so a string at its very start is bare too
                    data = b"\x00" + view[offset : offset + length]
                    names.update(match.group(1).decode() for match in _SCHEMA_NAME.finditer(data))
                    names.update(match.group(1).decode() for match in _BARE_NAME.finditer(data))
    return frozenset(names)


def missing_ops(
    overlaid: Mapping[tuple[str, str], str],
    wheel_python: Mapping[tuple[str, str], str],
    registered: frozenset[str],
) -> list[OpUse]:
    """Op uses the overlay adds whose names no retained library holds."""
    return [
        OpUse(namespace, op, path)
        for (namespace, op), path in sorted(overlaid.items())
        if (namespace, op) not in wheel_python and op not in _ATTRIBUTES and op not in registered
    ]
