"""The served models of one launch constructed on the meta device, rank 0 of its tensor
parallelism, with the launch's VllmConfig current: every layer's attention backend and MoE
and linear kernel chosen by vLLM's own layer constructors, the KV cache spec from the
constructed attention layers and the KV cache configuration vLLM's engine core derives from
it. Run in a forked child (``run_forked``): the process groups and the layer registry it
makes are not the other cases'.

The seams (everything else is vLLM 0.33.0's own code; paths relative to site-packages/vllm):

- Tensor parallelism: torch's fake process-group backend (torch/testing/_internal/
  distributed/fake_pg.py: no communication, each rank's own sizes) is the default group, at
  rank 0 of the launch's world, and every group vLLM makes (distributed/parallel_state.py:
  500-506 new_group, the device group and the gloo CPU group) is made on it; vLLM's own
  ``init_worker_distributed_environment`` (v1/worker/gpu_worker.py:1690) lays out the TP,
  PP, DCP, DP and EP groups. The device communicator is vLLM's base one
  (distributed/device_communicators/base_device_communicator.py:199: no NCCL), and the TP
  group's broadcaster of scheduler output to the other ranks (parallel_state.py:566,
  shm_broadcast.py MessageQueue: shared memory and zmq on VLLM_HOST_IP, waiting for the
  readers on the other hosts) is not made.
- Weights: the loaders' ``load_model`` (model_executor/model_loader/base_loader.py:63)
  constructs only: ``create_model`` (initialize_model, model_loader/utils.py:74) under the
  model's dtype and ``torch.device("meta")``; no weights are read and no
  ``process_weights_after_loading`` runs (it prepares real weights for the kernels).
- Tensors the constructors ask for on cuda, or pinned, are made on meta (``_cuda_to_meta_mode``;
  counted in the record): a buffer's shape and dtype are the constructor's, its memory is
  never allocated. The CUDA streams and events constructors make for later are stand-ins
  holding nothing, and the current device index is the one device's
  (``_device_runtime_stand_ins``).

What stays unproven: collectives and the inter-rank message queue, the weights and their
processing for the kernels, the other ranks (rank 0 only: each TP rank has the same shapes),
and what the selected kernels do on the device.
"""

from __future__ import annotations

import collections
import os
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from probe_support import error_text, forked_result, run_forked

REDIRECTED: collections.Counter[str] = collections.Counter()
# The construction took 115 s and 154 s under qemu at a load of 7 (glm53-dflash7, TP4): a child that
# hangs (a lock held at fork) is named after this bound rather than CHILD_TIMEOUT's
TIMEOUT = 600.0
# vllm/distributed/device_communicators/base_device_communicator.py:197
BASE_COMMUNICATOR = "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"


def _qualname(value: Any) -> str:
    kind = value if isinstance(value, type) else type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _fake_tensor_parallelism(vllm_config: Any) -> dict[str, object]:
    """Rank 0 of the launch's world on torch's fake process groups, laid out by vLLM."""
    import torch.distributed as dist
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 - registers the "fake" backend
    from torch._C._distributed_c10d import FakeStore
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.distributed.device_communicators import shm_broadcast
    from vllm.platforms import current_platform
    from vllm.v1.worker.gpu_worker import init_worker_distributed_environment

    world = vllm_config.parallel_config.world_size
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    made_on = dist.new_group

    def fake_group(*args: Any, **kwargs: Any) -> Any:
        REDIRECTED[f"process group (backend {kwargs.get('backend')})"] += 1
        return made_on(*args, **{**kwargs, "backend": "fake"})

    dist.new_group = fake_group
    current_platform.get_device_communicator_cls = lambda: BASE_COMMUNICATOR
    shm_broadcast.MessageQueue.create_from_process_group = staticmethod(lambda *args, **kwargs: None)
    with set_current_vllm_config(vllm_config):
        init_worker_distributed_environment(vllm_config, 0, None, 0, "fake")
    return {"world": parallel_state.get_world_group().world_size,
            "tp": parallel_state.get_tensor_model_parallel_world_size(),
            "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
            "pp": parallel_state.get_pp_group().world_size, "dcp": parallel_state.get_dcp_group().world_size}


def _cuda_to_meta_mode() -> Any:
    import torch
    from torch.overrides import TorchFunctionMode

    def is_cuda(device: Any) -> bool:
        try:
            return device is not None and not isinstance(device, bool) and torch.device(device).type == "cuda"
        except (RuntimeError, TypeError, ValueError):
            return False

    # torch is not installed on the host, so its class is Any to mypy (disallow_subclassing_any)
    class CudaToMeta(TorchFunctionMode):  # type: ignore[misc]
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", str(func))
            if is_cuda(kwargs.get("device")):
                kwargs["device"] = "meta"
                REDIRECTED[f"{name}(device=cuda)"] += 1
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
                REDIRECTED[f"{name}(pin_memory=True)"] += 1
            if name in ("cuda", "pin_memory"):
                REDIRECTED[f"Tensor.{name}()"] += 1
                return args[0]
            if name == "to" and any(is_cuda(argument) for argument in args[1:]):
                REDIRECTED["Tensor.to(cuda)"] += 1
                args = tuple("meta" if is_cuda(argument) else argument for argument in args)
            return func(*args, **kwargs)

    return CudaToMeta()


@contextmanager
def _device_runtime_stand_ins() -> Iterator[None]:
    """The CUDA runtime objects constructors make for later (the MoE shared experts' side
    stream and its events: fused_moe/runner/shared_experts.py:78-83, utils/torch_utils.py:853
    aux_stream) are stand-ins that hold nothing, and the current device index is the one
    device's (as probe_engine's device queries answer), so construction takes the device's
    path without a CUDA context."""
    import torch

    class Unallocated:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            REDIRECTED[f"torch.cuda.{type(self).__name__}()"] += 1

    made = {"Stream": torch.cuda.Stream, "Event": torch.cuda.Event}
    for kind in made:
        setattr(torch.cuda, kind, type(kind, (Unallocated,), {}))
    current_device_index = torch.accelerator.current_device_index
    torch.accelerator.current_device_index = lambda: 0
    try:
        yield
    finally:
        for kind, original in made.items():
            setattr(torch.cuda, kind, original)
        torch.accelerator.current_device_index = current_device_index


@contextmanager
def _loaders_construct_only() -> Iterator[None]:
    """Every model loader's ``load_model`` constructs on meta and loads nothing."""
    import torch
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader
    from vllm.utils.torch_utils import set_default_torch_dtype

    def construct(self: Any, vllm_config: Any, model_config: Any, prefix: str = "") -> Any:
        # base_loader.py:63 load_model, without load_weights and process_weights_after_loading
        with set_default_torch_dtype(model_config.dtype), torch.device("meta"), _cuda_to_meta_mode():
            return self.create_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)

    loaded_by = BaseModelLoader.load_model
    BaseModelLoader.load_model = construct
    try:
        yield
    finally:
        BaseModelLoader.load_model = loaded_by


def _served_models(vllm_config: Any) -> tuple[Any, Any, str | None]:
    """The target as the V2 model runner loads it (v1/worker/gpu/model_runner.py:398-403
    get_model_loader(...).load_model), then its speculator's draft as the runner loads it
    (:419-421 speculator.load_model(target): v1/worker/gpu/spec_decode/__init__.py:14
    init_speculator picks the speculator class; speculator.py:225 load_model constructs the
    draft through its loader and marks the draft's attention layers)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader

    with _loaders_construct_only(), _device_runtime_stand_ins(), set_current_vllm_config(vllm_config):
        target = get_model_loader(vllm_config.load_config).load_model(
            vllm_config=vllm_config, model_config=vllm_config.model_config)
        if vllm_config.speculative_config is None:
            return target, None, None
        from vllm.v1.worker.gpu.spec_decode import init_speculator

        # the speculator's buffers (its __init__ allocates them on the device) are made on meta
        with _cuda_to_meta_mode():
            speculator = init_speculator(vllm_config, torch.device("cuda", 0), None)
        speculator.load_model(target)
        return target, speculator.model, _qualname(speculator)


def _quantization(method: Any) -> dict[str, object]:
    """What a layer's quant method chose at construction: the MoE methods' backend and
    experts class (modelopt.py:874 ModelOptNvFp4FusedMoE nvfp4_backend/experts_cls,
    fused_moe/unquantized_fused_moe_method.py:54 unquantized_backend/experts_cls), the
    linear methods' kernel (modelopt.py:2635 create_weights: select_linear_kernel)."""
    found: dict[str, object] = {"method": type(method).__name__}
    backend = getattr(method, "nvfp4_backend", None) or getattr(method, "unquantized_backend", None)
    if backend is not None:
        found["backend"] = str(getattr(backend, "value", backend))
    experts = getattr(method, "experts_cls", None)
    if experts is not None:
        found["experts"] = getattr(experts, "__name__", str(experts))
    kernel = getattr(method, "kernel", None)
    if kernel is not None:
        found["kernel"] = type(kernel).__name__
    return found


def _layer(module: Any) -> dict[str, object] | None:
    # fused_moe/routed_experts.py:73 RoutedExperts: the MoE layer holding the quant method (:165)
    from vllm.model_executor.layers.attention import MLAAttention
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase

    if isinstance(module, AttentionLayerBase):
        backend = module.get_attn_backend()
        return {"kind": "mla_attention" if isinstance(module, MLAAttention) else "attention",
                "class": type(module).__name__, "backend": backend.get_name(),
                "use_sparse": bool(getattr(module, "use_sparse", False)),
                "num_heads": getattr(module, "num_heads", None)}
    if isinstance(module, RoutedExperts):
        return {"kind": "moe", "class": type(module).__name__, **_quantization(module.quant_method),
                "local_experts": getattr(module, "local_num_experts", None)}
    if isinstance(module, LinearBase):
        return {"kind": "linear", "class": type(module).__name__, **_quantization(module.quant_method)}
    return None


def _layer_kinds(model: Any) -> list[dict[str, object]]:
    """Each distinct constructed layer (its kind and what was chosen for it), how many, and
    the first one's name."""
    kinds: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for name, module in model.named_modules():
        described = _layer(module)
        if described is None:
            continue
        entry = kinds.setdefault(tuple(sorted((key, str(value)) for key, value in described.items())),
                                 {**described, "count": 0, "first": name})
        entry["count"] += 1
    return list(kinds.values())


def _bytes(*models: Any) -> int:
    """The parameters and buffers of ``models`` (a tensor the draft shares with the target
    counted once), as the device would hold them."""
    tensors = {id(tensor): tensor for model in models for tensor in (*model.parameters(), *model.buffers())}
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())


def _spec(spec: Any) -> dict[str, object]:
    found: dict[str, object] = {"type": type(spec).__name__}
    for field in ("block_size", "page_size_bytes", "num_kv_heads", "head_size", "dtype", "is_draft"):
        try:
            value = getattr(spec, field)
        except (AttributeError, NotImplementedError):
            continue
        found[field] = value if isinstance(value, (bool, int, float)) or value is None else str(value)
    return found


def _kv_cache(vllm_config: Any) -> dict[str, object]:
    """The V2 runner's KV cache spec from the constructed attention layers
    (v1/worker/gpu/attn_utils.py:138 get_kv_cache_spec, as model_runner.py:611 calls it), then
    the engine core's configuration from it on the launch's KV budget (v1/engine/core.py:
    251-330 _initialize_kv_caches: register_all_kvcache_specs, the KV layout from the layouts
    the constructed backends support (resolve_kv_cache_layout with the worker's
    get_supported_kv_cache_layouts, v1/worker/worker_base.py:107-110),
    get_global_kv_cache_groups, get_kv_cache_configs; with --kv-cache-memory-bytes the budget
    is that value, v1/worker/gpu_worker.py:656)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    with set_current_vllm_config(vllm_config):
        specs = get_kv_cache_spec(vllm_config)
        register_all_kvcache_specs(vllm_config)
        supported = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(vllm_config))]
        layout = resolve_kv_cache_layout(vllm_config, [supported], list(specs.values()))
        groups = get_global_kv_cache_groups(vllm_config, [specs])
        vllm_config.adjust_dcp_kv_cache_interleave_size(groups)
        budget = vllm_config.cache_config.kv_cache_memory_bytes
        config = get_kv_cache_configs(vllm_config, [specs], [budget], groups)[0] if budget else None
    found: dict[str, object] = {
        "layers": len(specs), "layout": str(getattr(layout, "name", layout)),
        "groups": [{"layers": len(group.layer_names), "first": group.layer_names[0] if group.layer_names else None,
                    **_spec(group.kv_cache_spec)} for group in groups]}
    if config is not None:
        found.update(budget_bytes=budget, num_blocks=config.num_blocks,
                     tensor_bytes=sum(tensor.size for tensor in config.kv_cache_tensors))
    return found


def construct_served_models(vllm_config: Any) -> dict[str, object]:
    """The served models of ``vllm_config`` constructed on the meta device (the module's
    docstring says how): what each constructed layer chose, the KV cache and the seconds;
    vLLM's error, with where it was raised, if construction fails."""
    started = time.monotonic()
    record: dict[str, object] = {}
    phase = "tensor parallelism"
    try:
        record["parallel"] = _fake_tensor_parallelism(vllm_config)
        phase = "construction"
        target, draft, speculator = _served_models(vllm_config)
        record["target"] = {"class": type(target).__name__, "layers": _layer_kinds(target)}
        if draft is not None:
            record["draft"] = {"class": type(draft).__name__, "speculator": speculator, "layers": _layer_kinds(draft)}
        record["weights_bytes"] = _bytes(*(model for model in (target, draft) if model is not None))
        phase = "KV cache"
        record["kv_cache"] = _kv_cache(vllm_config)
        record["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - vLLM's refusal is the verdict
        frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if "/vllm/" in frame.filename]
        where = frames[-1] if frames else None
        record.update(ok=False, phase=phase, error=error_text(exc),
                      where=None if where is None else f"{where.filename.split('site-packages/')[-1]}:{where.lineno}")
    record["redirected_to_meta"] = dict(sorted(REDIRECTED.items()))
    record["seconds"] = round(time.monotonic() - started, 3)
    return record


# The constructions started and not yet collected: (the case's engine record, the child, its
# result file). The parent judges the other cases while a child constructs (46 s of the default
# launch's 73 s were spent waiting for the child when it was collected within its own case)
PENDING: list[tuple[dict[str, object], int, str]] = []


def start_construction(vllm_config: Any, record: dict[str, object]) -> None:
    """``construct_served_models`` in a child forked now, on the other core while the caller
    goes on; ``collect_constructions`` puts its record in ``record["meta_model"]``."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"meta-model-{len(PENDING)}.json")
    PENDING.append((record, run_forked(lambda: construct_served_models(vllm_config), path), path))


def collect_constructions() -> None:
    """Every started construction's record, in its case's engine record."""
    while PENDING:
        record, pid, path = PENDING.pop(0)
        produced = forked_result("constructing the served models on the meta device", pid, path, TIMEOUT)
        value = produced.get("value")
        record["meta_model"] = dict(value) if isinstance(value, dict) else {"ok": False, "error": produced.get("error")}
