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
