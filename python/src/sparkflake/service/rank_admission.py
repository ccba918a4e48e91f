"""One rank's admission, run on the rank: launch-rank's own plan and checks (``plan_launch``,
as ``launch-rank --dry-run`` runs them) plus what only a gang needs — the engine reachable,
the image bound to the expected manifest digest, the fabric devices and interfaces the
settings name present — and the facts the controller compares across ranks (settings,
the rendered spec without its rank-specific fields, the checkpoint pins' hash)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..core.canonical_json import canonical_json_bytes
from ..core.check_result import FAIL, PASS, CheckResult
from ..core.container_engine import Engine, detect_engine
from ..core.errors import InputError
from ..launch.contract import load_contract
from ..launch.envfile import EnvAssignment, read_env_file
from ..launch.identity import checkpoint_identity
from ..launch.plan import LaunchPlan, plan_from_assignments
from ..launch.qualification import qualification_values
from ..launch.spec import LABEL_PREFIX, engine_argv
from ..profile.settings_catalog import render_value
from .rank_request import DEPLOYMENT_LABEL, SERVICE_LABEL, RankRequest

# labels, serve arguments and environment that differ by rank by design: everything else of
# the rendered spec must be identical on every rank (or NCCL waits forever for a peer
# whose world differs)
RANK_LABELS = (f"{LABEL_PREFIX}rank", f"{LABEL_PREFIX}runtime-identity")
RANK_ENV = ("VLLM_HOST_IP",)
SYSFS_RDMA = "/sys/class/infiniband"


@dataclass(frozen=True)
class RankAdmission:
    plan: LaunchPlan
    argv: list[str]  # the engine argv, with the service's labels
    checks: list[CheckResult]
    facts: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(check.status == PASS for check in self.checks)


def rank_engine(request: RankRequest) -> Engine:
    return detect_engine(request.engine, request.engine_args, environ={})


def _assignments(request: RankRequest) -> tuple[EnvAssignment, ...]:
    assignments = read_env_file(request.env_file)
    if request.checkpoint_pins is None:
        return assignments
    return tuple(
        replace(item, value=request.checkpoint_pins) if item.key == "CHECKPOINT_PINS" else item
        for item in assignments
    )


def admit_rank(request: RankRequest, *, running: dict[str, str] | None = None) -> RankAdmission:
    """``running``: container name -> deployment of this service's containers now on the
    rank (the engine answered that question, so it is reachable; None: not asked); when
    ``request.replacing``, the name and ports they hold are not refusals (they are stopped
    before the start, which checks again), else they are the refusal ``service.running``."""
    checks: list[CheckResult] = []
    engine: Engine | None
    try:
        engine = reachable = rank_engine(request)
        if running is not None:
            checks.append(CheckResult("engine.reachable", PASS, f"{request.engine} listed the service's containers"))
        else:
            version = subprocess.run(reachable.command("version", "--format", "{{.Client.Version}}"),
                                     capture_output=True, encoding="utf-8", errors="replace", timeout=60, check=False)
            if version.returncode == 0:
                checks.append(CheckResult("engine.reachable", PASS, f"{request.engine} {version.stdout.strip()}"))
            else:
                checks.append(CheckResult("engine.reachable", FAIL,
                                          f"{request.engine} version: {version.stderr.strip()[-300:]}"))
    except (InputError, OSError, subprocess.TimeoutExpired) as exc:
        engine = None
        checks.append(CheckResult("engine.reachable", FAIL, str(exc)))
    contract = load_contract(request.profile)
    plan = plan_from_assignments(rank=request.rank, assignments=_assignments(request), source=request.env_file,
                                 contract=contract, engine=engine, image_id=request.image, detach=True)
    labels = {**plan.spec.labels, SERVICE_LABEL: request.service, DEPLOYMENT_LABEL: request.deployment}
    spec = replace(plan.spec, labels=labels)
    argv = engine_argv(spec, request.engine, engine.command() if engine else [request.engine], detach=True)
    running = running or {}
    checks += [_spare_the_running(check, running, spec.name) if request.replacing else check
               for check in plan.checks]
    if not request.replacing and spec.name in running:
        checks.append(CheckResult("service.running", FAIL, f"deployment {running[spec.name]} of service "
                                  f"{request.service} has {spec.name} here: `sparkflake service up --replace` "
                                  "(an upgrade) or `sparkflake service down` first"))
    if engine is not None and request.manifest is not None and plan.spec.image:
        checks.append(check_manifest_binding(engine, plan.spec.image, request.manifest))
    checks.append(check_fabric(plan.resolution.values))
    values = plan.resolution.values
    facts = {
        "rank": request.rank,
        "container": spec.name,
        "image": plan.spec.image,
        "settings_hash": plan.qualification.settings_hash,
        "settings": {key: render_value(value) for key, value in qualification_values(values).items()},
        "spec": comparable_spec(plan),
        "spec_hash": "sha256:" + hashlib.sha256(canonical_json_bytes(comparable_spec(plan))).hexdigest(),
        "pins": pinned_identities(plan),
        "pins_sha256": "sha256:" + hashlib.sha256(canonical_json_bytes(pinned_identities(plan))).hexdigest(),
        "identity_hash": plan.identity_hash,
        "node_address": values["NODE_ADDRESS"],
        "master_address": values["MASTER_ADDRESS"],
        "node_count": values["NODE_COUNT"],
        "api_port": values["API_PORT"],
        "served_model": contract.served_model_name,
        "status": plan.qualification.status,
    }
    return RankAdmission(plan=plan, argv=argv, checks=checks, facts=facts)


def _spare_the_running(check: CheckResult, running: dict[str, str], name: str) -> CheckResult:
    if check.status == PASS or check.id not in ("container.name-free", "ports.free") or name not in running:
        return check
    return CheckResult(check.id, PASS, f"held by the running deployment {running[name]}, which is stopped "
                                       f"before the start; checked again then ({check.detail})")


def comparable_spec(plan: LaunchPlan) -> dict[str, Any]:
    """The rendered container spec without what differs by rank by design: the container
    name, the rank's own labels, its host address, ``--node-rank N`` and ``--headless``, and
    the host side of each mount (the checkpoints' content is compared by the pins hash)."""
    record = plan.spec.as_record()
    record.pop("name")
    record["labels"] = {k: v for k, v in record["labels"].items() if k not in RANK_LABELS}
    record["env"] = {k: v for k, v in record["env"].items() if k not in RANK_ENV}
    record["mounts"] = [{"target": m["target"], "read_only": m["read_only"]} for m in record["mounts"]]
    args, kept = record["serve_args"], []
    index = 0
    while index < len(args):
        if args[index] == "--node-rank":
            index += 2
            continue
        if args[index] != "--headless":
            kept.append(args[index])
        index += 1
    record["serve_args"] = kept
    return record


def pinned_identities(plan: LaunchPlan) -> dict[str, str | None]:
    """What the checkpoint pins bind, per role: the hash of the (path, sha256, size) rows
    (launch.identity.checkpoint_identity). Not the pins file's bytes: they name the
    directory each rank pinned from."""
    contract = plan.contract
    return {"target": checkpoint_identity(contract.target_files),
            "draft": checkpoint_identity(contract.draft_files) if contract.draft_files else None}


def check_manifest_binding(engine: Engine, image: str, manifest: str) -> CheckResult:
    """The engine keeps the manifest an image was loaded or pulled with (podman: ``Digest``;
    both: ``RepoDigests``): the image must be bound to the expected manifest digest, so an
    image whose identity did not survive transport (re-compressed, re-built) is refused."""
    shown = subprocess.run(engine.command("image", "inspect", "--format", "{{.Digest}} {{.RepoDigests}}", image),
                           capture_output=True, encoding="utf-8", errors="replace", timeout=60, check=False)
    if shown.returncode != 0:
        return CheckResult("image.manifest", FAIL, f"{engine.name} has no image {image}", manifest)
    words = shown.stdout.replace("[", " ").replace("]", " ").split()
    found = {word.rpartition("@")[2] for word in words}
    if manifest in found:
        return CheckResult("image.manifest", PASS, f"{image} is bound to manifest {manifest}", manifest)
    return CheckResult("image.manifest", FAIL,
                       f"{image} is bound to {', '.join(sorted(found)) or 'no manifest'}, expected {manifest}: "
                       "the image was re-made or re-compressed on its way here; fan the build out again",
                       manifest)


def check_fabric(values: Mapping[str, Any]) -> CheckResult:
    """The interface (SOCKET_IFNAME) and RDMA devices (NCCL_IB_HCA) the settings name exist
    on this rank: a wrong HCA name makes NCCL fall back to sockets at a tenth of the speed."""
    present, missing = [], []
    interface = values.get("SOCKET_IFNAME") or ""
    for name in (part for part in interface.lstrip("^=").split(",") if part and not interface.startswith("^")):
        try:
            socket.if_nametoindex(name)
            present.append(f"interface {name}")
        except OSError:
            missing.append(f"interface {name} (not in this host's network namespace)")
    hcas = values.get("NCCL_IB_HCA") or ""
    for entry in (part for part in hcas.lstrip("^=").split(",") if part and not hcas.startswith("^")):
        device = entry.split(":")[0]
        if os.path.isdir(os.path.join(SYSFS_RDMA, device)):
            present.append(f"RDMA device {device}")
        else:
            missing.append(f"RDMA device {device} (no {SYSFS_RDMA}/{device})")
    if missing:
        return CheckResult("fabric.devices", FAIL, "missing: " + "; ".join(missing))
    if not present:
        return CheckResult("fabric.devices", PASS, "the settings name no interface or RDMA device (NCCL selects)")
    return CheckResult("fabric.devices", PASS, "present: " + ", ".join(present))
