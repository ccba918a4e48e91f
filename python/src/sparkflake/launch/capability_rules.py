"""Settings the image cannot honour, from its capability manifest (runtime-capabilities.json).

Each rule names the settings that caused the refusal, why the image cannot honour them
(what its own code reported in the runtime check) and what would provide them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..runtime.capabilities import Capabilities

Refusal = tuple[tuple[str, ...], str]


def _norm(value: str) -> str:
    # vLLM's --moe-backend/--linear-backend type: lambda s: s.lower().replace("-", "_")
    # (vllm/engine/arg_utils.py:1844, :1847)
    return value.lower().replace("-", "_")


def _shown(values: tuple[str, ...], limit: int = 12) -> str:
    return ", ".join(values[:limit]) + (" …" if len(values) > limit else "")


def refusals(values: Mapping[str, Any], caps: Capabilities) -> Iterator[Refusal]:
    vllm = caps.versions.get("vllm") or "?"
    for key, offered, normalize in (
        ("ATTENTION_BACKEND", caps.attention_backends, False),
        ("MOE_BACKEND", caps.moe_backends, True),
        ("LINEAR_BACKEND", caps.linear_backends, True),
    ):
        value = values.get(key) or ""
        if not value:
            continue
        if (_norm(value) if normalize else value) not in offered:
            yield (key,), (f"{key}={value}: vLLM {vllm} in this image has no such backend "
                           f"(it offers {_shown(offered)}); an image with that backend would provide it")
        elif "flashinfer" in value.lower() and not caps.flashinfer_kernels:
            yield (key,), (f"{key}={value}: FlashInfer's kernels cannot run in this image (no precompiled "
                           "kernels, and its JIT cannot build them here: runtime-capabilities kernel_toolchains); "
                           "choose another backend, or give the image flashinfer-cubin/-jit-cache or a host "
                           "C++ compiler for nvcc")
    if values.get("FLASHINFER_ALLREDUCE") and not caps.flashinfer_kernels:
        yield ("FLASHINFER_ALLREDUCE",), ("FLASHINFER_ALLREDUCE=1: FlashInfer's kernels cannot run in this image "
                                          "(no flashinfer-cubin, no nvcc); add flashinfer-cubin to the image")
    if values.get("LOAD_FORMAT") and values["LOAD_FORMAT"] not in caps.load_formats:
        yield ("LOAD_FORMAT",), (f"LOAD_FORMAT={values['LOAD_FORMAT']}: vLLM {vllm} has no such loader "
                                 f"({_shown(caps.load_formats)})")
    method = values.get("SPECULATIVE_METHOD")
    if method and method != "none" and method not in caps.speculative_methods:
        yield ("SPECULATIVE_METHOD",), (f"SPECULATIVE_METHOD={method}: vLLM {vllm} has no such speculative method")
    if values.get("SPECULATIVE_ADAPTIVE") and "adaptive_num_speculative_tokens" not in caps.speculative_config_fields:
        yield ("SPECULATIVE_ADAPTIVE",), (
            f"SPECULATIVE_ADAPTIVE=1: vLLM {vllm}'s SpeculativeConfig has no acceptance-based draft depth "
            "(it rejects adaptive_num_speculative_tokens as an unexpected keyword); set SPECULATIVE_ADAPTIVE=0 "
            "for a fixed depth of SPECULATIVE_TOKENS, or use a vLLM that provides adaptive depth")
    if values.get("FULL_CKV_GATHER") and caps.full_ckv_gather_switch is None:
        yield ("FULL_CKV_GATHER", "DCP"), (
            f"DCP={values.get('DCP')} needs B12X's full-CKV gather, and nothing in this image reads a switch for "
            f"it: vLLM {vllm} and b12x {caps.versions.get('b12x') or '?'} read neither B12X_FULL_CKV_GATHER nor "
            "VLLM_B12X_MLA_CKV_GATHER (the seeds' vLLM fork reads the latter); use DCP=1, or an image whose "
            "vLLM provides the gather")
    if values.get("SPARKCACHE_ENABLED"):
        sparkcache = caps.versions.get("sparkcache") or "?"
        profile = values.get("SPARKCACHE_MODEL_PROFILE")
        if profile and profile not in caps.sparkcache_profiles:
            yield ("SPARKCACHE_MODEL_PROFILE",), (
                f"SPARKCACHE_MODEL_PROFILE={profile}: SparkCache {sparkcache} has no such model profile "
                f"({_shown(caps.sparkcache_profiles)})")
        if caps.sparkcache_glm5next_refusal:
            yield ("SPARKCACHE_ENABLED",), (
                f"SPARKCACHE_ENABLED=1: SparkCache {sparkcache} refuses GLM-5.3's KV-cache groups at start "
                f"(vLLM's Glm5Next KDA layers have a Mamba state): {caps.sparkcache_glm5next_refusal}; "
                "set SPARKCACHE_ENABLED=0 (vLLM prefix caching stays on), or use a SparkCache with a GLM-5.3 "
                "hybrid profile")
