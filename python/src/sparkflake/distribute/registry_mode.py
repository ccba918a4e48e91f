"""Registry mode of ``sparkflake fanout``: every rank pulls the image by digest from a
registry (each byte verified by ``sparkflake.oci.remote``), imports it, and the image ID is
checked before the tag is applied. The reference must be pinned by digest, so every rank
gets exactly the manifest that was published."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError
from ..oci.remote import parse_reference
from ..oci.types import Platform
from .agent_reply import MalformedReply, count_at, digest_at, optional_text_at
from .engine import check_import_request
from .evidence import EVIDENCE_SCHEMA, REPORT_SCHEMA
from .site import Rank, Site
from .ssh import AgentsOfARun, run_agent


@dataclass(frozen=True)
class RegistryFanoutRequest:
    reference: str  # REGISTRY/REPO@sha256:...
    platform: str = "linux/arm64"
    image_id: str | None = None
    engine: str | None = None
    tag: str | None = None
    insecure: bool = False
    ca_file: str | None = None  # a path on every rank
    auth_file: str | None = None  # a path on every rank


def validate_registry_request(request: RegistryFanoutRequest) -> None:
    source = parse_reference(request.reference)
    if not source.digest:
        raise InputError(f"{request.reference}: ranks pull by digest: expected REGISTRY/REPO@sha256:...")
    Platform.parse_any(request.platform)
    check_import_request(request.engine, request.image_id)
    if request.insecure:
        # refused here, before any rank is contacted, rather than by every rank
        from ..oci.remote import RegistryClient

        RegistryClient(source.registry, insecure=True)


def registry_fanout(site: Site, request: RegistryFanoutRequest) -> dict[str, Any]:
    validate_registry_request(request)
    started = time.monotonic()
    agents = AgentsOfARun()
    pool = ThreadPoolExecutor(max_workers=len(site.ranks))
    try:
        records = list(pool.map(lambda rank: _one_rank(agents, site, rank, request), site.ordered_ranks()))
    except BaseException:  # an interrupt: every pull and import ends now, none starts
        agents.end_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    complete = all(r["status"] == "verified" and (not request.engine or r["imported"]) for r in records)
    return {"schema": REPORT_SCHEMA, "kind": "registry-fanout", "reference": request.reference,
            "image_id": request.image_id, "complete": complete,
            "seconds": round(time.monotonic() - started, 6), "ranks": records}


def _one_rank(agents: AgentsOfARun, site: Site, rank: Rank, request: RegistryFanoutRequest) -> dict[str, Any]:
    source = parse_reference(request.reference)
    assert source.digest is not None
    layout = rank.data_path("images", source.digest.replace(":", "-"))
    record: dict[str, Any] = {"schema": EVIDENCE_SCHEMA, "kind": "registry-fanout", "rank": rank.name,
                              "ssh": rank.ssh, "reference": request.reference,
                              "layout": layout, "status": "pending", "error": None, "imported": False,
                              "image_id": None, "bytes": None}
    began = time.monotonic()
    args = ["pull", "--reference", request.reference, "--layout", layout, "--platform", request.platform]
    if request.insecure:
        args.append("--insecure")
    if request.ca_file:
        args += ["--ca-file", request.ca_file]
    if request.auth_file:
        args += ["--auth-file", request.auth_file]
    reply = run_agent(site, rank, args, within=agents)
    record["seconds"] = round(time.monotonic() - began, 6)
    if reply.returncode != 0 or not reply.result or reply.result.get("status") != "ok":
        record.update(status="failed", error=f"rank {rank.name} ({rank.ssh}): pull failed: {reply.describe_failure()}")
        return record
    where = f"rank {rank.name} ({rank.ssh})"
    try:
        pulled_bytes = count_at(reply.result, "bytes", where)
        manifest_digest = digest_at(reply.result, "manifest_digest", where)
        config_digest = digest_at(reply.result, "config_digest", where)
    except MalformedReply as exc:
        record.update(status="failed", error=exc.message)
        return record
    record.update(bytes=pulled_bytes, manifest_digest=manifest_digest, config_digest=config_digest)
    if request.image_id and config_digest != request.image_id:
        record.update(status="failed", error=f"rank {rank.name}: {request.reference} has config (image ID) "
                                             f"{config_digest}, expected {request.image_id}; not imported")
        return record
    record["status"] = "verified"
    if request.engine:
        assert request.image_id
        import_args = ["import", "--archive", layout, "--engine", request.engine, "--image-id", request.image_id,
                       "--engine-args-json", json.dumps(list(rank.engine_args))]
        if request.tag:
            import_args += ["--tag", request.tag]
        imported = run_agent(site, rank, import_args, within=agents)
        if not (imported.returncode == 0 and imported.result and imported.result.get("status") == "ok"):
            record.update(status="failed", error=f"rank {rank.name}: import failed: {imported.describe_failure()}")
            return record
        try:
            image_id, tag = digest_at(imported.result, "image_id", where), optional_text_at(imported.result, "tag", where)
        except MalformedReply as exc:
            record.update(status="failed", error=exc.message)
            return record
        if image_id != request.image_id:
            record.update(status="failed", error=f"rank {rank.name}: the engine holds image ID {image_id} after "
                                                 f"the import, expected {request.image_id}")
            return record
        record.update(imported=True, image_id=image_id, tag=tag)
    return record
