"""The program the runtime check runs inside the image, in the image's own interpreter:
its entry (see ``__init__.py`` for how it gets there).

It makes ONE interpreter start judge every case: it imports every runtime package once,
then has vLLM's, SparkCache's and the other components' own code say what the image offers
(``probe_capabilities``) and accept (or refuse) each launch spec it is given
(``probe_cases``).

Input (argv[1], JSON): ``{"expected_versions": {dist: version}, "device": {...} (the
profile's [device], or absent), "cases": [{"name", "serve_args": [...], "env": {...}}]}``. Output (argv[2]): one JSON document with the
versions, the capabilities (what this image's code offers) and, per case, one verdict
per judgement. The probe never raises: every failure becomes data with its message.

Every name used in these modules was read in the image's source (paths relative to
``/opt/venv/lib/python3.11/site-packages``); the places are quoted where they are used.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.metadata
import io
import json
import logging
import os
import sys
import time
import traceback
import warnings
from typing import Any

from probe_capabilities import PLUGINS, capabilities
from probe_cases import inspect_models_here, judge_case, preload_model_classes
from probe_engine import install_device
from probe_meta_model import collect_constructions
from probe_serving import serving_probe
from probe_support import (
    CAPTURE,
    CHILD_SPANS,
    ENV_READS,
    PHASE_SECONDS,
    PROGRESS_FILE,
    STARTED,
    LogCapture,
    case_done,
    error_text,
    forked_result,
    run_forked,
    track_environ_reads,
)

RUNTIME_MODULES = ("torch", "vllm", "b12x", "sparkcache", "fastsafetensors", "flashinfer")
FORKED_IMPORTS = ("flashinfer",)


def _import_one(name: str, capture: LogCapture) -> dict[str, object]:
    started = time.monotonic()
    before = len(capture.records)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            importlib.import_module(name)
        return {
            "ok": True,
            "seconds": round(time.monotonic() - started, 3),
            "warnings": [str(w.message)[:2000] for w in caught],
            "log": capture.records[before:],
            "stderr": stderr.getvalue()[-4000:],
        }
    except BaseException as exc:  # noqa: BLE001 - an import failure is a verdict
        return {"ok": False, "error": error_text(exc), "log": capture.records[before:],
                "stderr": stderr.getvalue()[-4000:]}


def _child_verdict(name: str, pid: int, result_path: str) -> dict[str, object]:
    produced = forked_result(f"importing {name}", pid, result_path)
    if "value" not in produced:
        return {"ok": False, "error": produced["error"]}
    verdict = dict(produced["value"])
    verdict["process"] = "forked after torch"
    return verdict


def import_runtime(capture: LogCapture, scratch: str) -> dict[str, Any]:
    """Every runtime module imported. FlashInfer's import alone took 46 s under qemu after
    torch's and vLLM's: it is imported in a child forked once torch (which it needs) is in,
    on the other core, beside vLLM's import here (``parent_imported`` in the result says
    whether the rest of the probe imported it in this process all the same)."""
    imports: dict[str, Any] = {}  # module -> its verdict (an object)
    children = []
    for name in RUNTIME_MODULES:
        if name in FORKED_IMPORTS and hasattr(os, "fork"):
            continue
        imports[name] = _import_one(name, capture)
        if name == "torch" and imports[name].get("ok"):
            children = [(forked, run_forked(lambda forked=forked: _import_one(forked, capture),
                                             f"{scratch}/import-{forked}.json"))
                        for forked in FORKED_IMPORTS if hasattr(os, "fork")]
    for name in FORKED_IMPORTS:
        if name not in imports and all(name != forked for forked, _ in children):
            imports[name] = _import_one(name, capture)  # torch failed: in this process
    for name, pid in children:
        imports[name] = _child_verdict(name, pid, f"{scratch}/import-{name}.json")
    return imports


def select_platform() -> str:
    """vLLM finds its platform through NVML and its CUDA platform module links the host
    driver's libcuda.so.1 (vllm/platforms/cuda.py:23 imports vllm._C_stable_libtorch),
    which the NVIDIA container toolkit mounts at run time: the image does not contain it
    and the check has no GPU. So the parser and configs are built on vLLM's CPU platform,
    as `vllm bench` does on a machine without an accelerator (vllm/entrypoints/cli/main.py:
    72-86), set where vllm/platforms/__init__.py:315 keeps the resolved platform. What
    depends on the CUDA platform (kernel selection at start) is not judged here."""
    import vllm.platforms as platforms

    try:
        from vllm.platforms.cuda import CudaPlatform  # a host that has the driver

        platforms._current_platform = CudaPlatform()
        return f"{CudaPlatform.__module__}.{CudaPlatform.__qualname__}"
    except ImportError as exc:
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
        return f"vllm.platforms.cpu.CpuPlatform (CUDA platform not importable: {error_text(exc)})"


def versions(expected: dict[str, str]) -> dict[str, object]:
    found: dict[str, object] = {}
    for dist in sorted(expected):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _judge_cases(requested: list[dict[str, Any]], verdicts: list[dict[str, object] | None], scratch: str, *,
                 constructed: bool) -> None:
    """Judge the cases of ``requested`` whose served models are (or, ``constructed=False``,
    are not) constructed on the meta device, each verdict at its case's index."""
    for index, case in enumerate(requested):
        if bool(case.get("construct_models")) != constructed:
            continue
        # the case's environment over the probe's, which is put back after it (PATH and
        # CUDA_HOME among them: the capabilities judged after a case read them); these
        # reads, like the restoring pop()'s, are the probe's own, not the image's
        seen = set(ENV_READS)
        previous = {key: os.environ.get(key) for key in case.get("env", {})}
        ENV_READS.intersection_update(seen)
        for key, value in case.get("env", {}).items():
            os.environ[key] = value
        case_started = time.monotonic()
        try:
            verdicts[index] = {**judge_case(case), "seconds": round(time.monotonic() - case_started, 3)}
        except BaseException as exc:  # noqa: BLE001
            verdicts[index] = {"name": case.get("name"), "error": error_text(exc),
                               "traceback": traceback.format_exc()[-4000:]}
        done = sum(verdict is not None for verdict in verdicts)
        case_done(os.path.join(scratch, PROGRESS_FILE), done, len(requested), verdicts[index] or {})
        seen = set(ENV_READS)
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        ENV_READS.intersection_update(seen)


def main(argv: list[str]) -> int:
    # No cyclic garbage collection in this short-lived process: torch's and vLLM's imports
    # took 134.5 s of CPU without it and 141.4 s with it (one run each, under qemu, on the
    # dflash7 image); the process ends with os._exit, so nothing waits to be collected
    gc.disable()
    request = json.loads(open(argv[1], encoding="utf-8").read())
    result: dict[str, object] = {"schema": "sparkflake.runtime-probe/v1", "python": sys.version.split()[0],
                                 "machine": os.uname().machine}
    try:
        capture = CAPTURE
        logging.getLogger().addHandler(capture)
        logging.getLogger("vllm").addHandler(capture)
        track_environ_reads()
        scratch = os.path.dirname(os.path.abspath(argv[2]))
        imports = import_runtime(capture, scratch)
        # vLLM's logger does not propagate to the root logger and its configuration at
        # import replaces the handlers of "vllm" (vllm/logger.py), so attach again
        if capture not in logging.getLogger("vllm").handlers:
            logging.getLogger("vllm").addHandler(capture)
        result["imports"] = imports
        result["import_seconds"] = round(time.monotonic() - STARTED, 3)
        vllm_ok = bool(imports.get("vllm", {}).get("ok"))
        started = time.monotonic()
        if vllm_ok:
            try:
                result["platform"] = (install_device(request["device"]) if request.get("device")
                                      else select_platform())
            except BaseException as exc:  # noqa: BLE001
                result["device_error"] = error_text(exc)
                result["platform"] = select_platform()
        PHASE_SECONDS["platform"] = round(time.monotonic() - started, 3)
        started = time.monotonic()
        result["versions"] = versions(request.get("expected_versions", {}))
        PHASE_SECONDS["versions"] = round(time.monotonic() - started, 3)
        cases: list[dict[str, object] | None] = [None] * len(request.get("cases", []))
        capabilities_found: dict[str, object] = {}
        if vllm_ok:
            capabilities_found.update(capabilities(PLUGINS))
            # The cases whose served models are constructed first: the construction's child
            # is forked from the first of them and runs on the other core beside the other
            # capabilities and cases (the slowest single step of the probe)
            started = time.monotonic()
            result["preloaded_model_classes"] = preload_model_classes(request.get("cases", []))
            inspect_models_here()
            PHASE_SECONDS["preload_model_classes"] = round(time.monotonic() - started, 3)
            _judge_cases(request.get("cases", []), cases, scratch, constructed=True)
            capabilities_found.update(capabilities(skip=PLUGINS))
            _judge_cases(request.get("cases", []), cases, scratch, constructed=False)
        result["capabilities"] = capabilities_found
        result["phase_seconds"] = PHASE_SECONDS
        result["cases"] = [verdict for verdict in cases if verdict is not None]
        if vllm_ok:
            result["serving"] = serving_probe(request.get("cases", []))
        started = time.monotonic()
        collect_constructions()
        PHASE_SECONDS["meta_model_wait"] = round(time.monotonic() - started, 3)
        for name in FORKED_IMPORTS:
            if isinstance(imports.get(name), dict):
                imports[name]["parent_imported"] = name in sys.modules
        result["env_reads"] = sorted(ENV_READS)
        result["child_spans"] = CHILD_SPANS
        result["log"] = capture.records[-200:]
    except BaseException as exc:  # noqa: BLE001
        result["fatal"] = error_text(exc)
        result["traceback"] = traceback.format_exc()[-8000:]
    result["seconds"] = round(time.monotonic() - STARTED, 3)
    # CPU against the wall clock: with two cores, probe + children near 2x seconds means the
    # work itself, not waiting, sets the time (the forked children are reaped by now)
    spent = os.times()
    result["cpu_seconds"] = {"probe": round(spent.user + spent.system, 1),
                             "children": round(spent.children_user + spent.children_system, 1)}
    with open(argv[2], "w", encoding="utf-8") as handle:
        json.dump(result, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    status = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written and closed. The interpreter's own shutdown (atexit handlers
    # and module teardown of torch, vLLM and their threads) took about 30 s under qemu and
    # judges nothing, so the probe ends here.
    os._exit(status)
