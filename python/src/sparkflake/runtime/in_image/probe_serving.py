"""The serving surface and the fabric userspace, asked of the image's own code.

Runs inside the image (see ``__init__.py``): standard library and the image's packages.
``serving_probe(cases)`` gives one JSON-ready document:

- ``parsers``: every ``--tool-call-parser`` / ``--reasoning-parser`` a case passes, looked
  up in the image's vLLM registries (``ToolParserManager.get_tool_parser``,
  ``ReasoningParserManager.get_reasoning_parser``: the calls ``vllm serve`` makes), with the
  class each name loads, or the registry's error;
- ``nccl_ib``: the IB userspace as NCCL would load it. The sonames NCCL's IB transport
  dlopens are read from the bytes of the image's ``libnccl.so.2`` (NCCL 2.30.7: ``libibverbs.so``,
  then ``libibverbs.so.1``, and the same for ``libmlx5``); each is dlopen'ed here, in the image's root, by the
  image's loader, and the file it resolved to is reported; libibverbs then enumerates its
  devices (``ibv_get_device_list``), which reads the provider configuration and finds none in
  the sandbox. What that proves: the libraries NCCL asks for by name exist in the image,
  load with their dependencies on this root, and initialise. What it does not: that NCCL's
  IB transport runs (that needs a GPU and an HCA: NCCL opens the net at communicator init);
- ``caches``: for each JIT/compile cache variable a case sets, the directory the component's
  own code computes from it (b12x's ``_cute_compile_cache_dir``, Triton's knobs, TorchInductor's
  ``cache_dir``, vLLM's envs, FlashInfer's and CuTe DSL's module constants re-read).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import re
from typing import Any

from probe_support import error_text

# A NUL-terminated soname in a string table: "libibverbs.so.1\0"
_SONAME = re.compile(rb"(lib[A-Za-z0-9_+-]+\.so(?:\.[0-9]+)*)\x00")
# What NCCL's IB transport and its mlx5 direct-verbs path open
IB_LIBRARY_PREFIXES = (b"libibverbs.so", b"libmlx5.so")
SCAN_CHUNK = 4 << 20
SCAN_LIMIT = 1 << 30
PARSER_FLAGS = {"--tool-call-parser": "tool_call", "--reasoning-parser": "reasoning"}


def sonames(path: str, prefixes: tuple[bytes, ...] = IB_LIBRARY_PREFIXES) -> list[str]:
    """The sonames starting with ``prefixes`` that the file's bytes name, sorted (read in
    chunks with an overlap, at most ``SCAN_LIMIT`` bytes)."""
    found: set[bytes] = set()
    tail = b""
    read = 0
    with open(path, "rb") as handle:
        while read < SCAN_LIMIT and (chunk := handle.read(SCAN_CHUNK)):
            read += len(chunk)
            window = tail + chunk
            found.update(match.group(1) for match in _SONAME.finditer(window))
            tail = window[-256:]
    return sorted(name.decode() for name in found if name.startswith(prefixes))


def _loaded_path(handle: ctypes.CDLL, symbol: str) -> str | None:
    """The file a loaded library's symbol lives in (dladdr)."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    libc = ctypes.CDLL(None)
    info = DlInfo()
    address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p)
    if libc.dladdr(address, ctypes.byref(info)) and info.dli_fname:
        library: str = os.path.realpath(info.dli_fname.decode())  # ctypes fields carry no types
        return library
    return None


# a symbol each library exports, to find the file it was loaded from
_EXPORTED = {"libibverbs.so": "ibv_get_device_list", "libmlx5.so": "mlx5dv_query_device"}


def resolve_libraries(names: list[str]) -> dict[str, dict[str, object]]:
    """Each soname dlopen'ed by this process's loader: the file it resolved to, or the error."""
    resolved: dict[str, dict[str, object]] = {}
    for name in names:
        try:
            handle = ctypes.CDLL(name)
        except OSError as exc:
            resolved[name] = {"ok": False, "error": str(exc)}
            continue
        symbol = next((s for prefix, s in _EXPORTED.items() if name.startswith(prefix)), None)
        resolved[name] = {"ok": True, "path": _loaded_path(handle, symbol) if symbol else None}
    return resolved


def verbs_device_count() -> int | None:
    """libibverbs' own device enumeration (its providers are loaded on the way); None: no
    libibverbs.so.1."""
    try:
        verbs = ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return None
    verbs.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    verbs.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    count = ctypes.c_int(-1)
    devices = verbs.ibv_get_device_list(ctypes.byref(count))
    if devices:
        verbs.ibv_free_device_list(devices)
    return count.value


def nccl_library_path() -> str | None:
    spec = importlib.util.find_spec("nvidia.nccl")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "lib", "libnccl.so.2")
        if os.path.isfile(candidate):
            return candidate
    return None


def nccl_ib() -> dict[str, object]:
    library = nccl_library_path()
    if library is None:
        return {"nccl": None, "error": "the image has no nvidia/nccl/lib/libnccl.so.2"}
    names = sonames(library)
    return {"nccl": library, "dlopen_names": names, "resolved": resolve_libraries(names),
            "verbs_devices": verbs_device_count()}


def parsers(cases: list[dict[str, Any]]) -> dict[str, dict[str, object]]:
    """Every parser a case names, asked of the image's registries."""
    wanted: dict[str, set[str]] = {"tool_call": set(), "reasoning": set()}
    for case in cases:
        args = case.get("serve_args", [])
        for flag, role in PARSER_FLAGS.items():
            wanted[role].update(args[i + 1] for i, word in enumerate(args[:-1]) if word == flag)
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    lookups = {"tool_call": ToolParserManager.get_tool_parser, "reasoning": ReasoningParserManager.get_reasoning_parser}
    found: dict[str, dict[str, object]] = {}
    for role, names in wanted.items():
        for name in sorted(names):
            try:
                parser = lookups[role](name)
                found[f"{role}:{name}"] = {"ok": True, "class": f"{parser.__module__}.{parser.__qualname__}"}
            except BaseException as exc:  # noqa: BLE001 - the registry's refusal is the verdict
                found[f"{role}:{name}"] = {"ok": False, "error": error_text(exc)}
    return found


def _b12x() -> str:
    from b12x._lib.compiler import _cute_compile_cache_dir

    return str(_cute_compile_cache_dir())


def _b12x_roce() -> str:
    from b12x.comm.roce._proxy import _cache_dir

    return str(_cache_dir())


def _triton() -> str:
    import triton.knobs

    return str(triton.knobs.cache.dir)


def _inductor() -> str:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return str(cache_dir())


def _vllm() -> str:
    import vllm.envs

    return str(vllm.envs.VLLM_CACHE_ROOT)


def _flashinfer() -> str:
    # a module constant: re-read so that it sees this case's variable
    module = importlib.reload(importlib.import_module("flashinfer.jit.env"))
    return str(module.FLASHINFER_BASE_DIR)


def _cute_dsl() -> str:
    module = importlib.reload(importlib.import_module("cutlass.base_dsl.cache_helpers"))
    return str(module.default_generated_ir_path)


# variable -> the component's own computation of the directory it places
CACHE_RESOLVERS = {
    "B12X_COMPILE_CACHE_DIR": _b12x,
    "XDG_CACHE_HOME": _b12x_roce,
    "TRITON_CACHE_DIR": _triton,
    "TORCHINDUCTOR_CACHE_DIR": _inductor,
    "VLLM_CACHE_ROOT": _vllm,
    "FLASHINFER_WORKSPACE_BASE": _flashinfer,
    "CUTE_DSL_CACHE_DIR": _cute_dsl,
}


def caches(env: dict[str, str]) -> dict[str, dict[str, object]]:
    """With ``env`` set, each cache variable's directory as its component computes it."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        placed: dict[str, dict[str, object]] = {}
        for variable, resolve in CACHE_RESOLVERS.items():
            if variable not in env:
                continue
            try:
                placed[variable] = {"ok": True, "value": env[variable], "directory": resolve()}
            except BaseException as exc:  # noqa: BLE001 - a component that cannot say is the verdict
                placed[variable] = {"ok": False, "value": env[variable], "error": error_text(exc)}
        return placed
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def serving_probe(cases: list[dict[str, Any]]) -> dict[str, object]:
    document: dict[str, object] = {}
    for part, run in (("parsers", lambda: parsers(cases)), ("nccl_ib", nccl_ib),
                      ("caches", lambda: caches(cases[0].get("env", {}) if cases else {}))):
        try:
            document[part] = run()
        except BaseException as exc:  # noqa: BLE001 - one part failing leaves the others
            document[part] = {"error": error_text(exc)}
    return document
