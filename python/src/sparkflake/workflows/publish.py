"""`sparkflake publish OUT REGISTRY/REPO:TAG`: an image pushed digest-preserving.

1. the layout (``OUT/oci`` of a build output, or OUT itself) and the registry client;
2. ``distribute.registry.push_layout`` — blobs the registry lacks, then the manifest byte
   for byte, the digest the registry answers checked against ours;
3. ``oci.referrers.push_referrer`` — the build's SBOM artifact (found through
   ``OUT/receipt.json``), listed by the referrers API or the fallback tag;
4. the outcome recorded in ``publish.json`` (or ``--record FILE``), never in OUT, which may
   be a read-only store path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compose import receipt
from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.errors import InputError
from ..core.output_marker import check_entry_if_output
from ..core.progress import Progress
from ..oci.artifact import ReferringArtifact, read_referring_artifact
from ..oci.layout import output_layout
from ..oci.referrers import PushedReferrer, push_referrer
from ..oci.registry_auth import load_credentials
from ..oci.registry_transfer import PushResult, push_layout
from ..oci.remote import RegistryClient, parse_reference


@dataclass(frozen=True)
class PublishRequest:
    out: Path  # a build output holding oci/, or an OCI layout
    target: str  # REGISTRY/REPO:TAG
    insecure: bool = False  # plain HTTP (loopback registries only)
    ca_file: str | None = None  # CA certificate for a registry with a private CA
    auth_file: str | None = None  # JSON {"username": ..., "password": ...}
    push_sbom: bool = True  # push the build's SBOM artifact too
    record_file: Path = Path("publish.json")  # where the outcome is recorded


@dataclass(frozen=True)
class PublishResult:
    pushed: PushResult
    sbom: PushedReferrer | None  # the SBOM artifact pushed as a referrer of the image
    record: dict[str, Any]  # what was written to the record file


def sbom_artifact(out: Path, layout: Path, manifest_digest: str) -> ReferringArtifact | None:
    """The SBOM artifact the build put in the layout, found through OUT/receipt.json (its
    sbom-artifact-manifest byproduct); None for a layout without a receipt beside it."""
    receipt_path = out / "receipt.json"
    if layout == out or not receipt_path.is_file():
        return None
    found = receipt.read_build_receipt(receipt_path).byproduct(receipt.SBOM_ARTIFACT)
    if found is None:
        return None
    return read_referring_artifact(layout, f"sha256:{found.sha256}", manifest_digest)


def publish(request: PublishRequest, progress: Progress | None = None) -> PublishResult:
    """Push, check the registry's digest, push the SBOM, record the outcome."""
    target = parse_reference(request.target)
    if target.digest:
        raise InputError(f"{request.target}: publish to a tag, not a digest (the digest is the result)")
    out = request.out
    layout = output_layout(out)
    if not (layout / "index.json").is_file():
        raise InputError(f"{out}: neither OUT/oci/index.json nor OUT/index.json exists")
    record = request.record_file
    check_entry_if_output(record.parent, record.name, "name another file with --record")  # before any push
    credentials = load_credentials(request.auth_file) if request.auth_file else None
    client = RegistryClient(target.registry, insecure=request.insecure, ca_file=request.ca_file,
                            credentials=credentials)
    pushed = push_layout(client, layout, target, progress=progress)
    outcome = pushed.as_record()
    artifact = sbom_artifact(out, layout, pushed.manifest_digest) if request.push_sbom else None
    sbom = None
    if artifact is not None:
        sbom = push_referrer(client, target.repository, artifact, pushed.manifest_digest)
        outcome["sbom"] = sbom.as_record()
    write_bytes_atomic(record, readable_json_bytes(outcome), listed=True)  # in a build output: the next build may replace it
    return PublishResult(pushed=pushed, sbom=sbom, record=outcome)
