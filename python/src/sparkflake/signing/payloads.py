"""What is signed: cosign's simple-signing payload, and in-toto statements in DSSE envelopes.

Formats as cosign 2.5.0 writes and reads them (checked by running it against a registry:
``cosign sign`` pushed exactly this payload, ``cosign attest`` exactly this envelope):

- simple signing: ``{"critical":{"identity":{"docker-reference":REPO},"image":
  {"docker-manifest-digest":DIGEST},"type":"cosign container image signature"},
  "optional":null}``; REPO is the repository without tag or digest;
- DSSE (github.com/secure-systems-lab/dsse, protocol.md): the signature is over
  ``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``; the envelope is
  ``{"payloadType":…,"payload":base64,"signatures":[{"keyid":"","sig":base64}]}``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.canonical_json import canonical_json_bytes, go_struct_json_bytes
from ..core.digest import is_digest
from ..core.documents import parse_json_object
from ..core.errors import CheckFailed

SIMPLE_SIGNING_TYPE = "cosign container image signature"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
# cosign attest writes Statement v0.1; v1 (our receipt's) is read as well.
IN_TOTO_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
# cosign's --type slsaprovenance1: its attestation.GenerateStatement builds this case with
# generateSLSAProvenanceStatementSLSA1, and `cosign attest --type slsaprovenance1` (2.5.0,
# run here) wrote this predicateType into the statement and the layer annotation.
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"


@dataclass(frozen=True)
class SimpleSigning:
    """What a cosign signature payload binds: the reference signed and the manifest digest."""

    docker_reference: str
    manifest_digest: str


def simple_signing_payload(docker_reference: str, manifest_digest: str) -> bytes:
    """The bytes cosign signs for an image (its Go struct's field order, compact)."""
    document = {
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": SIMPLE_SIGNING_TYPE,
        },
        "optional": None,
    }
    return go_struct_json_bytes(document)


def parse_simple_signing(content: bytes, where: str) -> SimpleSigning:
    document = parse_json_object(content, where, refusal=CheckFailed, check_id="signature.payload")
    critical = document.get("critical")
    if not isinstance(critical, dict):
        raise CheckFailed(f"{where}: $.critical: expected an object", check_id="signature.payload")
    if critical.get("type") != SIMPLE_SIGNING_TYPE:
        raise CheckFailed(f"{where}: $.critical.type: expected {SIMPLE_SIGNING_TYPE!r}, got {critical.get('type')!r}",
                          check_id="signature.payload")
    image = critical.get("image")
    digest = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    if not is_digest(digest):
        raise CheckFailed(f"{where}: $.critical.image.docker-manifest-digest: expected sha256:<hex>, got {digest!r}",
                          check_id="signature.payload")
    identity = critical.get("identity")
    reference = identity.get("docker-reference") if isinstance(identity, dict) else None
    if not isinstance(reference, str):
        raise CheckFailed(f"{where}: $.critical.identity.docker-reference: expected a string",
                          check_id="signature.payload")
    return SimpleSigning(reference, str(digest))


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a DSSE signature is over."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def dsse_envelope(payload_type: str, payload: bytes, signature: bytes) -> bytes:
    document = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode()}],
    }
    return go_struct_json_bytes(document)


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[bytes, ...]


def parse_dsse(content: bytes, where: str) -> Envelope:
    document = parse_json_object(content, where, refusal=CheckFailed, check_id="attestation.envelope")
    payload_type = document.get("payloadType")
    if not isinstance(payload_type, str):
        raise CheckFailed(f"{where}: $.payloadType: expected a string", check_id="attestation.envelope")
    signatures = document.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise CheckFailed(f"{where}: $.signatures: expected a non-empty list", check_id="attestation.envelope")
    decoded = []
    try:
        payload = base64.b64decode(str(document.get("payload")), validate=True)
        for position, entry in enumerate(signatures):
            if not isinstance(entry, dict) or not isinstance(entry.get("sig"), str):
                raise CheckFailed(f"{where}: $.signatures[{position}].sig: expected a base64 string",
                                  check_id="attestation.envelope")
            decoded.append(base64.b64decode(entry["sig"], validate=True))
    except binascii.Error as exc:
        raise CheckFailed(f"{where}: base64: {exc}", check_id="attestation.envelope") from None
    return Envelope(payload_type, payload, tuple(decoded))


def provenance_statement(receipt: Mapping[str, Any], subject_name: str, manifest_digest: str,
                         where: str) -> bytes:
    """The receipt's SLSA provenance as the statement to attest, its subject the image
    manifest digest under the registry name; a receipt of another image is refused."""
    if receipt.get("predicateType") != SLSA_PROVENANCE_V1 or not isinstance(receipt.get("predicate"), dict):
        raise CheckFailed(f"{where}: $.predicateType: expected {SLSA_PROVENANCE_V1!r} with a predicate object",
                          check_id="attestation.receipt")
    subjects = receipt.get("subject")
    digests = {
        f"sha256:{item['digest'].get('sha256')}"
        for item in subjects or []
        if isinstance(item, dict) and isinstance(item.get("digest"), dict)
    } if isinstance(subjects, list) else set()
    if manifest_digest not in digests:
        raise CheckFailed(
            f"{where}: $.subject: the receipt is of {', '.join(sorted(digests)) or 'no digest'}, "
            f"not of the image {manifest_digest}",
            check_id="attestation.subject",
        )
    statement = {
        "_type": IN_TOTO_STATEMENT_TYPES[0],
        "subject": [{"name": subject_name, "digest": {"sha256": manifest_digest.removeprefix("sha256:")}}],
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": receipt["predicate"],
    }
    try:
        return canonical_json_bytes(statement)
    except UnicodeEncodeError as exc:  # JSON's \ud800 escape reads as a lone surrogate, which no UTF-8 holds
        raise CheckFailed(f"{where}: $.predicate: holds {exc.object[exc.start:exc.end]!r}, a lone surrogate that "
                          "no UTF-8 statement can carry", check_id="attestation.receipt") from None


def statement_subject_digests(statement: Mapping[str, Any], where: str) -> set[str]:
    if statement.get("_type") not in IN_TOTO_STATEMENT_TYPES:
        raise CheckFailed(f"{where}: $._type: expected one of {', '.join(IN_TOTO_STATEMENT_TYPES)}, "
                          f"got {statement.get('_type')!r}", check_id="attestation.statement")
    subjects = statement.get("subject")
    if not isinstance(subjects, list):
        raise CheckFailed(f"{where}: $.subject: expected a list", check_id="attestation.statement")
    found = set()
    for item in subjects:
        digest = item.get("digest") if isinstance(item, dict) else None
        if isinstance(digest, dict) and isinstance(digest.get("sha256"), str):
            found.add(f"sha256:{digest['sha256']}")
    return found


def parse_statement(content: bytes, where: str) -> dict[str, Any]:
    return parse_json_object(content, where, refusal=CheckFailed, check_id="attestation.statement")
