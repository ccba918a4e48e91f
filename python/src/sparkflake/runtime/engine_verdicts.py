"""The engine-start part of a case's verdict (``in_image/probe_engine.py``) as checks, and
what vLLM chose per layer kind as the capabilities' ``KernelSelection``.

Checks: ``runtime.engine-config`` (vLLM's ``create_engine_config``), ``runtime.layer-kernel``
(one per layer kind: the backend or kernel vLLM's selector chose, or its refusal with the
launch setting that caused it), ``runtime.layer-unproven`` (the judge did not reach vLLM's
verdict for the layer: named, never taken as accepted), ``runtime.block-size`` (the KV block size vLLM settles on
for the chosen backends must be the one the launch records: the runtime identity and the
launcher's KV capacity check use it), ``runtime.memory`` (vLLM's startup memory check on
the profile's device, and the KV budget within it), ``runtime.meta-model`` (the default
launch only: its served models constructed on the meta device, in_image/probe_meta_model.py;
fails with vLLM's error if construction raises, when a constructed layer chose another
backend or kernel than vLLM's selector for the same layer kind, and when the constructed
weights and the KV budget exceed what vLLM's startup check grants).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.check_result import FAIL, PASS
from .capabilities import KernelSelection, LayerChoice, selecting_settings
from .check_report import Case, CheckReport

# step in the probe's record -> (what it is, the launch setting that decides it)
LAYER_STEPS: Mapping[str, tuple[str, str]] = {
    "target.sparse_mla_attention": ("target attention (sparse MLA)", "--attention-backend"),
    "target.sparse_mla_kernel": ("target sparse-MLA decode kernel (FlashInfer SM120)", "--attention-backend"),
    "target.moe": ("target MoE", "--moe-backend"),
    "target.linear": ("target linear (NVFP4 GEMM)", "--linear-backend"),
    "draft.vllm_config": ("draft VllmConfig", "--speculative-config"),
    "draft.attention": ("DFlash draft attention (non-causal)", "--speculative-config attention_backend"),
    "mtp.sparse_mla_attention": ("MTP head attention (sparse MLA)", "--speculative-config attention_backend"),
    "mtp.sparse_mla_kernel": ("MTP head sparse-MLA decode kernel (FlashInfer SM120)",
                              "--speculative-config attention_backend"),
    "mtp.moe": ("MTP head MoE (unquantized)", "--moe-backend (inherited) / --speculative-config moe_backend"),
}
# (constructed model, layer kind) -> the selector step (LAYER_STEPS) whose choice the
# constructed layers of that kind must have made, and the fields compared
CONSTRUCTED_STEPS: Mapping[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    ("target", "mla_attention"): ("target.sparse_mla_attention", ("backend",)),
    ("target", "moe"): ("target.moe", ("backend", "experts")),
    ("target", "linear"): ("target.linear", ("kernel",)),
    ("draft", "attention"): ("draft.attention", ("backend",)),
    ("draft", "mla_attention"): ("mtp.sparse_mla_attention", ("backend",)),
    ("draft", "moe"): ("mtp.moe", ("backend", "experts")),
}
GIB = 1 << 30


def _is_refusal(error: str) -> bool:
    """vLLM's selectors and configs refuse with ValueError (pydantic's ValidationError for
    config fields) or NotImplementedError; any other exception is the judge's own seam
    giving way before vLLM decided (a missing process group, a stand-in's limit)."""
    return error.startswith(("ValueError", "ValidationError", "NotImplementedError"))


def kernel_family(choice: str) -> str | None:
    """The toolchain a selected backend's or kernel's code comes from, as the probe's
    ``kernel_toolchains`` names them (None: vLLM's own compiled extensions, whose sm_121
    code the check cannot run without a GPU)."""
    lowered = choice.lower()
    return next((family for family in ("flashinfer", "triton", "b12x") if family in lowered), None)


def _ok(entry: Any) -> bool:
    return isinstance(entry, Mapping) and bool(entry.get("ok"))


def judge_engine(report: CheckReport, case: Case, engine: Any,
                 toolchains: Mapping[str, Any] | None = None) -> KernelSelection | None:
    """The engine-start checks of one case; what vLLM chose for it (None: not judged).
    ``toolchains``: the probe's kernel_toolchains, by which a chosen kernel is loadable."""
    name = case.name
    if not isinstance(engine, Mapping) or not isinstance(engine.get("engine_config"), Mapping):
        report.add("runtime.engine-config", FAIL, f"{name}: the probe did not take the case through vLLM's "
                   "engine start")
        return None
    config = engine["engine_config"]
    if not _ok(config):
        report.add("runtime.engine-config", FAIL, f"{name}: vLLM's create_engine_config refuses it: "
                   f"{config.get('error')}")
        return KernelSelection(selecting_settings(case.serve_args), {"engine_config": LayerChoice(None, str(config.get('error')))},
                               None)
    report.add("runtime.engine-config", PASS, f"{name}: create_engine_config: {config.get('architecture')}, "
               f"KV {config.get('cache_dtype')} in blocks of {config.get('block_size')}")
    layers: dict[str, LayerChoice] = {}
    for step, (what, setting) in LAYER_STEPS.items():
        entry = engine.get(step)
        if not isinstance(entry, Mapping):
            continue
        if _ok(entry):
            choice = str(entry.get("backend") or entry.get("kernel") or "")
            if step != "draft.vllm_config":
                layers[step] = LayerChoice(choice, None)
                report.add("runtime.layer-kernel", PASS, f"{name}: {what}: vLLM selects {choice}")
                _judge_loadable(report, name, what, choice, toolchains or {})
        elif _is_refusal(str(entry.get("error"))):
            layers[step] = LayerChoice(None, str(entry.get("error")))
            report.add("runtime.layer-kernel", FAIL, f"{name}: {what} ({setting}): vLLM refuses: {entry.get('error')}")
        else:
            layers[step] = LayerChoice(None, None, str(entry.get("error")))
            report.add("runtime.layer-unproven", FAIL, f"{name}: {what} ({setting}): unproven: the judge did not "
                       f"reach vLLM's verdict: {entry.get('error')}")
    block = engine.get("block_size")
    settled = None
    if isinstance(block, Mapping):
        settled = _judge_block_size(report, case, block)
    memory = engine.get("memory")
    if isinstance(memory, Mapping):
        if _ok(memory):
            report.add("runtime.memory", PASS, f"{name}: vLLM's startup check grants {memory.get('requested_gib')} GiB "
                       f"of {memory.get('free_at_start_gib')} GiB free; KV budget {memory.get('kv_cache_gib')} GiB")
        else:
            layers["memory"] = LayerChoice(None, str(memory.get("error")))
            report.add("runtime.memory", FAIL, f"{name}: --gpu-memory-utilization/--kv-cache-memory-bytes: "
                       f"{memory.get('error')}")
    meta = engine.get("meta_model")
    if isinstance(meta, Mapping):
        _judge_meta_model(report, name, engine, meta)
    return KernelSelection(selecting_settings(case.serve_args), layers, settled)


def _differences(engine: Mapping[str, Any], meta: Mapping[str, Any]) -> list[str]:
    """Each constructed layer kind whose choice is not the one vLLM's selector made for it."""
    found = []
    for model in ("target", "draft"):
        layers = (meta.get(model) or {}).get("layers") or []
        for layer in layers:
            step_fields = CONSTRUCTED_STEPS.get((model, str(layer.get("kind"))))
            selected = engine.get(step_fields[0]) if step_fields else None
            if step_fields is None or not isinstance(selected, Mapping):
                continue
            step, fields = step_fields
            for field in fields:
                if field not in layer:
                    continue  # e.g. a BF16 linear layer the checkpoint leaves unquantized: no kernel
                if not _ok(selected):
                    found.append(f"{layer.get('first')} ({layer.get('class')}) constructs with {field} "
                                 f"{layer[field]}, which vLLM's selector refuses ({step}: {selected.get('error')})")
                elif str(layer[field]) != str(selected.get(field)):
                    found.append(f"{layer.get('first')} ({layer.get('class')}, {layer.get('count')} layers) "
                                 f"constructs with {field} {layer[field]}, vLLM's selector chose "
                                 f"{selected.get(field)} ({step})")
    return found


def _judge_meta_model(report: CheckReport, name: str, engine: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
    if not _ok(meta):
        where = f" at {meta.get('where')}" if meta.get("where") else ""
        report.add("runtime.meta-model", FAIL, f"{name}: vLLM could not construct the served models on the meta "
                   f"device ({meta.get('phase', 'construction')}{where}): {meta.get('error')}")
        return
    differences = _differences(engine, meta)
    if differences:
        report.add("runtime.meta-model", FAIL, f"{name}: a constructed layer chose another kernel than vLLM's "
                   f"selector for its kind: {'; '.join(differences)}")
        return
    kv = meta.get("kv_cache") or {}
    weights = meta.get("weights_bytes")
    budget = kv.get("budget_bytes")
    memory = engine.get("memory")
    granted = memory.get("requested_gib") if isinstance(memory, Mapping) and _ok(memory) else None
    if isinstance(weights, int) and isinstance(budget, int) and isinstance(granted, (int, float)) \
            and (weights + budget) / GIB > granted:
        report.add("runtime.meta-model", FAIL, f"{name}: the constructed weights ({weights / GIB:.2f} GiB on this "
                   f"rank) and the KV budget ({budget / GIB:.2f} GiB) exceed the {granted} GiB vLLM's startup "
                   f"check grants: lower --kv-cache-memory-bytes")
        return
    groups = ", ".join(f"{group.get('layers')} x {group.get('type')} (block {group.get('block_size')}, page "
                       f"{group.get('page_size_bytes')} B)" for group in kv.get("groups") or [])
    kinds = "; ".join(f"{model} {(meta.get(model) or {}).get('class')}: " + ", ".join(
        f"{layer.get('count')} {layer.get('kind')} {layer.get('backend') or layer.get('kernel') or layer.get('method')}"
        for layer in (meta.get(model) or {}).get("layers") or []) for model in ("target", "draft") if meta.get(model))
    weights_text = f"{weights / GIB:.2f} GiB" if isinstance(weights, int) else "unknown"
    report.add("runtime.meta-model", PASS, f"{name}: constructed on the meta device, rank 0 of TP "
               f"{(meta.get('parallel') or {}).get('tp')}, in {meta.get('seconds')} s, every layer choosing what "
               f"vLLM's selector chose: {kinds}; weights {weights_text} on this rank; KV cache groups: {groups}; "
               f"{kv.get('num_blocks')} blocks in the KV budget")


def _judge_loadable(report: CheckReport, name: str, what: str, choice: str, toolchains: Mapping[str, Any]) -> None:
    family = kernel_family(choice)
    if family is None:
        report.add("runtime.kernel-loadable", PASS, f"{name}: {what}: {choice} runs vLLM's own compiled kernels "
                   "(that they run on the device is not checkable without a GPU)")
        return
    toolchain = toolchains.get(family)
    if not isinstance(toolchain, Mapping):
        report.add("runtime.kernel-loadable", FAIL, f"{name}: {what}: {choice}: the probe did not report how "
                   f"{family} kernels are built")
    elif not toolchain.get("ok"):
        report.add("runtime.kernel-loadable", FAIL, f"{name}: {what}: vLLM selects {choice}, whose {family} "
                   f"kernels cannot be built in the image: {toolchain.get('error')}")
    else:
        report.add("runtime.kernel-loadable", PASS, f"{name}: {what}: {choice}: {family} kernels can be built "
                   "in the image (that they run on the device is not checkable without a GPU)")


def _judge_block_size(report: CheckReport, case: Case, block: Mapping[str, Any]) -> int | None:
    name = case.name
    if not _ok(block):
        report.add("runtime.block-size", FAIL, f"{name}: --block-size: vLLM refuses: {block.get('error')}")
        return None
    settled = block.get("block_size")
    given = selecting_settings(case.serve_args)["block-size"]
    if given and str(settled) != given:
        report.add("runtime.block-size", FAIL, f"{name}: --block-size {given}: vLLM settles the KV block size at "
                   f"{settled} for {', '.join(block.get('backends') or [])} (hybrid attention/Mamba alignment), "
                   f"so the runtime identity and the KV capacity check would record {given}: set KV_BLOCK_SIZE="
                   f"{settled}")
    else:
        report.add("runtime.block-size", PASS, f"{name}: KV block size {settled} as vLLM settles it")
    return settled if isinstance(settled, int) else None
