"""The probe's ``serving`` document (``in_image/probe_serving.py``) as checks.

Ids: ``runtime.parsers`` (every parser a case passes is in the image's vLLM registry),
``runtime.nccl-ib-userspace`` (the sonames the image's libnccl.so.2 dlopens for its IB
transport load from the image's root, and libibverbs initialises), ``runtime.cache-placement``
(each JIT/compile cache variable a case sets lands where its component computes it: the
directory the variable names, or for XDG_CACHE_HOME one below it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.check_result import FAIL, PASS
from .check_report import CheckReport

# variable -> the directory its component computes, relative to the variable's value
# (b12x/comm/roce/_proxy.py:47: <XDG_CACHE_HOME>/b12x/roce; the others use the value itself)
CACHE_SUFFIX = {"XDG_CACHE_HOME": "/b12x/roce"}


def judge_serving(report: CheckReport, result: Mapping[str, Any]) -> None:
    serving = result.get("serving")
    if not isinstance(serving, Mapping):
        report.add("runtime.parsers", FAIL, "the probe's serving document is not an object")
        return
    _judge_parsers(report, serving.get("parsers"))
    _judge_nccl_ib(report, serving.get("nccl_ib"))
    _judge_caches(report, serving.get("caches"))


def _part_error(part: Any) -> str | None:
    """A part that did not run: absent, or the probe's ``{"error": …}`` in its place."""
    if not isinstance(part, Mapping):
        return "missing from the probe's result"
    return str(part["error"]) if set(part) == {"error"} else None


def _judge_parsers(report: CheckReport, parsers: Any) -> None:
    error = _part_error(parsers)
    if error:
        report.add("runtime.parsers", FAIL, f"the image's parser registries: {error}")
        return
    bad = [f"{name}: {entry.get('error')}" for name, entry in sorted(parsers.items()) if not entry.get("ok")]
    good = [f"{name} -> {entry.get('class')}" for name, entry in sorted(parsers.items()) if entry.get("ok")]
    report.add("runtime.parsers", FAIL if bad else PASS,
               "; ".join(bad) if bad else ("; ".join(good) or "no case passes a parser"))


def _judge_nccl_ib(report: CheckReport, nccl: Any) -> None:
    error = _part_error(nccl)
    if error or not nccl.get("nccl"):
        report.add("runtime.nccl-ib-userspace", FAIL, f"NCCL's IB userspace: {error or nccl.get('error')}")
        return
    names = nccl.get("dlopen_names") or []
    resolved = nccl.get("resolved") or {}
    # NCCL tries each library by its development name, then its soname (src/misc/ibvwrap.cc:
    # dlopen("libibverbs.so"), else dlopen("libibverbs.so.1")): one name of a family is enough
    families: dict[str, list[str]] = {}
    for name in names:
        families.setdefault(name.split(".so", 1)[0], []).append(name)
    problems = [
        "; ".join(f"{name}: {resolved.get(name, {}).get('error', 'not tried')}" for name in tried)
        for tried in families.values() if not any(resolved.get(name, {}).get("ok") for name in tried)
    ]
    names = [name for name in names if resolved.get(name, {}).get("ok")]
    if "libibverbs" not in families:
        problems.append(f"{nccl['nccl']} names no libibverbs.so: this NCCL has no IB transport to load")
    devices = nccl.get("verbs_devices")
    if devices is None:
        problems.append("libibverbs.so.1 could not be opened to enumerate devices")
    if problems:
        report.add("runtime.nccl-ib-userspace", FAIL, "; ".join(problems))
        return
    loaded = ", ".join(f"{name} -> {resolved[name].get('path') or 'loaded'}" for name in names)
    report.add("runtime.nccl-ib-userspace", PASS,
               f"{nccl['nccl']} dlopens {loaded}; libibverbs initialised and lists {devices} device(s) "
               "(none in the sandbox). Proves the IB userspace loads in the image's root; NCCL's IB "
               "transport itself starts only at communicator init, with a GPU and an HCA")


def _judge_caches(report: CheckReport, caches: Any) -> None:
    error = _part_error(caches)
    if error:
        report.add("runtime.cache-placement", FAIL, f"cache placement: {error}")
        return
    problems, placed = [], []
    for variable, entry in sorted(caches.items()):
        if not entry.get("ok"):
            problems.append(f"{variable}: {entry.get('error')}")
            continue
        expected = f"{entry.get('value')}{CACHE_SUFFIX.get(variable, '')}"
        if entry.get("directory") != expected:
            problems.append(f"{variable}={entry.get('value')}: the component computes {entry.get('directory')}, "
                            f"expected {expected}")
        else:
            placed.append(f"{variable} -> {expected}")
    report.add("runtime.cache-placement", FAIL if problems else PASS,
               "; ".join(problems) if problems else "; ".join(placed) or "no case sets a cache variable")
