"""The container spec of one rank and the exact engine argv that starts it.

The image's entrypoint is ``vllm serve``; the launcher supplies only serving arguments.
Checkpoints are mounted read-only; the rank's SparkCache root and JIT root (both named by
the runtime identity's namespace) are the only writable mounts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..compose.python_env import DEFAULT_PREFIX
from ..core.canonical_json import canonical_json_bytes
from .contract import LaunchContract
from .resolution import Resolution

CONTAINER_TARGET = "/models/target"
# Where an operator-supplied NCCL build is mounted (read-only) and preloaded from
CONTAINER_NCCL_LIBRARY = "/opt/sparkflake/operator/nccl/libnccl.so.2"
# What NCCL over RDMA needs of the container, as the seeds' R8 launcher gives it
# (SparkRing runtime/glm53-flash-jj-r8-gb10/launch-rank.sh: --device /dev/infiniband
# --cap-add IPC_LOCK --ulimit memlock=-1:-1): the verbs devices, and pinning (registering)
# buffers with the HCA without a locked-memory limit.
RDMA_DEVICES = ("/dev/infiniband",)
RDMA_CAPABILITIES = ("IPC_LOCK",)
UNLIMITED_MEMLOCK = "memlock=-1:-1"
# Every JIT and compile cache of the image's components, under the rank's JIT root (the
# identity's namespace under CACHE_ROOT): variable, directory under the root, who reads it.
JIT_CACHE_VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("VLLM_CACHE_ROOT", "vllm", "vllm/envs.py:714 (vLLM 0.33.0)"),
    ("B12X_COMPILE_CACHE_DIR", "b12x", "b12x/_lib/compiler.py:684 _cute_compile_cache_dir (b12x 1.5.1)"),
    # b12x's RoCE proxy build (b12x/comm/roce/_proxy.py:47) and others default under it
    ("XDG_CACHE_HOME", "xdg", "b12x/comm/roce/_proxy.py:47, b12x/_lib/compiler.py:687 (b12x 1.5.1)"),
    ("CUTE_DSL_CACHE_DIR", "cute-dsl",
     "nvidia_cutlass_dsl/dsl_packages/cutlass/base_dsl/cache_helpers.py:70 (nvidia-cutlass-dsl 4.8.0)"),
    ("TRITON_CACHE_DIR", "triton", "triton/knobs.py:348"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor", "torch/_inductor/runtime/cache_dir_utils.py:15"),
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer", "flashinfer/jit/env.py:67"),
    ("CUDA_CACHE_PATH", "cuda", "the CUDA driver (CUDA C Programming Guide, CUDA Environment Variables)"),
)
CONTAINER_DRAFT = "/models/draft"
SPARKCACHE_CONNECTOR = "SparkContextCacheConnector"
SPARKCACHE_CONNECTOR_MODULE = "sparkcache.spark_context_cache_connector"
LABEL_PREFIX = "org.sparkflake."


@dataclass(frozen=True)
class Mount:
    """A bind mount, written as podman's ``--volume SOURCE:TARGET:ro|rw`` takes it."""

    source: str
    target: str
    read_only: bool

    def flag(self) -> str:
        return f"{self.source}:{self.target}:{'ro' if self.read_only else 'rw'}"


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str
    mounts: tuple[Mount, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    gpus: str  # all | none
    ipc: str
    devices: tuple[str, ...]  # host device paths passed through
    cap_add: tuple[str, ...]
    shm_size: int | None
    ulimits: tuple[str, ...]
    serve_args: tuple[str, ...]  # after the image: arguments of the entrypoint `vllm serve`

    def as_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "network": "host",
            "ipc": self.ipc,
            "gpus": self.gpus,
            "devices": list(self.devices),
            "cap_add": list(self.cap_add),
            "shm_size": self.shm_size,
            "ulimits": list(self.ulimits),
            "mounts": [
                {"source": m.source, "target": m.target, "read_only": m.read_only} for m in self.mounts
            ],
            "env": dict(sorted(self.env.items())),
            "labels": dict(sorted(self.labels.items())),
            "entrypoint": ["vllm", "serve"],
            "serve_args": list(self.serve_args),
        }


def _json(document: Any) -> str:
    return canonical_json_bytes(document, ascii_only=True).decode("ascii")


def speculative_config(values: Mapping[str, Any]) -> dict[str, Any] | None:
    method = values["SPECULATIVE_METHOD"]
    if method == "none":
        return None
    # SPECULATIVE_ADAPTIVE has no SpeculativeConfig field in vLLM 0.33.0 (its fields:
    # runtime-capabilities); resolve refuses it, so nothing is emitted for it.
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": values["SPECULATIVE_TOKENS"],
                              "draft_sample_method": values["DRAFT_SAMPLE_METHOD"]}
    if method == "dflash":
        config["model"] = CONTAINER_DRAFT
        config["draft_tensor_parallel_size"] = values["DRAFT_TP"]
        # a LoadConfig (vllm/config/speculative.py:558 draft_load_config; vllm/config/load.py
        # load_format), else the draft inherits the target's --load-format
        config["draft_load_config"] = {"load_format": values["DRAFT_LOAD_FORMAT"]}
        # The BF16 DFlash draft keeps a BF16 KV cache: without this it inherits the target's
        # --kv-cache-dtype (vllm/config/speculative.py:448 kv_cache_dtype), and on sm_12x no
        # non-causal backend vLLM 0.33.0 can load here takes FP8 KV (FlashAttention 2 has no
        # FP8 KV; FlashInfer and Triton need a compiler the image lacks: runtime check).
        # vLLM does the same for non-MTP drafts of GLM-5.3 on SM100 (models/config.py:138).
        config["kv_cache_dtype"] = "auto"
    elif method == "mtp" and values["MOE_BACKEND"] not in UNQUANTIZED_MOE_BACKENDS:
        # The MTP head's MoE is unquantized (the checkpoint leaves it in BF16) and inherits
        # --moe-backend unless the speculative config names its own (speculative.py:439);
        # vLLM 0.33.0's unquantized MoE refuses b12x (fused_moe/oracle/unquantized.py:180)
        config["moe_backend"] = "triton"
    return config


# vllm/model_executor/layers/fused_moe/oracle/unquantized.py:180 map_unquantized_backend
UNQUANTIZED_MOE_BACKENDS = ("triton", "batched_triton", "flashinfer_trtllm", "flashinfer_cutlass", "aiter")


def kv_transfer_config(
    values: Mapping[str, Any], target_checkpoint: str, draft_checkpoint: str | None, cache_root: str
) -> dict[str, Any]:
    """SparkCache's KV-connector configuration: only keys ``parse_connector_config`` reads
    (sparkcache/spark_context_cache_config.py:194, every key through
    ``get_from_extra_config``); the runtime check fails on any other."""
    mode = values["SPARKCACHE_ACCESS_MODE"]
    extra: dict[str, Any] = {
        "spark_cache_root": cache_root,
        "spark_cache_model_profile": values["SPARKCACHE_MODEL_PROFILE"],
        "spark_cache_target_checkpoint_sha256": target_checkpoint,
        "spark_cache_draft_policy": values["SPARKCACHE_DRAFT_KV_POLICY"],
        "spark_cache_max_bytes": values["SPARKCACHE_MAX_BYTES"],
        "spark_cache_ttl_seconds": values["SPARKCACHE_TTL_SECONDS"],
        "spark_cache_min_span_tokens": values["SPARKCACHE_MIN_SPAN_TOKENS"],
        "spark_cache_max_span_tokens": values["SPARKCACHE_MAX_SPAN_TOKENS"],
        "spark_cache_store": "1" if mode in ("read-write", "write-only") else "0",
        "spark_cache_restore": "1" if mode in ("read-write", "read-only") else "0",
    }
    if values["SPARKCACHE_DRAFT_KV_POLICY"] == "separate" and draft_checkpoint:
        extra["spark_cache_draft_checkpoint_sha256"] = draft_checkpoint
    return {
        "kv_connector": SPARKCACHE_CONNECTOR,
        "kv_connector_module_path": SPARKCACHE_CONNECTOR_MODULE,
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": extra,
    }


def serve_args(
    resolution: Resolution,
    contract: LaunchContract,
    target_checkpoint: str,
    draft_checkpoint: str | None,
) -> tuple[str, ...]:
    v = resolution.values
    rank = resolution.rank
    args: list[str] = [
        CONTAINER_TARGET,
        "--served-model-name", v["SERVED_MODEL_NAME"],
        "--host", "0.0.0.0",
        "--port", str(v["API_PORT"]),
        "--tensor-parallel-size", str(v["TP"]),
        "--pipeline-parallel-size", str(v["PP"]),
        "--decode-context-parallel-size", str(v["DCP"]),
        "--cp-kv-cache-interleave-size", str(v["CP_KV_INTERLEAVE"]),
        "--distributed-executor-backend", "mp",
        "--nnodes", str(v["NODE_COUNT"]),
        "--node-rank", str(rank),
        "--master-addr", v["MASTER_ADDRESS"],
        "--master-port", str(v["MASTER_PORT"]),
    ]
    if rank != 0:
        args.append("--headless")
    args += [
        "--max-model-len", str(v["MAX_MODEL_LEN"]),
        "--max-num-batched-tokens", str(v["MAX_NUM_BATCHED_TOKENS"]),
        "--max-num-seqs", str(v["MAX_NUM_SEQS"]),
        "--gpu-memory-utilization", repr(v["GPU_MEMORY_UTILIZATION"]),
        "--kv-cache-dtype", v["KV_CACHE_DTYPE"],
        "--block-size", str(v["KV_BLOCK_SIZE"]),
        "--kv-cache-memory-bytes", str(v["KV_CACHE_GIB"] << 30),
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--load-format", v["LOAD_FORMAT"],
        "--all2all-backend", v["ALL2ALL_BACKEND"],
    ]
    if v["ATTENTION_BACKEND"]:
        args += ["--attention-backend", v["ATTENTION_BACKEND"]]
    if v["MOE_BACKEND"]:
        args += ["--moe-backend", v["MOE_BACKEND"]]
    if v["LINEAR_BACKEND"]:
        args += ["--linear-backend", v["LINEAR_BACKEND"]]
    if v["LANGUAGE_MODEL_ONLY"]:
        args.append("--language-model-only")
    # vllm/entrypoints/common/cli_args.py:123,129 and vllm/engine/arg_utils.py:1147 (0.33.0)
    if v["TOOL_CALL_PARSER"]:
        args += ["--tool-call-parser", v["TOOL_CALL_PARSER"]]
    if v["AUTO_TOOL_CHOICE"]:
        args.append("--enable-auto-tool-choice")
    if v["REASONING_PARSER"]:
        args += ["--reasoning-parser", v["REASONING_PARSER"]]
    compilation: dict[str, Any] = {
        "cudagraph_mode": v["CUDA_GRAPH_MODE"],
        "max_cudagraph_capture_size": v["MAX_CUDA_GRAPH_CAPTURE_SIZE"],
        "pass_config": {"fuse_allreduce_rms": bool(v["ALLREDUCE_RMS_FUSION"])},
    }
    args += ["--compilation-config", _json(compilation)]
    speculative = speculative_config(v)
    if speculative is not None:
        args += ["--speculative-config", _json(speculative)]
    if v["SPARKCACHE_ENABLED"]:
        args += ["--kv-transfer-config", _json(kv_transfer_config(v, target_checkpoint, draft_checkpoint, contract.container_cache_root))]
    return tuple(args)


# the CUDA toolkit the image's wheels carry (nvidia-cuda-nvcc, -cccl, -crt, -runtime under
# site-packages/nvidia/cu13 of the image's environment, compose/python_env.py DEFAULT_PREFIX)
IMAGE_CUDA_HOME = f"{DEFAULT_PREFIX}/lib/python3.11/site-packages/nvidia/cu13"
IMAGE_CXX = "g++"  # the image's host C++ compiler (Debian's g++ in the glm53 seed)


def container_env(resolution: Resolution, jit_root: str) -> dict[str, str]:
    v = resolution.values
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": str(v["OMP_NUM_THREADS"]),
        "VLLM_ALLREDUCE_USE_SYMM_MEM": "1" if v["ALLREDUCE_SYMM_MEM"] else "0",
        "VLLM_ALLREDUCE_USE_FLASHINFER": "1" if v["FLASHINFER_ALLREDUCE"] else "0",
        "VLLM_HOST_IP": v["NODE_ADDRESS"],
        **{variable: f"{jit_root}/{directory}" for variable, directory, _ in JIT_CACHE_VARIABLES},
        # FlashInfer's JIT finds nvcc at $CUDA_HOME/bin/nvcc (flashinfer/jit/cpp_ext.py:48
        # get_cuda_path: CUDA_HOME, then CUDA_PATH, then `which nvcc`) and vLLM's
        # has_flashinfer() looks there too (vllm/utils/flashinfer.py:61); the image's
        # toolkit is the nvidia-cuda-nvcc wheel's, off PATH. The runtime check verifies
        # that nvcc is there (runtime-capabilities: kernel_toolchains.flashinfer).
        "CUDA_HOME": IMAGE_CUDA_HOME,
        # FlashInfer's JIT compiles its host code with $CXX, default "c++" (flashinfer/jit/
        # cpp_ext.py:288; torch.utils.cpp_extension.get_cxx_compiler likewise, :486), which the
        # image lacks: Debian's maintainer scripts (the c++ alternative) do not run in the
        # OS base, so only /usr/bin/g++ exists. CC stays unset: nvcc then finds gcc on PATH
        # itself and Triton's launcher build too (triton/runtime/build.py:24).
        "CXX": IMAGE_CXX,
    }
    env.update(fabric_env(v))
    return env


def fabric_env(v: Mapping[str, Any]) -> dict[str, str]:
    """NCCL's and Gloo's settings (every name a string of NCCL 2.30.7's libnccl.so.2)."""
    env = {"NCCL_NET": v["NCCL_NET"], "NCCL_ALGO": v["NCCL_ALGO"], "NCCL_CROSS_NIC": str(v["NCCL_CROSS_NIC"])}
    if v["SOCKET_IFNAME"]:
        env["NCCL_SOCKET_IFNAME"] = v["SOCKET_IFNAME"]
        env["GLOO_SOCKET_IFNAME"] = v["SOCKET_IFNAME"]
    if v["NCCL_NET"] == "IB":
        # as the seeds' R8 launcher: IB on, no external net plugin, one NIC per ring side
        # (no merged NICs), routing by subnet across the ring's point-to-point links
        env.update({
            "NCCL_IB_DISABLE": "0",
            "NCCL_NET_PLUGIN": "none",
            "NCCL_IB_HCA": v["NCCL_IB_HCA"],
            "NCCL_IB_MERGE_NICS": "0",
            "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
        })
    for key in ("NCCL_IB_GID_INDEX", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
        if v[key] is not None:
            env[key] = str(v[key])
    if v["NCCL_LIBRARY"]:
        # preloaded, as the seeds do, so that torch's and vLLM's NCCL calls all bind to it
        env["LD_PRELOAD"] = CONTAINER_NCCL_LIBRARY
        env["VLLM_NCCL_SO_PATH"] = CONTAINER_NCCL_LIBRARY
    return env


def build_spec(
    *,
    resolution: Resolution,
    contract: LaunchContract,
    image_id: str,
    target_checkpoint: str,
    draft_checkpoint: str | None,
    sparkcache_dir: str,
    jit_dir: str,
    labels: Mapping[str, str],
) -> ContainerSpec:
    v = resolution.values
    mounts = [Mount(v["TARGET_MODEL_PATH"], CONTAINER_TARGET, True)]
    if v["DRAFT_MODEL_PATH"]:
        mounts.append(Mount(v["DRAFT_MODEL_PATH"], CONTAINER_DRAFT, True))
    if v["SPARKCACHE_ENABLED"]:
        mounts.append(Mount(sparkcache_dir, contract.container_cache_root, False))
    mounts.append(Mount(jit_dir, contract.container_jit_root, False))
    if v["NCCL_LIBRARY"]:
        mounts.append(Mount(v["NCCL_LIBRARY"], CONTAINER_NCCL_LIBRARY, True))
    rdma = v["NCCL_NET"] == "IB"
    ulimits = tuple(v["CONTAINER_ULIMITS"].split(","))
    if rdma:
        ulimits = (*(item for item in ulimits if not item.startswith("memlock=")), UNLIMITED_MEMLOCK)
    return ContainerSpec(
        name=f"{contract.container_name}-rank{resolution.rank}",
        image=image_id,
        mounts=tuple(mounts),
        env=container_env(resolution, contract.container_jit_root),
        labels=dict(labels),
        gpus=v["GPU_DEVICES"],
        ipc=v["IPC_MODE"],
        devices=RDMA_DEVICES if rdma else (),
        cap_add=RDMA_CAPABILITIES if rdma else (),
        shm_size=v["SHM_SIZE"],
        ulimits=ulimits,
        serve_args=serve_args(resolution, contract, target_checkpoint, draft_checkpoint),
    )


def engine_argv(spec: ContainerSpec, engine_name: str, engine_command: list[str], *, detach: bool = False) -> list[str]:
    """``podman run`` / ``docker run`` argv for ``spec`` (``engine_command``: binary + globals)."""
    argv = [*engine_command, "run", "--name", spec.name, "--network", "host", "--ipc", spec.ipc]
    if detach:
        argv.append("--detach")
    if spec.gpus == "all":
        argv += ["--device", "nvidia.com/gpu=all"] if engine_name == "podman" else ["--gpus", "all"]
    for device in spec.devices:
        argv += ["--device", device]
    for capability in spec.cap_add:
        argv += ["--cap-add", capability]
    if spec.shm_size is not None:
        argv += ["--shm-size", f"{spec.shm_size}b" if engine_name == "podman" else str(spec.shm_size)]
    for ulimit in spec.ulimits:
        argv += ["--ulimit", ulimit]
    for mount in spec.mounts:
        argv += ["--volume", mount.flag()]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    for key, value in sorted(spec.env.items()):
        argv += ["--env", f"{key}={value}"]
    argv.append(spec.image)
    argv += list(spec.serve_args)
    return argv
