"""Typed resolution: env file + profile defaults + catalog defaults + auto rules.

Precedence: a value in the env file, else the profile's ``[runtime]`` default, else the
catalog default; then the auto rules fill every ``auto``. Each resolved value records
where it came from (``--explain``). Compatibility and coupling rules refuse with the
reason and the env-file line of the value that caused the conflict.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..core.errors import InputError
from ..profile.settings_catalog import (
    AUTO,
    CATALOG,
    CATALOG_LIST,
    DCP_FULL_CKV_GATHER,
    DCP_INTERLEAVE,
    DCP_KV_GIB,
    GiB,
    parse_value,
    render_value,
    unknown_key_message,
)
from .contract import LaunchContract
from .envfile import EnvAssignment

PRIVATE_IPC_SHM_BYTES = 32 * GiB


@dataclass(frozen=True)
class Resolution:
    rank: int
    values: Mapping[str, Any]  # catalog key -> typed value (None: omitted)
    origins: Mapping[str, str]  # catalog key -> "default" | "profile" | "env:FILE:LINE" | "auto: ..."
    source: str  # the env file

    def as_record(self) -> dict[str, Any]:
        return dict(sorted(self.values.items()))


class _Resolver:
    def __init__(
        self,
        assignments: Sequence[EnvAssignment],
        contract: LaunchContract,
        rank: int,
        source: str,
    ) -> None:
        self.contract = contract
        self.rank = rank
        self.source = source
        self.lines: dict[str, int] = {}
        self.values: dict[str, Any] = {}
        self.origins: dict[str, str] = {}
        self.explicit: dict[str, Any] = {}
        for entry in assignments:
            setting = CATALOG.get(entry.key)
            if setting is None:
                raise InputError(f"{source}:{entry.line}: {unknown_key_message(entry.key)}")
            try:
                self.explicit[entry.key] = parse_value(setting, entry.value)
            except ValueError as exc:
                raise InputError(f"{source}:{entry.line}: {exc}") from None
            self.lines[entry.key] = entry.line

    def where(self, *keys: str) -> str:
        lines = sorted(self.lines[key] for key in keys if key in self.lines)
        if lines:
            return f"{self.source}:{lines[0]}"
        return f"{self.source} (profile {self.contract.profile} defaults)"

    def refuse(self, message: str, *keys: str) -> InputError:
        return InputError(f"{self.where(*keys)}: {message}")

    def base_values(self) -> None:
        missing = []
        for setting in CATALOG_LIST:
            key = setting.key
            if key in self.explicit:
                self.values[key] = self.explicit[key]
                self.origins[key] = f"env:{self.source}:{self.lines[key]}"
            elif key in self.contract.runtime_defaults:
                try:
                    self.values[key] = parse_value(setting, self.contract.runtime_defaults[key])
                except ValueError as exc:
                    raise InputError(f"profile {self.contract.profile}: runtime.{key}: {exc}") from None
                self.origins[key] = f"profile:{self.contract.profile}"
            elif setting.default is not None:
                self.values[key] = parse_value(setting, setting.default)
                self.origins[key] = "default"
            else:
                missing.append(key)
        for key, refused in self.contract.refused.items():
            value = self.values.get(key)
            if value in refused:
                raise self.refuse(f"{key}={render_value(value)} is refused by profile {self.contract.profile}: "
                                  f"{refused[value]}", key)
        if missing:
            raise InputError(
                f"{self.source}: missing required site value(s): {', '.join(missing)} "
                f"(see profiles/{self.contract.profile}/runtime.env.example)"
            )

    def auto(self, key: str, value: Any, rule: str) -> None:
        self.values[key] = value
        self.origins[key] = f"auto: {rule}"

    def topology(self) -> None:
        v = self.values
        tp, pp, dcp, nnodes = v["TP"], v["PP"], v["DCP"], v["NODE_COUNT"]
        if tp % dcp:
            raise self.refuse(
                f"TP={tp} is not divisible by DCP={dcp}", "TP", "DCP"
            )
        if tp * pp != nnodes:
            raise self.refuse(
                f"TP×PP={tp * pp} must equal NODE_COUNT={nnodes} (one GB10 GPU per host)",
                "TP", "PP", "NODE_COUNT",
            )
        if not 0 <= self.rank < nnodes:
            raise InputError(f"rank {self.rank} is outside 0..{nnodes - 1} (NODE_COUNT={nnodes})")
        interleave = v["CP_KV_INTERLEAVE"]
        if interleave == AUTO:
            self.auto("CP_KV_INTERLEAVE", DCP_INTERLEAVE[dcp], f"DCP{dcp} -> interleave {DCP_INTERLEAVE[dcp]}")
        elif interleave != DCP_INTERLEAVE[dcp]:
            reason = (
                "DCP1 keeps whole-context KV on each rank; interleaving is only defined for DCP>1"
                if dcp == 1
                else f"DCP{dcp} shards KV in 4-token groups for B12X full-CKV gather; "
                f"interleave {interleave} would place tokens where the gather does not read them"
            )
            raise self.refuse(
                f"CP_KV_INTERLEAVE={interleave} is incompatible with DCP={dcp}: {reason}",
                "CP_KV_INTERLEAVE",
            )
        gather = v["FULL_CKV_GATHER"]
        if gather == AUTO:
            on = DCP_FULL_CKV_GATHER[dcp]
            self.auto("FULL_CKV_GATHER", on, f"DCP{dcp} -> full-CKV gather {'on' if on else 'off'}")
        elif gather != DCP_FULL_CKV_GATHER[dcp]:
            reason = (
                "full-CKV gather exists only to reassemble KV sharded across DCP ranks"
                if dcp == 1
                else f"DCP{dcp} attention over sharded KV needs the B12X full-CKV gather"
            )
            raise self.refuse(
                f"FULL_CKV_GATHER={int(gather)} is incompatible with DCP={dcp}: {reason}",
                "FULL_CKV_GATHER",
            )
        if v["KV_BLOCK_SIZE"] % v["CP_KV_INTERLEAVE"]:
            raise self.refuse(
                f"KV_BLOCK_SIZE={v['KV_BLOCK_SIZE']} is not a multiple of CP_KV_INTERLEAVE="
                f"{v['CP_KV_INTERLEAVE']}",
                "KV_BLOCK_SIZE",
            )

    def capacity(self) -> None:
        v = self.values
        dcp = v["DCP"]
        if v["KV_CACHE_GIB"] == AUTO:
            self.auto("KV_CACHE_GIB", DCP_KV_GIB[dcp], f"DCP{dcp} -> {DCP_KV_GIB[dcp]} GiB FP8 KV per rank")
        kv_bytes = v["KV_CACHE_GIB"] * GiB
        max_len = v["MAX_MODEL_LEN"]
        record = v["KV_RECORD_BYTES_PER_TOKEN"]
        # Each DCP rank holds 1/DCP of a request's tokens, in whole blocks.
        tokens_per_rank = math.ceil(max_len / dcp)
        blocks = math.ceil(tokens_per_rank / v["KV_BLOCK_SIZE"])
        needed = blocks * v["KV_BLOCK_SIZE"] * record
        if needed > kv_bytes:
            raise self.refuse(
                f"KV_CACHE_GIB={v['KV_CACHE_GIB']} ({kv_bytes} bytes) cannot hold one "
                f"MAX_MODEL_LEN={max_len} request: {tokens_per_rank} tokens per rank at "
                f"DCP{dcp} × KV_RECORD_BYTES_PER_TOKEN={record} = {needed} bytes",
                "KV_CACHE_GIB", "MAX_MODEL_LEN", "KV_RECORD_BYTES_PER_TOKEN",
            )
        batched = v["MAX_NUM_BATCHED_TOKENS"]
        if batched > max_len:
            raise self.refuse(
                f"MAX_NUM_BATCHED_TOKENS={batched} exceeds MAX_MODEL_LEN={max_len}",
                "MAX_NUM_BATCHED_TOKENS", "MAX_MODEL_LEN",
            )
        per_step = v["MAX_NUM_SEQS"] * (1 + (v["SPECULATIVE_TOKENS"] if v["SPECULATIVE_METHOD"] != "none" else 0))
        if batched < per_step:
            raise self.refuse(
                f"MAX_NUM_BATCHED_TOKENS={batched} is below one decode step of MAX_NUM_SEQS="
                f"{v['MAX_NUM_SEQS']} sequences with their speculative tokens ({per_step})",
                "MAX_NUM_BATCHED_TOKENS", "MAX_NUM_SEQS",
            )

    def speculation(self) -> None:
        v = self.values
        method = v["SPECULATIVE_METHOD"]
        if method == "dflash":
            if not v["DRAFT_MODEL_PATH"]:
                raise self.refuse(
                    "SPECULATIVE_METHOD=dflash needs DRAFT_MODEL_PATH (the external draft)",
                    "SPECULATIVE_METHOD",
                )
            if v["DRAFT_TP"] == AUTO:
                self.auto("DRAFT_TP", v["TP"], "draft TP = TP")
            elif v["DRAFT_TP"] not in (1, v["TP"]):
                raise self.refuse(
                    f"DRAFT_TP={v['DRAFT_TP']} must be 1 or "
                    f"TP={v['TP']}",
                    "DRAFT_TP",
                )
        else:
            if v["DRAFT_MODEL_PATH"]:
                raise self.refuse(
                    f"DRAFT_MODEL_PATH is set but SPECULATIVE_METHOD={method} uses no external "
                    "draft; remove it",
                    "DRAFT_MODEL_PATH",
                )
            if self.explicit.get("DRAFT_TP", AUTO) != AUTO:
                raise self.refuse(
                    f"DRAFT_TP applies only to an external draft "
                    f"(SPECULATIVE_METHOD={method})",
                    "DRAFT_TP",
                )
            self.auto("DRAFT_TP", None, f"no external draft ({method})")
        if v["SPECULATIVE_ADAPTIVE"] and method != "mtp":
            raise self.refuse(
                f"SPECULATIVE_ADAPTIVE=1 needs the embedded MTP head (SPECULATIVE_METHOD=mtp), "
                f"not {method}",
                "SPECULATIVE_ADAPTIVE", "SPECULATIVE_METHOD",
            )
        if method == "none" and "SPECULATIVE_TOKENS" in self.explicit:
            raise self.refuse(
                "SPECULATIVE_TOKENS is set but SPECULATIVE_METHOD=none",
                "SPECULATIVE_TOKENS",
            )

    def sparkcache(self) -> None:
        v = self.values
        policy = v["SPARKCACHE_DRAFT_KV_POLICY"]
        external = v["SPECULATIVE_METHOD"] == "dflash"
        if policy == AUTO:
            chosen = "separate" if external else "colocated_target"
            self.auto(
                "SPARKCACHE_DRAFT_KV_POLICY",
                chosen,
                "external draft -> separate" if external else "no external draft -> colocated_target",
            )
        elif policy == "colocated_target" and external:
            raise self.refuse(
                "SPARKCACHE_DRAFT_KV_POLICY=colocated_target stores draft KV as target state, "
                "but the DFlash draft is a separate checkpoint with its own identity",
                "SPARKCACHE_DRAFT_KV_POLICY",
            )
        if v["SPARKCACHE_MAX_SPAN_TOKENS"] == AUTO:
            self.auto("SPARKCACHE_MAX_SPAN_TOKENS", v["MAX_MODEL_LEN"], "span = MAX_MODEL_LEN")
        if v["SPARKCACHE_MAX_SPAN_TOKENS"] > v["MAX_MODEL_LEN"]:
            raise self.refuse(
                f"SPARKCACHE_MAX_SPAN_TOKENS={v['SPARKCACHE_MAX_SPAN_TOKENS']} exceeds "
                f"MAX_MODEL_LEN={v['MAX_MODEL_LEN']}",
                "SPARKCACHE_MAX_SPAN_TOKENS",
            )
        if v["SPARKCACHE_MIN_SPAN_TOKENS"] > v["SPARKCACHE_MAX_SPAN_TOKENS"]:
            raise self.refuse(
                f"SPARKCACHE_MIN_SPAN_TOKENS={v['SPARKCACHE_MIN_SPAN_TOKENS']} exceeds "
                f"SPARKCACHE_MAX_SPAN_TOKENS={v['SPARKCACHE_MAX_SPAN_TOKENS']}",
                "SPARKCACHE_MIN_SPAN_TOKENS", "SPARKCACHE_MAX_SPAN_TOKENS",
            )
        if not v["SPARKCACHE_ENABLED"]:
            return
        if v["PP"] != 1:
            raise self.refuse(
                "SparkCache identities have no pipeline-stage field; PP must be 1 with "
                "SPARKCACHE_ENABLED=1",
                "PP", "SPARKCACHE_ENABLED",
            )
        if v["KV_CACHE_DTYPE"] not in ("fp8", "fp8_e4m3"):
            raise self.refuse(
                f"SparkCache profile {v['SPARKCACHE_MODEL_PROFILE']} stores FP8 KV records; "
                f"KV_CACHE_DTYPE={v['KV_CACHE_DTYPE']} needs SPARKCACHE_ENABLED=0",
                "KV_CACHE_DTYPE",
            )
        from .identity import sparkcache_deployment_problem

        problem = sparkcache_deployment_problem(
            v["SPARKCACHE_MODEL_PROFILE"], v["DCP"], v["KV_BLOCK_SIZE"], v["SPARKCACHE_MIN_SPAN_TOKENS"]
        )
        if problem:
            raise self.refuse(
                f"SparkCache refuses this deployment: {problem}",
                "KV_BLOCK_SIZE", "SPARKCACHE_MIN_SPAN_TOKENS", "DCP",
            )

    def site(self) -> None:
        v = self.values
        if self.rank == 0 and v["NODE_ADDRESS"] != v["MASTER_ADDRESS"]:
            raise self.refuse(
                f"rank 0 is the master: NODE_ADDRESS={v['NODE_ADDRESS']} must equal "
                f"MASTER_ADDRESS={v['MASTER_ADDRESS']}",
                "NODE_ADDRESS", "MASTER_ADDRESS",
            )
        if self.rank != 0 and v["NODE_ADDRESS"] == v["MASTER_ADDRESS"]:
            raise self.refuse(
                f"rank {self.rank} has rank 0's address {v['MASTER_ADDRESS']}; NODE_ADDRESS "
                "must be this rank's own address",
                "NODE_ADDRESS",
            )
        if self.rank != 0:
            for key in ("MASTER_ADDRESS", "NODE_ADDRESS"):
                if ipaddress.ip_address(v[key]).is_loopback:
                    raise self.refuse(
                        f"{key}={v[key]} is a loopback address: rank {self.rank} of {v['NODE_COUNT']} runs on "
                        "another host than rank 0, and loopback never leaves a host",
                        key,
                    )
        if v["API_PORT"] == v["MASTER_PORT"]:
            raise self.refuse("API_PORT and MASTER_PORT must differ", "API_PORT", "MASTER_PORT")
        cache_root = v["CACHE_ROOT"]
        for key in ("TARGET_MODEL_PATH", "DRAFT_MODEL_PATH"):
            model = v[key]
            if model and _overlaps(model, cache_root):
                raise self.refuse(
                    f"CACHE_ROOT={cache_root} overlaps {key}={model}; the cache root must be "
                    "dedicated",
                    "CACHE_ROOT",
                )
        low, high = v["NCCL_MIN_NCHANNELS"], v["NCCL_MAX_NCHANNELS"]
        if low != AUTO and high != AUTO and low > high:
            raise self.refuse(
                f"NCCL_MIN_NCHANNELS={low} exceeds NCCL_MAX_NCHANNELS={high}",
                "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
            )
        for key in ("NCCL_IB_GID_INDEX", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
            if v[key] == AUTO:
                self.auto(key, None, "left to NCCL (not set)")

    def fabric(self) -> None:
        """NCCL over RDMA needs the site's HCA and bootstrap interface names: with none,
        NCCL takes every HCA and interface it finds, which on a GB10 with three or more
        interfaces hangs at init or runs the all-reduce at TCP speed."""
        v = self.values
        if v["NCCL_NET"] == "IB":
            missing = [key for key in ("NCCL_IB_HCA", "SOCKET_IFNAME") if not v[key]]
            if missing:
                raise self.refuse(
                    f"NCCL_NET=IB needs {' and '.join(missing)}: the ring's RDMA devices and the "
                    "bootstrap interface of this host (the seeds' hosts: NCCL_IB_HCA=rocep1s0f0,"
                    "rocep1s0f1 SOCKET_IFNAME=enP7s7); or set NCCL_NET=Socket",
                    "NCCL_NET", *missing,
                )
            memlock = [item for item in v["CONTAINER_ULIMITS"].split(",") if item.startswith("memlock=")]
            if memlock and memlock[0] not in ("memlock=-1", "memlock=-1:-1"):
                raise self.refuse(
                    f"NCCL_NET=IB registers GPU and host buffers with the HCA, which needs unlimited "
                    f"locked memory; CONTAINER_ULIMITS has {memlock[0]}",
                    "CONTAINER_ULIMITS", "NCCL_NET",
                )
        if v["NCCL_LIBRARY"] and not v["NCCL_LIBRARY_SHA256"]:
            raise self.refuse(
                f"NCCL_LIBRARY={v['NCCL_LIBRARY']} is not bound: set NCCL_LIBRARY_SHA256 to the "
                "library's sha256 (the profile binds the seeds' switchless build)",
                "NCCL_LIBRARY",
            )
        if v["SPARKCACHE_PLACEMENT_LIBRARY"]:
            raise self.refuse(
                "SPARKCACHE_PLACEMENT_LIBRARY is refused: the image's SparkCache (0.1.0a2) reads no "
                "placement-library key, so nothing would load it",
                "SPARKCACHE_PLACEMENT_LIBRARY",
            )

    def serving(self) -> None:
        v = self.values
        if v["AUTO_TOOL_CHOICE"] and not v["TOOL_CALL_PARSER"]:
            # vLLM refuses the same at start (vllm/entrypoints/common/cli_args.py:553: "requires
            # --tool-call-parser"); the launcher says it before the container starts
            raise self.refuse(
                "AUTO_TOOL_CHOICE=1 needs TOOL_CALL_PARSER (vLLM refuses "
                "--enable-auto-tool-choice without --tool-call-parser)",
                "AUTO_TOOL_CHOICE", "TOOL_CALL_PARSER",
            )
        if not v["SERVED_MODEL_NAME"]:
            self.auto("SERVED_MODEL_NAME", self.contract.served_model_name, "the profile's served model name")

    def container(self) -> None:
        v = self.values
        if v["SHM_SIZE"] == AUTO:
            if v["IPC_MODE"] == "host":
                self.auto("SHM_SIZE", None, "host IPC shares the host's /dev/shm")
            else:
                self.auto("SHM_SIZE", PRIVATE_IPC_SHM_BYTES, "private IPC -> 32 GiB /dev/shm")
        elif v["IPC_MODE"] == "host":
            raise self.refuse(
                "SHM_SIZE cannot be set with IPC_MODE=host (the host's /dev/shm is shared); "
                "set IPC_MODE=private or remove SHM_SIZE",
                "SHM_SIZE",
            )

    def image_capabilities(self) -> None:
        capabilities = self.contract.capabilities
        if capabilities is None:
            return
        from .capability_rules import refusals

        for keys, message in refusals(self.values, capabilities):
            raise self.refuse(f"{message} ({capabilities.source})", *keys)

    def resolve(self) -> Resolution:
        self.base_values()
        self.topology()
        self.speculation()
        self.capacity()
        self.sparkcache()
        self.site()
        self.fabric()
        self.serving()
        self.container()
        self.image_capabilities()
        # "auto" that is one of a setting's choices (LOAD_FORMAT: vLLM's own auto) is a value
        leftover = [key for key, value in self.values.items() if value == AUTO and AUTO not in CATALOG[key].choices]
        if leftover:  # pragma: no cover - every auto setting has a rule above
            raise InputError(f"{self.source}: no auto rule resolved {', '.join(leftover)}")
        return Resolution(
            rank=self.rank,
            values=MappingProxyType(dict(self.values)),
            origins=MappingProxyType(dict(self.origins)),
            source=self.source,
        )


def _overlaps(first: str, second: str) -> bool:
    a = first.rstrip("/") + "/"
    b = second.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def resolve(
    assignments: Sequence[EnvAssignment],
    contract: LaunchContract,
    rank: int,
    source: str,
) -> Resolution:
    """Resolve one rank's settings; raises InputError naming file:line on refusal."""
    if rank < 0:
        raise InputError(f"rank {rank} must be non-negative")
    return _Resolver(assignments, contract, rank, source).resolve()
