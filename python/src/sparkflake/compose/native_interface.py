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

import contextlib
import hashlib
import json
import mmap
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from .elf import read_sections

_OP_USE = re.compile(rb"torch\.ops\.(_[A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
# `import vllm.a.b` and `from vllm.a import …` at the start of a line (the module path only:
# a name imported from it may be an attribute)
_MODULE_IMPORT = re.compile(rb"^[ \t]*(?:import|from)[ \t]+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", re.M)
# an op schema ("name(" at the start of a string) or a bare name string ("\0name\0")
_SCHEMA_NAME = re.compile(rb"(?<![A-Za-z0-9_:])([A-Za-z_][A-Za-z0-9_]{0,127})\(")
_BARE_NAME = re.compile(rb"\x00([A-Za-z_][A-Za-z0-9_]{0,127})(?=\x00)")
_ATTRIBUTES = frozenset({"default", "overload"})  # torch.ops._C.op.default is the op
SCAN_FORMAT = "sparkflake-python-scan-v1"


@dataclass(frozen=True)
class OpUse:
    namespace: str
    op: str
    path: str  # the first file using it, relative to site-packages


@dataclass(frozen=True)
class PythonScan:
    """What one ``.py`` file's bytes use: ``torch.ops._ns.op`` calls and absolute imports
    of the package's submodules, each once, in the order they first appear."""

    op_uses: tuple[tuple[str, str], ...]
    imports: tuple[str, ...]


def scan_python(data: bytes, package: str) -> PythonScan:
    prefix = package.encode() + b"."
    return PythonScan(
        tuple(dict.fromkeys((m.group(1).decode(), m.group(2).decode()) for m in _OP_USE.finditer(data))),
        tuple(dict.fromkeys(m.group(1).decode() for m in _MODULE_IMPORT.finditer(data) if m.group(1).startswith(prefix))),
    )


@dataclass(frozen=True)
class PythonInterface:
    op_uses: dict[tuple[str, str], str]  # (namespace, op) -> first path calling it
    imports: dict[str, str]  # package submodule -> first path importing it


def python_interface(
    files: Mapping[str, Path], package: str, scan: Callable[[Path], PythonScan] | None = None
) -> PythonInterface:
    """The op uses and ``package.*`` imports of the ``.py`` files (``path -> file``), each
    with the first path (in path order) using it. ``scan`` (default: read and scan the
    file) is a ``PythonScanMemo.scan`` in a build."""
    op_uses: dict[tuple[str, str], str] = {}
    imports: dict[str, str] = {}
    for path in sorted(files):
        if not path.endswith(".py"):
            continue
        found = scan(files[path]) if scan is not None else scan_python(files[path].read_bytes(), package)
        for key in found.op_uses:
            op_uses.setdefault(key, path)
        for module in found.imports:
            imports.setdefault(module, path)
    return PythonInterface(op_uses, imports)


class PythonScanMemo:
    """``scan_python`` results kept by the sha256 of the bytes scanned (content-addressed:
    a result is stored only under the digest of the very bytes it was made from), in one
    table per package; ``hash_file`` gives a file's sha256, in a build from the file-hash
    records (bound to the file's device, inode, size, mtime and ctime, so a file changed
    since it was hashed is read again). A rebuild after one patch scans only the files
    whose bytes are new. ``table`` None: nothing kept between runs."""

    def __init__(self, table: Path | None, package: str, hash_file: Callable[[Path], str]) -> None:
        self.table_path = table
        self.package = package
        self.hash_file = hash_file
        self._scans: dict[str, PythonScan] | None = None
        self._dirty = False

    def _known(self) -> dict[str, PythonScan]:
        if self._scans is None:
            self._scans = {}
            if self.table_path is not None:
                with contextlib.suppress(FileNotFoundError, ValueError, TypeError, AttributeError, KeyError):
                    self._scans = _scans_of(json.loads(self.table_path.read_bytes()), self.package)
        return self._scans

    def scan(self, path: Path) -> PythonScan:
        known = self._known().get(self.hash_file(path))
        if known is not None:
            return known
        data = path.read_bytes()
        found = scan_python(data, self.package)
        self._known()[hashlib.sha256(data).hexdigest()] = found
        self._dirty = True
        return found

    def save(self) -> None:
        if self._dirty and self.table_path is not None and self._scans is not None:
            files = {digest: [[list(use) for use in found.op_uses], list(found.imports)] for digest, found in self._scans.items()}
            with contextlib.suppress(OSError):
                write_bytes_atomic(self.table_path, canonical_json_bytes(
                    {"format": SCAN_FORMAT, "package": self.package, "files": files}))
            self._dirty = False


def _scans_of(document: object, package: str) -> dict[str, PythonScan]:
    """A kept table, every entry's shape checked (a table of another format or package, or
    with one malformed entry, is dropped whole: it is only a cache)."""
    if not isinstance(document, dict) or document.get("format") != SCAN_FORMAT or document.get("package") != package:
        raise ValueError("not a scan table of this package")
    scans: dict[str, PythonScan] = {}
    for digest, (uses, imports) in document["files"].items():
        if not (isinstance(uses, list) and isinstance(imports, list) and all(isinstance(u, list) and len(u) == 2 and all(isinstance(x, str) for x in u) for u in uses)
                and all(isinstance(module, str) for module in imports)):
            raise ValueError(f"malformed scan entry {digest!r}")
        scans[digest] = PythonScan(tuple((namespace, op) for namespace, op in uses), tuple(imports))
    return scans


# the string literals of ops.def/ops.impl are read-only data; the rest of an extension
# (code, CUDA fat binaries: most of its bytes) cannot hold them
STRING_SECTIONS = (".rodata",)


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
