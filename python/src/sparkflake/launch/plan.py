"""One rank's launch, end to end as data: parse, resolve, identify, check, spec, argv.

``plan_launch`` never starts anything and never changes stored state (it may refresh the
verified-hash cache under a dedicated cache root). ``prepare_state`` is the one step of a
real launch that writes: it marks the cache root and accepts or quarantines state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.check_result import PASS, CheckResult
from ..core.container_engine import Engine
from ..core.errors import InputError
from ..runtime.capabilities import selecting_settings
from .checkpoint_pins import pinned_files, read_pins
from .checks import (
    CACHE_ROOT_MARKER,
    QUARANTINE_DIR,
    TOOL_DIR,
    cache_root_marker,
    check_cache_root_dedicated,
    check_cache_root_local,
    check_cache_state,
    check_checkpoint,
    check_container_name,
    check_image,
    check_image_capabilities,
    check_ports,
)
from .contract import LaunchContract
from .envfile import read_env_file
from .hashcache import VerifiedHashCache
from .host_fabric import check_hcas, check_interfaces, check_nccl_library, check_rdma_devices
from .identity import (
    StateDecision,
    accept_state,
    checkpoint_identity,
    identity_hash,
    namespace,
    runtime_identity,
)
from .mtp_depth import check_mtp_depth
from .qualification import Qualification, qualify
from .resolution import Resolution, resolve
from .served_model import ServedModel, check_served_model
from .spec import LABEL_PREFIX, ContainerSpec, build_spec, engine_argv

REPORT_SCHEMA = "sparkflake.launch-plan/v1"


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the launch decided for one rank before anything runs: the settings and
    their sources, the container spec and argv, and the result of every check."""

    contract: LaunchContract
    resolution: Resolution
    identity: dict[str, Any]
    identity_hash: str
    namespace: str
    qualification: Qualification
    spec: ContainerSpec
    argv: list[str]
    checks: list[CheckResult]
    engine: Engine | None
    cache_root: Path
    sparkcache_dir: Path
    jit_dir: Path
    hash_cache_stats: dict[str, int] = field(default_factory=dict)
    # role -> what its checkpoint on this rank serves (launch.served_model), when read
    served_models: dict[str, ServedModel] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(check.status == PASS for check in self.checks)

    def report(self, *, explain: bool = False) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema": REPORT_SCHEMA,
            "profile": self.contract.profile,
            "rank": self.resolution.rank,
            "env_file": self.resolution.source,
            "engine": self.engine.name if self.engine else None,
            "argv": self.argv,
            "resolved": self.resolution.as_record(),
            "labels": dict(sorted(self.spec.labels.items())),
            "qualification": self.qualification.as_record(),
            "identity": self.identity,
            "identity_hash": self.identity_hash,
            # the seeds' upstream identities, as claims with their status (not in the identity)
            "claims": dict(sorted(self.contract.claims.items())),
            "namespace": self.namespace,
            "container": self.spec.as_record(),
            "checks": [check.as_record() for check in self.checks],
            "ok": self.ok,
        }
        if self.served_models:
            document["served_models"] = {role: model.as_record() for role, model in self.served_models.items()}
        if explain:
            document["explain"] = dict(sorted(self.resolution.origins.items()))
            document["kernel_selection"] = kernel_selection(self.contract, self.spec.serve_args)
        return document


def kernel_selection(contract: LaunchContract, serve_args: Sequence[str]) -> dict[str, Any]:
    """What vLLM's engine start chose per layer kind for these serve arguments on the
    profile's device, as the runtime check recorded it in the image's capabilities."""
    capabilities = contract.capabilities
    if capabilities is None:
        return {"judged": False, "why": "no runtime-capabilities.json for this image"}
    selection = capabilities.selection_for(selecting_settings(serve_args))
    if selection is None:
        return {"judged": False, "why": f"the runtime check judged no launch with these settings ({capabilities.source})"}
    return {"judged": True, "source": capabilities.source, **selection.as_record()}


def _refuse_what_vllm_refuses(resolution: Resolution, contract: LaunchContract, serve_args: Sequence[str]) -> None:
    """A launch whose engine start the runtime check saw vLLM refuse is refused here, with the
    layer, the setting and vLLM's own reason (exit 2: nothing is started)."""
    capabilities = contract.capabilities
    if capabilities is None:
        return
    selection = capabilities.selection_for(selecting_settings(serve_args))
    if selection is None or not selection.refusals:
        return
    reasons = "; ".join(f"{kind}: {reason}" for kind, reason in selection.refusals.items())
    raise InputError(f"{resolution.source}: vLLM {capabilities.versions.get('vllm') or '?'} refuses this launch at "
                     f"engine start on the profile's device: {reasons} ({capabilities.source})")


def with_pinned_checkpoints(contract: LaunchContract, pins_path: str) -> LaunchContract:
    """The contract whose checkpoints are bound by the site's pins file as well."""
    pins = read_pins(pins_path)
    return replace(
        contract,
        target_files=pinned_files(pins_path, pins, contract.profile, "target", contract.target_files),
        draft_files=pinned_files(pins_path, pins, contract.profile, "draft", contract.draft_files),
    )


def _setting_origin(resolution: Resolution, key: str) -> str:
    """``FILE:LINE`` of the env-file line that set ``key`` (else the env file)."""
    line = resolution.origins.get(key, "")
    return line[len("env:") :] if line.startswith("env:") else resolution.source


def _require_directory(resolution: Resolution, key: str) -> None:
    path = resolution.values[key]
    if path and not os.path.isdir(path):
        what = "does not exist" if not os.path.exists(path) else "is not a directory"
        raise InputError(f"{_setting_origin(resolution, key)}: {key}={path} {what}")


def _refuse_cache_root_inside_a_checkpoint(resolution: Resolution) -> None:
    """The resolution refuses a CACHE_ROOT whose spelling overlaps a checkpoint; through a
    symlinked parent (or a symlinked checkpoint) two spellings can name one directory, so
    the same refusal on the resolved paths: the real path of what exists, the rest
    appended (``os.path.realpath`` without ``strict``)."""
    cache_root = os.path.realpath(resolution.values["CACHE_ROOT"])
    for key in ("TARGET_MODEL_PATH", "DRAFT_MODEL_PATH"):
        model = resolution.values[key]
        if not model:
            continue
        resolved = os.path.realpath(model)
        if os.path.commonpath([cache_root, resolved]) in (cache_root, resolved):
            raise InputError(
                f"{_setting_origin(resolution, 'CACHE_ROOT')}: CACHE_ROOT={resolution.values['CACHE_ROOT']} "
                f"resolves to {cache_root}, which overlaps {key}={model} (resolved {resolved}); the cache "
                "root must be dedicated, outside every checkpoint"
            )


def plan_launch(*, env_file: str | os.PathLike[str], **options: Any) -> LaunchPlan:
    """``plan_from_assignments`` (``options`` are its keywords) on the settings of
    ``env_file``, read as data."""
    source = os.fspath(env_file)
    return plan_from_assignments(assignments=read_env_file(source), source=source, **options)


def plan_from_assignments(
    *,
    rank: int,
    assignments: Sequence[Any],
    source: str,
    contract: LaunchContract,
    engine: Engine | None,
    image_id: str | None = None,
    rehash: bool = False,
    check_engine: bool = True,
    run_checks: bool = True,
    detach: bool = False,
    host_root: Path = Path("/"),
) -> LaunchPlan:
    """``run_checks=False`` computes the spec alone (golden specs, recipes): no checkpoint
    file is read (the pins file CHECKPOINT_PINS names is: it gives the checkpoints' identity).
    ``host_root``: where the host's /sys and /dev are read for the fabric checks."""
    resolution = resolve(assignments, contract, rank, source)
    values = resolution.values
    if values["CHECKPOINT_PINS"]:
        try:
            contract = with_pinned_checkpoints(contract, values["CHECKPOINT_PINS"])
        except InputError as exc:
            raise InputError(f"{_setting_origin(resolution, 'CHECKPOINT_PINS')}: CHECKPOINT_PINS: {exc.message}") from None
    image = image_id or contract.image_id
    target_id = checkpoint_identity(contract.target_files)
    draft_id = checkpoint_identity(contract.draft_files) if values["SPECULATIVE_METHOD"] == "dflash" else None
    identity = runtime_identity(
        profile=contract.profile,
        values=values,
        rank=rank,
        target_checkpoint=target_id,
        draft_checkpoint=draft_id,
        components=contract.components,
    )
    digest = identity_hash(identity)
    name_space = namespace(identity)
    cache_root = Path(values["CACHE_ROOT"])
    sparkcache_dir = cache_root / contract.profile / "sparkcache" / name_space
    jit_dir = cache_root / contract.profile / "jit" / name_space
    qualification = qualify(resolution, contract, image)
    labels = dict(contract.image_labels)
    labels.update(
        {
            f"{LABEL_PREFIX}profile": contract.profile,
            f"{LABEL_PREFIX}rank": str(rank),
            f"{LABEL_PREFIX}status": qualification.status,
            f"{LABEL_PREFIX}settings-hash": qualification.settings_hash,
            f"{LABEL_PREFIX}runtime-identity": "sha256:" + digest,
            f"{LABEL_PREFIX}image-id": image or "",
        }
    )
    spec = build_spec(
        resolution=resolution,
        contract=contract,
        image_id=image or "",
        target_checkpoint=target_id,
        draft_checkpoint=draft_id,
        sparkcache_dir=str(sparkcache_dir),
        jit_dir=str(jit_dir),
        labels=labels,
    )
    argv = engine_argv(
        spec, engine.name if engine else "podman", engine.command() if engine else ["podman"], detach=detach
    )
    _refuse_what_vllm_refuses(resolution, contract, spec.serve_args)

    checks: list[CheckResult] = []
    served_models: dict[str, ServedModel] = {}
    hash_cache = VerifiedHashCache(None)
    if run_checks:
        checks += fabric_checks(resolution, host_root)
        hash_cache = _run_checks(checks, served_models=served_models, resolution=resolution, contract=contract,
                                 engine=engine, image=image, spec=spec, draft_id=draft_id, identity=identity,
                                 cache_root=cache_root, sparkcache_dir=sparkcache_dir, jit_dir=jit_dir,
                                 rehash=rehash, check_engine=check_engine)
    return LaunchPlan(
        contract=contract,
        resolution=resolution,
        identity=identity,
        identity_hash=digest,
        namespace=name_space,
        qualification=qualification,
        spec=spec,
        argv=argv,
        checks=checks,
        engine=engine,
        cache_root=cache_root,
        sparkcache_dir=sparkcache_dir,
        jit_dir=jit_dir,
        hash_cache_stats={"hits": hash_cache.hits, "misses": hash_cache.misses},
        served_models=served_models,
    )


def fabric_checks(resolution: Resolution, host_root: Path) -> list[CheckResult]:
    """The host's side of the fabric the spec asks for, and the operator's NCCL build."""
    values = resolution.values
    checks = []
    if values["NCCL_NET"] == "IB":
        checks += [check_rdma_devices(host_root),
                   check_hcas(host_root, values["NCCL_IB_HCA"], values["NCCL_IB_GID_INDEX"])]
    if values["SOCKET_IFNAME"]:
        checks.append(check_interfaces(host_root, values["SOCKET_IFNAME"]))
    if values["NCCL_LIBRARY"]:
        checks.append(check_nccl_library(values["NCCL_LIBRARY"], values["NCCL_LIBRARY_SHA256"]))
    return checks


def _judge_served_models(checks: list[CheckResult], resolution: Resolution, contract: LaunchContract,
                         with_draft: bool) -> dict[str, ServedModel]:
    """The checkpoints on this rank, read (config.json, safetensors headers) and judged
    against the architectures the profile serves."""
    roles = [("target", "TARGET_MODEL_PATH", contract.target_architecture)]
    if with_draft:
        roles.append(("draft", "DRAFT_MODEL_PATH", contract.draft_architecture))
    served: dict[str, ServedModel] = {}
    for role, key, architecture in roles:
        check, model = check_served_model(f"checkpoint.{role}.model", resolution.values[key], architecture)
        checks.append(check)
        if model is not None:
            served[role] = model
    return served


def _run_checks(checks: list[CheckResult], *, served_models: dict[str, ServedModel], resolution: Resolution,
                contract: LaunchContract, engine: Engine | None, image: str | None, spec: ContainerSpec,
                draft_id: str | None, identity: dict[str, Any], cache_root: Path, sparkcache_dir: Path,
                jit_dir: Path, rehash: bool, check_engine: bool) -> VerifiedHashCache:
    """Every check before start, appended to ``checks`` (what the checkpoints serve into
    ``served_models``); the verified-hash cache the checkpoint checks used."""
    values = resolution.values
    rank = resolution.rank
    # Paths that are not directories are bad input (exit 2), not failed checks.
    _require_directory(resolution, "TARGET_MODEL_PATH")
    _require_directory(resolution, "DRAFT_MODEL_PATH")
    _refuse_cache_root_inside_a_checkpoint(resolution)
    if check_engine:
        checks += check_image(engine, image, contract.image_labels)
        checks.append(check_container_name(engine, spec.name))
    # A plan without an engine check and without an image (a library caller computing the
    # checks of the site alone) has no image to bind; every launch-rank run checks the engine,
    # so there an unknown image fails the binding.
    bound = check_image_capabilities(contract.capabilities, image) if image or check_engine else None
    if bound is not None:
        checks.append(bound)
    marker = cache_root_marker(contract.profile, rank, values["NODE_ADDRESS"])
    allowed = {CACHE_ROOT_MARKER, TOOL_DIR, QUARANTINE_DIR, contract.profile}
    dedicated = check_cache_root_dedicated(cache_root, marker, allowed)
    checks.append(dedicated)
    checks.append(check_cache_root_local(cache_root))
    hash_cache_path = cache_root / TOOL_DIR / "verified-hashes.json" if dedicated.status == PASS else None
    hash_cache = VerifiedHashCache(hash_cache_path, rehash=rehash)
    checks.append(check_checkpoint("checkpoint.target", values["TARGET_MODEL_PATH"], contract.target_files,
                                   hash_cache, contract.target_pin))
    if values["SPECULATIVE_METHOD"] == "mtp":
        checks.append(check_mtp_depth(values["TARGET_MODEL_PATH"], values["SPECULATIVE_TOKENS"]))
    if draft_id is not None:
        checks.append(check_checkpoint("checkpoint.draft", values["DRAFT_MODEL_PATH"], contract.draft_files,
                                       hash_cache, contract.draft_pin))
    served_models.update(_judge_served_models(checks, resolution, contract, draft_id is not None))
    if dedicated.status == PASS and cache_root.exists():
        hash_cache.save()
    states = {"jit": (jit_dir, identity)}
    if values["SPARKCACHE_ENABLED"]:
        states = {"sparkcache": (sparkcache_dir, identity), **states}
    checks.append(check_cache_state(states))
    checks.append(check_ports(rank, [("API_PORT", values["API_PORT"]), ("MASTER_PORT", values["MASTER_PORT"])]))
    return hash_cache


def prepare_state(plan: LaunchPlan) -> list[StateDecision]:
    """Mark the cache root and accept (reuse) or quarantine (move aside) stored state."""
    root = plan.cache_root
    root.mkdir(parents=True, exist_ok=True)
    marker = cache_root_marker(plan.contract.profile, plan.resolution.rank, plan.resolution.values["NODE_ADDRESS"])
    marker_path = root / CACHE_ROOT_MARKER
    if not marker_path.exists():
        write_bytes_atomic(marker_path, readable_json_bytes(marker))
    quarantine_root = root / QUARANTINE_DIR
    decisions = []
    if plan.resolution.values["SPARKCACHE_ENABLED"]:
        decisions.append(accept_state(plan.sparkcache_dir, plan.identity, quarantine_root))
    decisions.append(accept_state(plan.jit_dir, plan.identity, quarantine_root))
    return decisions
