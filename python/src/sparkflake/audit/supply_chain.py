"""The audit's SBOM and signature checks (``audit --sbom FILE``, ``audit --key PUB``).

Run after the digest checks, on the manifest digest they re-derived from the bytes:

- ``sbom.document``: the file is an SPDX 2.3 JSON document with the image package;
- ``sbom.subject``: that package's SHA-256 is the audited manifest digest;
- ``sbom.receipt``: the file's sha256 is the one the receipt records (with ``--receipt``);
- ``sbom.inputs``: every input of the lock is a package with the lock's sha256 (or git
  commit) (with ``--lock``/``--profile``);
- ``sbom.referrer`` (registry targets): the registry lists an SPDX artifact whose subject
  is the image (referrers API or fallback tag), and with ``--sbom`` its bytes are the file's;
- ``signature`` / ``attestation`` (registry targets, ``--key``): as ``sparkflake verify``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..compose import receipt as receipts
from ..compose.sbom import IMAGE_ID, SPDX_MEDIA_TYPE, SPDX_VERSION
from ..core.check_result import ERROR, FAIL, PASS, SKIP
from ..core.digest import sha256_digest
from ..core.documents import parse_json, read_regular_file
from ..core.errors import CheckFailed, InputError
from ..oci.referrers import find_referrers
from ..oci.remote import RegistryClient, parse_reference
from ..signing.cosign import verify_attestation, verify_signature
from ..signing.keys import load_public_key
from .report import AuditReport

SBOM_LIMIT = 64 * 1024 * 1024
REFERRER_LIMIT = 64  # SPDX artifacts of one image fetched to look for the file


def _items(value: object) -> list[Any]:
    """An SPDX array as read: anything else (a number where the list goes) holds nothing."""
    return value if isinstance(value, list) else []


def _image_package(document: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for package in _items(document.get("packages")):
        if isinstance(package, dict) and package.get("SPDXID") == IMAGE_ID:
            return package
    return None


def _sha256_values(package: Mapping[str, Any]) -> set[str]:
    return {
        str(item.get("checksumValue"))
        for item in _items(package.get("checksums"))
        if isinstance(item, dict) and item.get("algorithm") == "SHA256"
    }


def sbom_checks(report: AuditReport, sbom_path: str, *, receipt: Mapping[str, Any] | None,
                lock_digests: Mapping[str, str] | None) -> bytes | None:
    """The file checks; returns the file's bytes when it could be read."""
    try:
        content = read_regular_file(sbom_path, "an SPDX JSON document", SBOM_LIMIT)
        document = parse_json(content, sbom_path)
    except InputError as exc:
        report.add("sbom.document", ERROR, exc.message)
        return None
    image = _image_package(document) if isinstance(document, dict) else None
    if not isinstance(document, dict) or document.get("spdxVersion") != SPDX_VERSION or image is None:
        report.add("sbom.document", FAIL, f"{sbom_path}: expected an {SPDX_VERSION} document with the package {IMAGE_ID}")
        return content
    packages = [p for p in _items(document.get("packages")) if isinstance(p, dict)]
    report.add("sbom.document", PASS, f"{sbom_path}: {SPDX_VERSION}, {len(packages)} packages")
    manifest = report.manifest_digest
    if manifest is None:
        report.add("sbom.subject", SKIP, "the audit found no manifest digest to compare with")
    elif manifest.removeprefix("sha256:") in _sha256_values(image):
        report.add("sbom.subject", PASS, f"the SBOM's image package is the manifest {manifest}")
    else:
        report.add("sbom.subject", FAIL, f"{sbom_path}: {IMAGE_ID} has SHA256 {sorted(_sha256_values(image))}, "
                   f"the image is {manifest}", manifest)
    if receipt is not None:
        recorded = receipts.byproduct(receipt, receipts.SBOM)
        expected = recorded.get("digest", {}).get("sha256") if isinstance(recorded, dict) else None
        found = sha256_digest(content)
        if expected is None:
            report.add("sbom.receipt", FAIL, f"the receipt records no {receipts.SBOM} byproduct")
        elif found == f"sha256:{expected}":
            report.add("sbom.receipt", PASS, f"sha256 of the SBOM is the receipt's {found}")
        else:
            report.add("sbom.receipt", FAIL, f"{sbom_path}: sha256 {found}, the receipt records sha256:{expected}", found)
    if lock_digests is not None:
        checksums: set[str] = set()
        versions: set[str] = set()
        for package in packages:
            checksums |= _sha256_values(package)
            versions.add(str(package.get("versionInfo", "")))
        missing = []
        for name, digest in sorted(lock_digests.items()):
            kind, _, value = digest.partition(":")
            present = value in checksums if kind == "sha256" else value in versions
            if not present:
                missing.append(name)
        if missing:
            report.add("sbom.inputs", FAIL, f"{len(missing)} of {len(lock_digests)} lock inputs are not in the SBOM: "
                       f"{', '.join(missing[:10])}{' …' if len(missing) > 10 else ''}")
        else:
            report.add("sbom.inputs", PASS, f"all {len(lock_digests)} lock inputs are SBOM packages with their hashes")
    return content


def registry_checks(report: AuditReport, target: str, *, insecure: bool, key_path: str | None,
                    sbom_content: bytes | None) -> None:
    """The referrer and (with a key) the signature checks of a ``docker://`` target."""
    manifest = report.manifest_digest
    reference = parse_reference(target)
    if manifest is None:
        report.add("sbom.referrer", SKIP, "no manifest digest")
        return
    client = RegistryClient(reference.registry, insecure=insecure)
    try:
        found = find_referrers(client, reference.repository, manifest, SPDX_MEDIA_TYPE)
        if not found:
            report.add("sbom.referrer", FAIL, f"{reference.registry}/{reference.repository}: no {SPDX_MEDIA_TYPE} "
                       f"artifact refers to {manifest}", manifest)
        else:
            detail = f"{len(found)} SPDX artifact(s) refer to {manifest}"
            if sbom_content is not None:
                ours = sha256_digest(sbom_content)
                layers = []
                for descriptor in found[:REFERRER_LIMIT]:
                    artifact = client.get_manifest(reference.repository, str(descriptor.get("digest"))).document()
                    given = artifact.get("subject")
                    subject: dict[str, Any] = given if isinstance(given, dict) else {}
                    if subject.get("digest") == manifest:
                        layers += [str(layer.get("digest")) for layer in artifact.get("layers") or []
                                   if isinstance(layer, dict)]
                if ours in layers:
                    report.add("sbom.referrer", PASS, f"{detail}; one carries the SBOM file ({ours})")
                else:
                    report.add("sbom.referrer", FAIL, f"{detail}, none carries the SBOM file ({ours})", ours)
            else:
                report.add("sbom.referrer", PASS, detail)
    except (CheckFailed, InputError) as exc:
        report.add("sbom.referrer", FAIL if isinstance(exc, CheckFailed) else ERROR, exc.message)
    if key_path is None:
        return
    try:
        key = load_public_key(key_path)
    except InputError as exc:
        report.add("signature", ERROR, exc.message)
        return
    for name, verify in (("signature", verify_signature), ("attestation", verify_attestation)):
        try:
            outcome = verify(client, reference, key, manifest)
        except CheckFailed as failure:
            report.add(failure.check_id or name, FAIL, failure.message, manifest)
        except InputError as exc:
            report.add(name, ERROR, exc.message)
        else:
            report.add(name, PASS, outcome[0] if isinstance(outcome, tuple) else outcome)
