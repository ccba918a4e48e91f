"""`sparkflake audit TARGET`: every digest of an image re-derived from its bytes and
compared with what it should be.

1. ``audit.expectations_from`` — what the image must be: the profile, the lock, the
   receipt, an expected-digests file, ``--expect`` digests;
2. ``audit.open_target`` — the image, read by oci's readers (an engine's store saved first);
3. ``audit.audit_image`` — every check, each difference reported and the audit going on;
4. ``audit.supply_chain`` — the SBOM against the image, and for a registry target its
   referrers and (with a key) the cosign signature and attestation;
5. ``audit.write_record`` — the digest-verification record, when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import audit
from ..audit import supply_chain
from ..audit.report import AuditReport
from ..core.errors import InputError
from ..core.progress import Progress


@dataclass(frozen=True)
class AuditRequest:
    target: str  # oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE, docker://…, podman:…, docker:…
    profile: str | None = None  # expect this profile's platform and labels (and its lock)
    lock_file: str | None = None  # the receipt's dependencies must equal this lock
    receipt_file: str | None = None  # the full receipt written next to the image
    expect: tuple[str, ...] = ()  # sha256:HEX@KIND
    expect_file: str | None = None  # expected digests (digests.json shape)
    platform: str | None = None  # to pick from an index (default: the profile's)
    insecure: bool = False  # plain HTTP to a registry on loopback
    engine_args: tuple[str, ...] = ()  # extra arguments for podman/docker
    max_layer_bytes: int | None = None  # refuse a layer that decompresses to more
    sbom_file: str | None = None  # an SPDX SBOM to check against the image, receipt and lock
    key_file: str | None = None  # registry targets: the cosign public key
    record_file: Path | None = None  # where the digest-verification record goes


class UnreadableTarget(InputError):
    """The target could not be opened as an image: the audit has no report but this."""


def audit_target(request: AuditRequest, progress: Progress | None = None) -> AuditReport:
    """The audit's report; bad input raises (``UnreadableTarget`` when it is the target)."""
    expectations = audit.expectations_from(
        expect=request.expect,
        expect_file=request.expect_file,
        profile_name=request.profile,
        lock_file=request.lock_file,
        receipt_file=request.receipt_file,
        max_uncompressed_bytes=request.max_layer_bytes,
    )
    try:
        source = audit.open_target(
            request.target,
            platform=request.platform or expectations.platform,
            insecure=request.insecure,
            engine_args=request.engine_args,
        )
    except InputError as exc:
        raise UnreadableTarget(exc.message, check_id=exc.check_id) from exc
    try:
        report = audit.audit_image(source, expectations, progress=progress)
    finally:
        if source.cleanup is not None:
            source.cleanup()
    sbom_content = None
    if request.sbom_file:
        sbom_content = supply_chain.sbom_checks(report, request.sbom_file, receipt=expectations.receipt,
                                                lock_digests=expectations.lock_digests)
    if request.target.startswith("docker://") and (request.sbom_file or request.key_file):
        supply_chain.registry_checks(report, request.target, insecure=request.insecure, key_path=request.key_file,
                                     sbom_content=sbom_content)
    elif request.key_file:
        report.add("signature", "skip", "signatures are kept in a registry: audit a docker:// target with --key")
    if request.record_file:
        audit.write_record(request.record_file, report, request.profile)
    return report
