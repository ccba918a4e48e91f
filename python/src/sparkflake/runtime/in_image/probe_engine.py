"""Each launch case taken through vLLM's own engine start as far as it goes without a GPU,
in the image's interpreter: ``EngineArgs.create_engine_config()`` (the whole VllmConfig),
then, with that config current, vLLM's own selectors for every layer kind of the served
models on the profile's device, the block size vLLM's platform settles on for the chosen
backends (hybrid alignment included), and vLLM's startup memory check.

The device is data from the profile (``[device]``), faked at torch.cuda's device queries
(is_available, device_count, current_device, get_device_capability, get_device_properties,
get_device_name, mem_get_info), so that vLLM's own ``NonNvmlCudaPlatform``
(vllm/platforms/cuda.py:1008), made the current platform, and b12x's capability gating
(b12x/_lib/gating.py) both see the GB10. The seam cannot be lower: torch's cudart 13.0
asks the driver for a private export table at cudaGetDeviceCount, so a driver stand-in
answering cuDeviceGetAttribute and the like is not enough (tried: cudaGetDeviceCount fails
with 500 after cuGetExportTable). The driver is a stand-in library
(runtime/driver_stand_in.py) that only lets the compiled extensions load.

The models are not constructed here: the layer parameters passed to the selectors are the
ones each model's layers pass, read from the checkpoint's config as vLLM parsed it; the
places are quoted where they are used. For the profile's default launch the served models
are also constructed on the meta device (probe_meta_model.py, in a forked child), and the
host compares what each constructed layer chose with these selectors' choices. Every
name was read in the image's vLLM 0.33.0 (paths relative to site-packages/vllm).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from probe_meta_model import start_construction
from probe_support import error_text

GIB = 1 << 30
DEVICE_STAND_IN: dict[str, Any] = {}  # the profile's device, once installed


# What stays unproven below the device seam (recorded with the platform in the capabilities)
BELOW_THE_SEAM = ("the CUDA runtime and driver (torch's cudart 13.0 asks the driver for a private export "
                  "table at cudaGetDeviceCount, which no stand-in can answer honestly)",
                  "that a selected kernel compiles for and runs on sm_121")


def _install_torch_device(device: dict[str, Any], major: int, minor: int) -> None:
    """torch.cuda's device queries answered from ``device``: the seam below vLLM's own
    NonNvmlCudaPlatform (vllm/platforms/cuda.py:1008, which asks torch.cuda) and below
    b12x's gating (b12x/_lib/gating.py get_compute_capability: torch.cuda.is_available(),
    torch.cuda.get_device_capability()), which vLLM's b12x attention, MoE and linear
    kernels consult through b12x's is_supported(). Only the queries: anything that needs
    the CUDA runtime (an allocation, a stream, a kernel) still fails, and a selection that
    reaches it is unproven, never accepted."""
    import types

    import torch

    total = int(float(device["total_memory_gib"]) * GIB)
    free = int(float(device["free_at_start_gib"]) * GIB)
    properties = types.SimpleNamespace(
        name=str(device["name"]), major=major, minor=minor, total_memory=total,
        # cuda.py:700 is_integrated_gpu: the unified memory of a GB10
        is_integrated=bool(device.get("unified")))
    cuda = torch.cuda
    cuda.is_available = lambda: True
    # one device per host: the launcher runs one rank per host (NODE_COUNT ranks)
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: (major, minor)
    cuda.get_device_properties = lambda device=None: properties
    cuda.get_device_name = lambda device=None: properties.name
    cuda.mem_get_info = lambda device=None: (free, total)


def install_device(device: dict[str, object]) -> str:
    """vLLM's CUDA platform on ``device`` (the profile's [device] table): torch.cuda's
    device queries answer from it (_install_torch_device) and vLLM's NonNvmlCudaPlatform,
    which asks them, is made the current platform."""
    import vllm.platforms as platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform

    major, minor = (int(part) for part in str(device["capability"]).split("."))
    _install_torch_device(device, major, minor)

    # vLLM is not installed on the host, so its class is Any to mypy (disallow_subclassing_any)
    class DeviceStandIn(NonNvmlCudaPlatform):  # type: ignore[misc]
        """What NonNvmlCudaPlatform does not answer through torch.cuda's queries."""

        @classmethod
        def device_count(cls) -> int:
            # cuda.py:72 counts through torch._C._cuda_getDeviceCount (the CUDA runtime)
            return 1

        @classmethod
        def _find_non_ssm_backends(cls, vllm_config: Any) -> list[Any]:
            # interface.py:679 collects the constructed attention layers' backends; no
            # model is constructed here, so the backends vLLM's selectors chose for the
            # case stand in for them (set by judge_engine before the block-size step)
            return list(DEVICE_STAND_IN.get("backends", []))

    platforms._current_platform = DeviceStandIn()
    DEVICE_STAND_IN.update(device)
    # vLLM decided at import whether Triton has an active driver (vllm/triton_utils/
    # importing.py: triton's CUDA driver is_active(), torch.cuda.is_available()), False
    # without a device; on the device it is True, and VllmConfig picks the V2 model runner
    # by it (config/vllm.py:752 use_v2_model_runner). Answered as the device would there
    # alone: vllm.triton_utils keeps its placeholders, which the modules imported since
    # use (answering it everywhere made vllm.v1.spec_decode reach for triton.runtime)
    import vllm.config.vllm as config_module

    config_module.HAS_TRITON = True
    return (f"vllm.platforms.cuda.NonNvmlCudaPlatform on torch.cuda's device queries answered as "
            f"{device['name']} {major}.{minor}, {device['total_memory_gib']} GiB (the profile's [device]); "
            f"unproven below: {'; '.join(BELOW_THE_SEAM)}")


def _step(record: dict[str, object], name: str, producer: Callable[[], Any]) -> Any:
    try:
        value = producer()
    except BaseException as exc:  # noqa: BLE001 - vLLM's refusal is the verdict
        record[name] = {"ok": False, "error": error_text(exc)}
        return None
    record[name] = {"ok": True, **(value[1] if isinstance(value, tuple) else {})}
    return value[0] if isinstance(value, tuple) else value


def _backend_name(backend_cls: Any) -> str:
    return backend_cls.get_name() if hasattr(backend_cls, "get_name") else str(backend_cls)


def _attention(head_size: int, dtype: Any, kv_cache_dtype: str, **flags: Any) -> tuple[object, dict[str, object]]:
    # vllm/v1/attention/selector.py:109 get_attn_backend, with the current VllmConfig
    from vllm.v1.attention.selector import get_attn_backend

    chosen = get_attn_backend(head_size, dtype, kv_cache_dtype, **flags)
    return chosen, {"backend": _backend_name(chosen), "head_size": head_size, "kv_cache_dtype": kv_cache_dtype,
                    **{key: value for key, value in flags.items() if value}}


def _moe_config(vllm_config: Any, hf: Any, quantized_backend: str) -> Any:
    """The FusedMoEConfig the model's FusedMoE layers build (model_executor/layers/fused_moe/
    layer.py:361), from the checkpoint's expert dimensions."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    parallel = vllm_config.parallel_config
    if parallel.enable_expert_parallel:
        moe_parallel = FusedMoEParallelConfig.make(tp_size_=parallel.tensor_parallel_size, pcp_size_=1,
                                                   dp_size_=parallel.data_parallel_size, sp_size_=1,
                                                   vllm_parallel_config=parallel)
    else:
        # what make() returns without expert parallelism (fused_moe/config.py:1212), for
        # rank 0: make() reads the rank from the TP process group, which the judge does
        # not initialize (the launches set no --enable-expert-parallel)
        size = parallel.tensor_parallel_size * parallel.data_parallel_size
        moe_parallel = FusedMoEParallelConfig(
            tp_size=size, tp_rank=0, pcp_size=1, pcp_rank=0, dp_size=parallel.data_parallel_size, dp_rank=0,
            ep_size=1, ep_rank=0, sp_size=1, use_ep=False, all2all_backend=parallel.all2all_backend,
            enable_eplb=parallel.enable_eplb)
    experts = int(hf.n_routed_experts)
    return FusedMoEConfig(
        num_experts=experts, experts_per_token=int(hf.num_experts_per_tok), hidden_dim=int(hf.hidden_size),
        intermediate_size=int(hf.moe_intermediate_size), num_local_experts=experts // max(1, moe_parallel.ep_size),
        num_logical_experts=experts, activation=MoEActivation.SILU, device="cuda",
        # GLM's router: sigmoid, bias-corrected grouped top-k as DeepSeek-V3's
        routing_method=RoutingMethodType.DeepSeekV3, moe_parallel_config=moe_parallel,
        in_dtype=vllm_config.model_config.dtype, moe_backend=quantized_backend,
        max_num_tokens=vllm_config.scheduler_config.max_num_batched_tokens,
        max_capture_size=vllm_config.compilation_config.max_cudagraph_capture_size or 0,
    )


def _nvfp4_moe(vllm_config: Any, hf: Any) -> tuple[object, dict[str, object]]:
    # modelopt.py:874: ModelOptNvFp4FusedMoE selects with these keys for a W4A4 checkpoint
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import select_nvfp4_moe_backend
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kNvfp4Dynamic,
        kNvfp4Static,
    )

    config = _moe_config(vllm_config, hf, vllm_config.kernel_config.moe_backend)
    backend, experts = select_nvfp4_moe_backend(config, kNvfp4Static, kNvfp4Dynamic)
    return backend, {"backend": str(backend.value), "experts": experts.__name__, "quantization": "nvfp4",
                     "moe_backend_setting": str(config.moe_backend)}


def _unquantized_moe(vllm_config: Any, hf: Any) -> tuple[object, dict[str, object]]:
    # fused_moe/unquantized_fused_moe_method.py:54
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import (
        select_unquantized_moe_backend,
    )

    config = _moe_config(vllm_config, hf, vllm_config.kernel_config.moe_backend)
    backend, experts = select_unquantized_moe_backend(config)
    return backend, {"backend": str(backend.value), "experts": getattr(experts, "__name__", None),
                     "quantization": None, "moe_backend_setting": str(config.moe_backend)}


def _nvfp4_linear() -> tuple[object, dict[str, object]]:
    # model_executor/kernels/linear/__init__.py:1191, what ModelOpt's NVFP4 linear method calls
    from vllm.model_executor.kernels.linear import init_nvfp4_linear_kernel

    kernel = init_nvfp4_linear_kernel()
    return kernel, {"kernel": type(kernel).__name__, "quantization": "nvfp4"}


def _sparse_mla_sm120(hf: Any, tp: int) -> tuple[None, dict[str, object]]:
    """What FLASHINFER_MLA_SPARSE_SM120 needs past vLLM's selector, for GLM-5.3's shape:
    its impl refuses to be built without FlashInfer's sparse MLA decode API
    (v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py:98 has_flashinfer_sparse_mla_sm120,
    which is has_flashinfer(): flashinfer-cubin or nvcc and ninja), and FlashInfer's SM120
    kernel takes the 512+64 (v32/GLM NSA) or GLM-5.3's 512+0 NoPE layout only, with the
    heads per rank and the indexer's top-k inside its family's decode table
    (flashinfer/mla/_core.py:685 _trtllm_batch_decode_sparse_mla_v32_sm120,
    flashinfer/mla/_sparse_mla_sm120/_policy.py _DECODE_*_DISPATCH)."""
    from vllm.utils.flashinfer import (
        has_flashinfer,
        has_flashinfer_sparse_mla_sm120,
        has_flashinfer_sparse_mla_sm120_config,
    )

    heads, top_k = int(hf.num_attention_heads) // tp, int(hf.index_topk)
    kv_lora_rank, rope = int(hf.kv_lora_rank), int(hf.qk_rope_head_dim)
    found: dict[str, object] = {"heads_per_rank": heads, "index_topk": top_k, "kv_lora_rank": kv_lora_rank,
                                "qk_rope_head_dim": rope, "has_flashinfer": bool(has_flashinfer()),
                                # vLLM's own table query (DeepSeek-V4's family; GLM's path does
                                # not call it), recorded beside FlashInfer's GLM table
                                "vllm_dsv4_table": bool(has_flashinfer_sparse_mla_sm120_config(heads, top_k))}
    if not has_flashinfer_sparse_mla_sm120():
        raise ValueError("FLASHINFER_MLA_SPARSE_SM120 requires FlashInfer's sparse MLA decode API "
                         f"(has_flashinfer_sparse_mla_sm120() is False; has_flashinfer() {found['has_flashinfer']}: "
                         "flashinfer-cubin, or nvcc at CUDA_HOME and ninja on PATH)")
    from flashinfer.mla import _sparse_mla_sm120 as sm120

    if kv_lora_rank == 512 and rope == 0:
        family, table = "GLM-5.3 NoPE 512+0", sm120._DECODE_GLM53_NOPE_DISPATCH
    elif kv_lora_rank == 512 and rope == 64:
        family, table = "v32/GLM NSA 512+64", sm120._DECODE_DSV3_2_DISPATCH
    else:
        raise ValueError(f"FlashInfer's SM120 sparse MLA takes the 512+64 or GLM-5.3's 512+0 layout, not "
                         f"kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {rope}")
    if (heads, top_k) not in table:
        raise ValueError(f"FlashInfer's SM120 sparse MLA decode ({family}) has no kernel for {heads} heads per "
                         f"rank and top-k {top_k}: {table!r}")
    return None, {**found, "kernel": f"FlashInfer SM120 sparse MLA decode ({family})", "table": repr(table)}


def _draft_config(vllm_config: Any) -> Any:
    """The draft's VllmConfig as vLLM's proposer makes it (v1/spec_decode/
    llm_base_proposer.py:1265 _create_draft_vllm_config: the draft's moe_backend,
    attention_backend and kv_cache_dtype from the speculative config; dflash.py:91 adds
    use_non_causal), called on a proposer object holding only what the method reads."""
    speculative = vllm_config.speculative_config
    if speculative.method == "dflash":
        from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal
        from vllm.v1.spec_decode.dflash import DFlashProposer as proposer_cls

        proposer = object.__new__(proposer_cls)
        proposer.dflash_causal = not dflash_has_any_non_causal(speculative.draft_model_config.hf_config)
    else:
        from vllm.v1.spec_decode.eagle import EagleProposer as proposer_cls

        proposer = object.__new__(proposer_cls)
    proposer.speculative_config = speculative
    proposer.vllm_config = vllm_config
    return proposer._create_draft_vllm_config()


def _target_layers(vllm_config: Any, record: dict[str, object]) -> list[object]:
    from vllm.config import set_current_vllm_config

    model = vllm_config.model_config
    hf = model.hf_text_config
    tp = vllm_config.parallel_config.tensor_parallel_size
    chosen = []
    with set_current_vllm_config(vllm_config):
        if model.use_mla:
            # model_executor/layers/attention/mla_attention.py:514: head size kv_lora_rank +
            # qk_rope_head_dim (models/glm5next/common/attention.py:559), sparse when the
            # checkpoint has the DSA indexer (index_topk), heads split over TP
            backend = _step(record, "target.sparse_mla_attention", lambda: _attention(
                int(hf.kv_lora_rank) + int(hf.qk_rope_head_dim), model.dtype, vllm_config.cache_config.cache_dtype,
                use_mla=True, use_sparse=getattr(hf, "index_topk", None) is not None,
                num_heads=int(hf.num_attention_heads) // tp))
            if backend is not None:
                chosen.append(backend)
                if _backend_name(backend) == "FLASHINFER_MLA_SPARSE_SM120":
                    _step(record, "target.sparse_mla_kernel", lambda: _sparse_mla_sm120(hf, tp))
        quant = vllm_config.quant_config
        quant_name = quant.get_name() if quant is not None else None
        record["target.quantization"] = {"ok": True, "method": quant_name}
        if getattr(hf, "n_routed_experts", None):
            if quant_name == "modelopt_fp4":
                _step(record, "target.moe", lambda: _nvfp4_moe(vllm_config, hf))
                _step(record, "target.linear", _nvfp4_linear)
            else:
                _step(record, "target.moe", lambda: _unquantized_moe(vllm_config, hf))
    return chosen


def _draft_layers(vllm_config: Any, record: dict[str, object]) -> None:
    from vllm.config import set_current_vllm_config

    speculative = vllm_config.speculative_config
    if speculative is None:
        return
    draft = _step(record, "draft.vllm_config", lambda: (_draft_config(vllm_config), {}))
    if draft is None:
        return
    draft_model = speculative.draft_model_config
    hf: Any = draft_model.hf_text_config if draft_model is not None else None
    tp = speculative.draft_tensor_parallel_size or vllm_config.parallel_config.tensor_parallel_size
    with set_current_vllm_config(draft):
        if speculative.method == "dflash":
            # models/qwen3_dflash.py:234 DFlashQwen3Attention's Attention(head_dim, ...); the
            # draft's non-causal layers are in draft.attention_config.use_non_causal
            _step(record, "draft.attention", lambda: _attention(
                int(getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads),
                draft_model.dtype, draft.cache_config.cache_dtype,
                num_heads=int(hf.num_attention_heads) // tp))
        elif speculative.method == "mtp":
            # the MTP head is a decoder layer of the target's kind (models/glm5next/common/
            # mtp.py): sparse MLA attention and an MoE left unquantized by the checkpoint
            target_hf = vllm_config.model_config.hf_text_config
            backend = _step(record, "mtp.sparse_mla_attention", lambda: _attention(
                int(target_hf.kv_lora_rank) + int(target_hf.qk_rope_head_dim), draft_model.dtype,
                draft.cache_config.cache_dtype, use_mla=True,
                use_sparse=getattr(target_hf, "index_topk", None) is not None,
                num_heads=int(target_hf.num_attention_heads) // tp))
            if backend is not None and _backend_name(backend) == "FLASHINFER_MLA_SPARSE_SM120":
                _step(record, "mtp.sparse_mla_kernel", lambda: _sparse_mla_sm120(target_hf, tp))
            # its MoE is quantized as the checkpoint says for that prefix: the ModelOpt
            # config's own exclusion rule (quantization/modelopt.py:191 is_layer_excluded) on
            # the name vLLM gives the head's experts (mtp.py:118 and :70-75, the decoder layer
            # under the head's prefix; common/model.py:424-428 "<prefix>.mlp", :311 ".experts")
            quant = draft.quant_config
            experts = f"model.layers.{int(target_hf.num_hidden_layers)}.mlp.experts"
            if quant is not None and quant.get_name() == "modelopt_fp4" and not quant.is_layer_excluded(experts):
                _step(record, "mtp.moe", lambda: _nvfp4_moe(draft, target_hf))
            else:
                _step(record, "mtp.moe", lambda: _unquantized_moe(draft, target_hf))


def _block_size(vllm_config: Any, chosen: list[object]) -> tuple[None, dict[str, object]]:
    """vLLM's own block-size settlement for the chosen backends (platforms/interface.py:750
    update_block_size_for_backend: the backends' common size unless --block-size was given,
    hybrid attention/Mamba alignment, the aligned size checked against every backend)."""
    from vllm.platforms import current_platform

    before = vllm_config.cache_config.block_size
    DEVICE_STAND_IN["backends"] = chosen
    try:
        current_platform.update_block_size_for_backend(vllm_config)
    except ValueError as exc:
        if "failed to be inspected" not in str(exc):
            raise
        # the hybrid alignment loads the model class (registry.py resolve_model_cls); the
        # registry logs why its import failed and raises this instead: the import's own
        # error, so the verdict names it (the judge's seam, not vLLM's refusal)
        raise RuntimeError(f"{exc} The model module's import here: {_model_import_error(vllm_config)}") from exc
    finally:
        DEVICE_STAND_IN["backends"] = []
    cache = vllm_config.cache_config
    return None, {"requested": before, "block_size": cache.block_size,
                  "mamba_block_size": getattr(cache, "mamba_block_size", None),
                  "backends": [_backend_name(backend) for backend in chosen]}


def _model_import_error(vllm_config: Any) -> str:
    import importlib
    import traceback

    from vllm.model_executor.models import ModelRegistry

    for architecture in vllm_config.model_config.architectures:
        model = ModelRegistry.models.get(architecture)
        module = getattr(model, "module_name", None)
        if module is None:
            continue
        try:
            getattr(importlib.import_module(module), model.class_name)
        except BaseException as exc:  # noqa: BLE001 - what the registry swallowed
            return f"{module}: {error_text(exc)} | {traceback.format_exc()[-1500:]}"
    return "the module imports here (the registry failed on something else)"


def _memory(vllm_config: Any) -> tuple[None, dict[str, object]]:
    """vLLM's startup check (v1/worker/utils.py:716 request_memory) on the device's free
    memory at start, then the KV budget against what that check grants."""
    from vllm.utils.mem_utils import MemorySnapshot
    from vllm.v1.worker.utils import request_memory

    total = int(float(DEVICE_STAND_IN["total_memory_gib"]) * GIB)
    free = int(float(DEVICE_STAND_IN["free_at_start_gib"]) * GIB)
    snapshot = MemorySnapshot(device="cuda:0", auto_measure=False, free_memory=free, total_memory=total)
    cache = vllm_config.cache_config
    requested = request_memory(snapshot, cache)
    kv_bytes = cache.kv_cache_memory_bytes
    if kv_bytes is not None and kv_bytes > requested:
        # with kv_cache_memory_bytes vLLM skips profiling and allocates it as given
        # (v1/worker/gpu_worker.py:656): past the budget the allocation fails at start
        raise ValueError(f"kv_cache_memory_bytes {kv_bytes} ({kv_bytes / GIB:.2f} GiB) exceeds the "
                         f"{requested / GIB:.2f} GiB vLLM may use on this device (gpu_memory_utilization "
                         f"{cache.gpu_memory_utilization} of {total / GIB:.2f} GiB)")
    return None, {"requested_gib": round(requested / GIB, 3), "free_at_start_gib": round(free / GIB, 3),
                  "kv_cache_gib": None if kv_bytes is None else round(kv_bytes / GIB, 3)}


def _summary(vllm_config: Any) -> dict[str, object]:
    cache = vllm_config.cache_config
    speculative = vllm_config.speculative_config
    summary: dict[str, object] = {
        "architecture": vllm_config.model_config.architecture,
        "is_hybrid": bool(vllm_config.model_config.is_hybrid),
        "use_mla": bool(vllm_config.model_config.use_mla),
        "block_size": cache.block_size, "cache_dtype": str(cache.cache_dtype),
        "gpu_memory_utilization": cache.gpu_memory_utilization,
        "kv_cache_memory_bytes": cache.kv_cache_memory_bytes,
        "attention_backend": _enum_name(vllm_config.attention_config.backend),
        "moe_backend": str(vllm_config.kernel_config.moe_backend),
        "linear_backend": str(vllm_config.kernel_config.linear_backend),
        "max_num_batched_tokens": vllm_config.scheduler_config.max_num_batched_tokens,
        "cudagraph_mode": str(vllm_config.compilation_config.cudagraph_mode),
    }
    if speculative is not None:
        draft = speculative.draft_model_config
        summary["speculative"] = {
            "method": speculative.method, "num_speculative_tokens": speculative.num_speculative_tokens,
            "draft_architectures": list(getattr(draft, "architectures", None) or []),
            "attention_backend": _enum_name(speculative.attention_backend),
            "kv_cache_dtype": speculative.kv_cache_dtype, "moe_backend": speculative.moe_backend,
        }
    return summary


def _enum_name(value: Any) -> str | None:
    return None if value is None else getattr(value, "name", str(value))


def judge_engine(engine_args: Any, headless: bool, construct_models: bool = False) -> dict[str, object]:
    """One case through vLLM's engine start: each step's verdict, vLLM's reason on refusal.
    ``construct_models``: the served models are also constructed on the meta device
    (probe_meta_model), in a child forked with the case's VllmConfig, on the other core
    while this process runs the selectors and the other cases; its record is put in
    ``meta_model`` after the last case (probe_meta_model.collect_constructions)."""
    started = time.monotonic()
    record: dict[str, Any] = {}
    if "total_memory_gib" not in DEVICE_STAND_IN:
        record["engine_config"] = {"ok": False, "error": "the profile states no [device]: vLLM's start is not "
                                   "judged"}
        return record
    from vllm.usage.usage_lib import UsageContext

    # vllm/entrypoints/openai/api_server.py builds the config for the API server so
    vllm_config = _step(record, "engine_config", lambda: (engine_args.create_engine_config(
        UsageContext.OPENAI_API_SERVER, headless=headless), {}))
    if vllm_config is None:
        return record
    record["engine_config"].update(_summary(vllm_config))
    if construct_models:
        start_construction(vllm_config, record)
    chosen = _target_layers(vllm_config, record)
    _draft_layers(vllm_config, record)
    if chosen:
        _step(record, "block_size", lambda: _block_size(vllm_config, chosen))
    _step(record, "memory", lambda: _memory(vllm_config))
    record["seconds"] = round(time.monotonic() - started, 3)
    return record


def python_header() -> str | None:
    import os
    import sysconfig

    path = os.path.join(sysconfig.get_path("include"), "Python.h")
    return path if os.path.isfile(path) else None


def cuda_versions(cuda_home: str | None) -> dict[str, object]:
    """The CUDA compiler wheels against the runtime headers nvcc compiles with: CCCL refuses
    an nvcc whose major.minor is not CUDART_VERSION's (cuda/std/__cccl/cuda_toolkit.h
    #error "CUDA compiler and CUDA toolkit headers are incompatible"), and ptxas (nvcc's
    wheel) refuses the PTX of a newer cicc (nvidia-nvvm)."""
    import importlib.metadata
    import os
    import re

    found: dict[str, object] = {}
    for distribution in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt"):
        try:
            found[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            found[distribution] = None
    header = os.path.join(cuda_home or "", "include", "cuda_runtime_api.h")
    runtime = None
    if cuda_home and os.path.isfile(header):
        with open(header, encoding="utf-8", errors="replace") as handle:
            match = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", handle.read(1 << 20))
        runtime = (int(match.group(1)) // 1000, int(match.group(1)) % 1000 // 10) if match else None
    found["cudart_headers"] = None if runtime is None else f"{runtime[0]}.{runtime[1]}"

    def major_minor(version: object) -> tuple[int, ...] | None:
        return tuple(int(part) for part in str(version).split(".")[:2]) if version else None

    wrong = [f"{name} {found[name]}" for name in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt")
             if found[name] and runtime and major_minor(found[name]) != runtime]
    if wrong:
        found["error"] = (f"{', '.join(wrong)} against the CUDA runtime headers {found['cudart_headers']} "
                          "(CCCL refuses another nvcc major.minor; ptxas refuses a newer cicc's PTX)")
    return found


def kernel_toolchains() -> dict[str, dict[str, object]]:
    """What each kernel family of the image compiles or loads its kernels with, checked as
    far as it can be without a GPU (each entry: ``ok`` and what was found or missing).

    - FlashInfer: its precompiled kernels (flashinfer-cubin, flashinfer-jit-cache), else its
      JIT: nvcc under get_cuda_path() (flashinfer/jit/cpp_ext.py:48: CUDA_HOME, CUDA_PATH,
      ``which nvcc``), ninja on PATH (vLLM's has_flashinfer, vllm/utils/flashinfer.py:88),
      and the host C++ compiler nvcc hands the host code to (torch.utils.cpp_extension.
      get_cxx_compiler: CXX, else ``c++``).
    - Triton: it compiles its CUDA launcher (triton/backends/nvidia/driver.py CudaUtils,
      driver.c) with a C compiler at first use (triton/runtime/build.py _find_compiler: CC,
      gcc, clang); its ptxas is in the wheel.
    - b12x: CuTe DSL kernels compiled in-process by nvidia-cutlass-dsl (no host compiler).
    What cannot be checked without a GPU: that a compiled kernel runs on sm_121."""
    import importlib.util
    import os
    import shutil

    found: dict[str, dict[str, object]] = {}

    def record(name: str, producer: Callable[[], dict[str, object]]) -> None:
        try:
            found[name] = producer()
        except BaseException as exc:  # noqa: BLE001
            found[name] = {"ok": False, "error": error_text(exc)}

    def flashinfer() -> dict[str, object]:
        from vllm.utils.flashinfer import has_flashinfer

        precompiled = [name for name in ("flashinfer_cubin", "flashinfer_jit_cache")
                       if importlib.util.find_spec(name) is not None]
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        if not cuda_home and shutil.which("nvcc"):
            # shutil.which("nvcc") just found it (a str)
            cuda_home = os.path.dirname(os.path.dirname(cast(str, shutil.which("nvcc"))))
        nvcc = shutil.which(os.path.join(cuda_home, "bin", "nvcc")) if cuda_home else None
        cxx = os.environ.get("CXX") or "c++"
        entry: dict[str, Any] = {
            "has_flashinfer": bool(has_flashinfer()), "precompiled": precompiled, "cuda_home": cuda_home,
            "nvcc": nvcc, "ninja": shutil.which("ninja"), "host_cxx": shutil.which(cxx),
            "python_h": python_header(), "cuda_versions": cuda_versions(cuda_home)}
        missing = [what for what, present in (("nvcc (CUDA_HOME)", nvcc), ("ninja", entry["ninja"]),
                                              (f"a host C++ compiler ({cxx}) for nvcc", entry["host_cxx"]),
                                              # ninja runs every build command through /bin/sh -c
                                              # (ninja's subprocess-posix.cc)
                                              ("/bin/sh for ninja", os.path.exists("/bin/sh")),
                                              ("Python.h (FlashInfer's -isystem)", entry["python_h"]))
                   if not present]
        mismatch = entry["cuda_versions"].get("error")
        if mismatch:
            missing.append(str(mismatch))
        entry["ok"] = bool(precompiled) or not missing
        if not entry["ok"]:
            entry["error"] = ("no precompiled FlashInfer kernels (flashinfer-cubin, flashinfer-jit-cache) and its "
                              f"JIT lacks {', '.join(missing)}")
        return entry

    def triton() -> dict[str, object]:
        from triton.runtime.build import _find_compiler

        compiler = _find_compiler("c")
        resolved = shutil.which(compiler)
        if resolved is None:
            return {"ok": False, "error": f"Triton's C compiler {compiler!r} is not in the image"}
        if python_header() is None:
            # its launcher is a Python extension (triton/runtime/build.py: -I the include path)
            return {"ok": False, "c_compiler": resolved, "error": "Python.h is not in the image (Triton's launcher "
                    "is compiled against it)"}
        return {"ok": True, "c_compiler": resolved, "python_h": python_header()}

    def b12x() -> dict[str, object]:
        import cutlass.cute  # noqa: F401 - nvidia-cutlass-dsl, what b12x compiles with

        return {"ok": True, "compiler": "nvidia-cutlass-dsl (in-process)"}

    record("flashinfer", flashinfer)
    record("triton", triton)
    record("b12x", b12x)
    return found

