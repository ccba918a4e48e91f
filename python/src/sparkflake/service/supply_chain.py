"""Before anything starts, where the site names a trusted key: the image's cosign signature
and its SLSA provenance attestation, verified with that key against the site's own registry
(``[service] signatures = "REGISTRY/REPO"``, where `sparkflake sign` or `cosign sign`/`attest`
stored them): no transparency log, no internet — what a site without outside access can
check. The manifest digest verified is the one every rank's engine must be bound to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..core.check_result import FAIL, PASS, CheckResult
from ..core.errors import SparkflakeError
from ..distribute.site_service import ServiceSettings
from ..oci.remote import RegistryClient, parse_reference
from ..signing.cosign import verify_attestation, verify_signature
from ..signing.keys import load_public_key


def supply_chain_checks(settings: ServiceSettings, site_dir: Path, manifest: str | None) -> list[CheckResult]:
    if settings.trusted_key is None or settings.signatures is None:
        return []
    if manifest is None:
        detail = "the site names a trusted key but no manifest digest to verify (service.manifest or --digests)"
        return [CheckResult("supply-chain.signature", FAIL, detail), CheckResult("supply-chain.provenance", FAIL, detail)]
    key_path = Path(settings.trusted_key)
    key = load_public_key(key_path if key_path.is_absolute() else site_dir / key_path)  # bad key: bad input
    reference = parse_reference(f"{settings.signatures}@{manifest}")
    client = RegistryClient(reference.registry, insecure=settings.registry_insecure)
    checks = []
    verifications: tuple[tuple[str, Callable[[], str]], ...] = (
        ("supply-chain.signature", lambda: verify_signature(client, reference, key, manifest)),
        ("supply-chain.provenance", lambda: verify_attestation(client, reference, key, manifest)[0]),
    )
    for check_id, verify in verifications:
        try:
            checks.append(CheckResult(check_id, PASS, verify(), manifest))
        except (SparkflakeError, OSError) as exc:
            checks.append(CheckResult(check_id, FAIL, f"{reference.registry}/{reference.repository}: {exc}", manifest))
    return checks
