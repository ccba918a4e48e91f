"""The launches the runtime check has the image's code judge: every setting combination
that matters for a profile, as the launcher would emit them (serve args + container env).

Each profile × DCP 1/2/4 × SparkCache on/off, a headless rank, and each non-default value
of the catalog's enums and switches that changes what is emitted. Site values are fixed
documentation addresses and paths (nothing is read: the spec alone is computed). A
combination the launcher's own rules refuse is returned with its reason instead of a spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..core.errors import InputError
from .contract import LaunchContract
from .envfile import EnvAssignment
from .plan import plan_from_assignments

SITE = {
    "MASTER_ADDRESS": "192.0.2.1",
    "TARGET_MODEL_PATH": "/srv/sparkflake-check/models/target",
    "CACHE_ROOT": "/srv/sparkflake-check/cache",
    "SOCKET_IFNAME": "enp1s0f0np0",
    "NCCL_IB_HCA": "rocep1s0f0",
}
DRAFT_PATH = "/srv/sparkflake-check/models/draft"
# Non-default values whose spec differs from the default's (each on DCP1, rank 0)
VARIANTS: tuple[Mapping[str, str], ...] = (
    {"LOAD_FORMAT": "safetensors"},
    {"CUDA_GRAPH_MODE": "PIECEWISE"},
    {"CUDA_GRAPH_MODE": "FULL"},
    {"CUDA_GRAPH_MODE": "FULL_DECODE_ONLY"},
    {"CUDA_GRAPH_MODE": "NONE"},
    {"KV_CACHE_DTYPE": "fp8_e4m3"},
    {"KV_CACHE_DTYPE": "bfloat16", "SPARKCACHE_ENABLED": "0"},
    {"SPARKCACHE_ACCESS_MODE": "read-only"},
    {"SPARKCACHE_ACCESS_MODE": "write-only"},
    {"ALLREDUCE_SYMM_MEM": "1", "FLASHINFER_ALLREDUCE": "1", "ALLREDUCE_RMS_FUSION": "1"},
    {"LANGUAGE_MODEL_ONLY": "0"},
    {"NCCL_IB_GID_INDEX": "3", "NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "8"},
    {"ATTENTION_BACKEND": "TRITON_MLA", "MOE_BACKEND": "triton", "LINEAR_BACKEND": "cutlass"},
    # TCP instead of RDMA, and the operator's NCCL build preloaded (LD_PRELOAD, VLLM_NCCL_SO_PATH)
    {"NCCL_NET": "Socket"},
    {"NCCL_LIBRARY": "/srv/sparkflake-check/nccl/libnccl.so.2"},
)


@dataclass(frozen=True)
class LaunchCase:
    name: str
    serve_args: tuple[str, ...] | None  # None: the launcher refuses this combination
    env: Mapping[str, str]
    refusal: str | None = None
    default_launch: bool = False  # the profile's own DCP and SparkCache settings, rank 0


def _assignments(values: Mapping[str, str]) -> list[EnvAssignment]:
    return [EnvAssignment(key, value, line) for line, (key, value) in enumerate(values.items(), start=1)]


def conformance_case(name: str, contract: LaunchContract, rank: int, values: Mapping[str, str]) -> LaunchCase:
    settings = {"NODE_ADDRESS": f"192.0.2.{rank + 1}", **SITE, **values}
    if contract.runtime_defaults.get("SPECULATIVE_METHOD", "dflash") == "dflash":
        settings["DRAFT_MODEL_PATH"] = DRAFT_PATH
    try:
        plan = plan_from_assignments(rank=rank, assignments=_assignments(settings), source=f"case {name}",
                                     contract=contract, engine=None, run_checks=False)
    except InputError as exc:
        return LaunchCase(name, None, {}, str(exc))
    return LaunchCase(name, plan.spec.serve_args, dict(plan.spec.env))


def conformance_cases(contract: LaunchContract) -> Iterator[LaunchCase]:
    """Every spec the launcher's own rules allow. The image's capabilities are what the
    check finds out, so they are not applied here (the launcher applies them afterwards)."""
    contract = dataclasses.replace(contract, capabilities=None)
    profile = contract.profile
    defaults = contract.runtime_defaults
    for dcp in (1, 2, 4):
        for sparkcache in (1, 0):
            name = f"{profile}-dcp{dcp}-sparkcache-{'on' if sparkcache else 'off'}"
            values = {"DCP": str(dcp), "SPARKCACHE_ENABLED": str(sparkcache)}
            case = conformance_case(name, contract, 0, values)
            yield dataclasses.replace(case, default_launch=all(str(defaults.get(key)) == value
                                                               for key, value in values.items()))
    yield conformance_case(f"{profile}-dcp1-rank1", contract, 1, {})
    for variant in VARIANTS:
        suffix = "-".join(f"{key.lower()}={value}" for key, value in variant.items())
        yield conformance_case(f"{profile}-{suffix}", contract, 0, variant)
