"""A driver stand-in for the runtime check: a ``libcuda.so.1`` for the image's architecture
that exports every CUDA driver symbol the image's compiled extensions bind and its cuda.h
declares (what code compiled on the rank binds: Triton's launcher), each returning
CUDA_ERROR_NO_DEVICE, so that vLLM's CUDA platform module and the attention backends'
extensions load without a GPU and the judge reaches vLLM's own selectors.

Without it ``import vllm.platforms.cuda`` fails on ``vllm._C_stable_libtorch`` (it links
libcuda.so.1, which the NVIDIA container toolkit mounts at run time and the image does not
contain), and so do ``vllm_flash_attn._vllm_fa2_C`` and the other extensions the MLA
backends import. Python opens extensions with RTLD_NOW, so every symbol they bind must
exist: the list is read from the image itself (``aarch64-linux-gnu-readelf``), and the
library built from it with Debian's cross compiler (``gcc-aarch64-linux-gnu``), without
libc, build id or timestamps, so the same image gives the same bytes. It lives in the
check's scratch and is bound into the sandbox only: it is never part of an image.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic_write import write_bytes_atomic

SONAME = "libcuda.so.1"
INSIDE = "/tmp/sparkflake-driver"
# cuda.h: CUDA_ERROR_NO_DEVICE = 100 ("no CUDA-capable device is detected")
NO_DEVICE = 100
TOOLS = {"arm64": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-readelf")}
_SYMBOL = re.compile(r"^cu[A-Z][A-Za-z0-9_]*$")
# readelf -W --dyn-syms: "Num: Value Size Type Bind Vis Ndx Name"; an import has Ndx UND
_DYNSYM_LINE = re.compile(r"^\s*\d+:\s+[0-9a-fA-F]+\s+\d+\s+(\w+)\s+(\w+)\s+\w+\s+UND\s+(\S+)\s*$")
_NEEDED_LINE = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
MAX_READELF_BYTES = 64 << 20
MAX_HEADER_BYTES = 16 << 20  # cuda.h of CUDA 13 is ~1 MB
# cuda.h: a declaration ``CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value);`` and
# the versioned names its macros map to (``#define cuCtxCreate cuCtxCreate_v4``)
_DECLARED = re.compile(r"\bCUresult\s+CUDAAPI\s+(cu[A-Z][A-Za-z0-9_]*)\s*\(")
_RENAMED = re.compile(r"^\s*#\s*define\s+(cu[A-Z][A-Za-z0-9_]*)\s+(cu[A-Z][A-Za-z0-9_]*)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class DriverStandIn:
    directory: Path | None  # holds libcuda.so.1; None: not built (``problem`` says why)
    symbols: tuple[str, ...]
    binders: tuple[str, ...]  # the image's files (relative to the root) that link libcuda.so.1
    problem: str | None


def driver_imports(readelf_output: str) -> tuple[bool, set[str]]:
    """From ``readelf -d -W --dyn-syms`` of one file: whether it links libcuda.so.1, and the
    unversioned undefined ``cu*`` driver-API functions it binds (cudart's ``cuda*``
    functions and cuBLAS's ``cublas*`` are other libraries' and carry a version or a
    lowercase third letter)."""
    needs = any(match.group(1) == SONAME for match in _NEEDED_LINE.finditer(readelf_output))
    symbols = set()
    for line in readelf_output.splitlines():
        found = _DYNSYM_LINE.match(line)
        if found and found.group(1) in ("FUNC", "NOTYPE") and _SYMBOL.match(found.group(3)):
            symbols.add(found.group(3))
    return needs, symbols


def stand_in_source(symbols: Iterable[str]) -> str:
    """The C source: every symbol returns CUDA_ERROR_NO_DEVICE; cuGetErrorString and
    cuGetErrorName also give a text, which callers print without checking the status."""
    lines = ["/* sparkflake runtime check: libcuda.so.1 stand-in, never shipped in an image */",
             f"static const char no_device[] = \"sparkflake driver stand-in: no CUDA device ({NO_DEVICE})\";"]
    for name in sorted(set(symbols)):
        if name in ("cuGetErrorString", "cuGetErrorName"):
            lines.append(f"int {name}(int error, const char **text) {{ (void)error; if (text) *text = no_device; "
                         f"return 0; }}")
        else:
            lines.append(f"int {name}(void) {{ return {NO_DEVICE}; }}")
    return "\n".join(lines) + "\n"


def declared_functions(header: str) -> set[str]:
    """Every driver function ``cuda.h`` declares, under both names of each versioning macro:
    the real libcuda.so.1 exports the whole API, and code compiled on the rank (Triton's
    CUDA launcher, FlashInfer's JIT modules) binds functions no prebuilt extension of the
    image binds (Triton's launcher: cuCtxSetLimit, cuOccupancyMaxActiveClusters, ...)."""
    names = set(_DECLARED.findall(header))
    for alias, target in _RENAMED.findall(header):
        names.update((alias, target))
    return names


def _driver_headers(root: Path) -> list[Path]:
    """The CUDA driver API headers of the image's CUDA wheels (nvidia/cu*/include/cuda.h)."""
    found = []
    for site in sorted(root.glob("opt/*/lib/python3*/site-packages")):
        found += [path for path in sorted(site.glob("nvidia/cu*/include/cuda.h"))
                  if path.is_file() and not path.is_symlink()]
    return found


def _extension_files(root: Path) -> list[Path]:
    """Shared objects under the image's Python site-packages directories."""
    found = []
    for site in sorted(root.glob("opt/*/lib/python3*/site-packages")) + sorted(root.glob("usr/lib/python3*/dist-packages")):
        for path in sorted(site.rglob("*.so*")):
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def _readelf(tool: str, path: Path) -> str:
    completed = subprocess.run([tool, "-d", "-W", "--dyn-syms", str(path)], capture_output=True, timeout=120,
                               check=False)
    return completed.stdout[:MAX_READELF_BYTES].decode(errors="replace")


def build_stand_in(root: Path, architecture: str, scratch: Path) -> DriverStandIn:
    """The stand-in for the unpacked image at ``root``, in ``scratch/driver/<key>``; reused
    when the same symbols and compiler made it before."""
    tools = TOOLS.get(architecture)
    if tools is None:
        return DriverStandIn(None, (), (), f"no driver stand-in is known for {architecture}")
    gcc, readelf = (shutil.which(tool) for tool in tools)
    if gcc is None or readelf is None:
        return DriverStandIn(None, (), (), f"{tools[0]} and {tools[1]} (Debian package gcc-aarch64-linux-gnu) "
                             "are not installed: the check cannot load vLLM's CUDA platform without a driver")
    symbols: set[str] = set()
    binders = []
    for path in _extension_files(root):
        needs, imported = driver_imports(_readelf(readelf, path))
        if needs:
            symbols |= imported
            binders.append(str(path.relative_to(root)))
    for header in _driver_headers(root):
        with open(header, "rb") as handle:
            symbols |= declared_functions(handle.read(MAX_HEADER_BYTES).decode(errors="replace"))
    source = stand_in_source(symbols)
    version = subprocess.run([gcc, "-dumpfullversion"], capture_output=True, timeout=60, check=False).stdout
    key = hashlib.sha256(source.encode() + b"\0" + version).hexdigest()[:16]
    directory = scratch / "driver" / key
    library = directory / SONAME
    if not library.is_file():
        if (scratch / "driver").is_dir():
            shutil.rmtree(scratch / "driver")  # another image's stand-in, written by this check
        directory.mkdir(parents=True)
        (directory / "stand-in.c").write_text(source)
        built = directory / f".{SONAME}.partial"
        completed = subprocess.run(
            [gcc, "-shared", "-fPIC", "-O1", "-nostdlib", "-Wl,-soname," + SONAME, "-Wl,--build-id=none",
             "-Wl,--hash-style=both", "-o", str(built), str(directory / "stand-in.c")],
            capture_output=True, timeout=300, check=False)
        if completed.returncode != 0:
            return DriverStandIn(None, tuple(sorted(symbols)), tuple(binders),
                                 f"{gcc} failed: {completed.stderr.decode(errors='replace')[-2000:]}")
        built.rename(library)
        write_bytes_atomic(directory / "symbols.json", json.dumps(
            {"symbols": sorted(symbols), "binders": binders}, indent=2).encode())
    return DriverStandIn(directory, tuple(sorted(symbols)), tuple(binders), None)
