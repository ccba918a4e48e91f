"""Signatures and attestations in a registry, stored as cosign stores them.

For an image manifest ``sha256:<hex>`` in REPO, cosign keeps (docs: "Signature
Specification", and what cosign 2.5.0 pushed to a distribution registry here):

- ``REPO:sha256-<hex>.sig``: an OCI image manifest, one layer per signature, each layer the
  simple-signing payload (media type ``application/vnd.dev.cosign.simplesigning.v1+json``)
  with its base64 signature in the ``dev.cosignproject.cosign/signature`` annotation;
- ``REPO:sha256-<hex>.att``: one layer per attestation, each a DSSE envelope (media type
  ``application/vnd.dsse.envelope.v1+json``), annotations ``predicateType`` and an empty
  ``dev.cosignproject.cosign/signature``.

Both manifests have cosign's placeholder config (zero times, the layers as diff_ids). A new
signature is added to the layers already there (as cosign does), so a second key's
signature does not remove the first. Verification raises CheckFailed with a check id:
``signature.present``, ``signature.valid`` (a payload not signed by the key),
``signature.payload``, ``signature.subject`` (signed, but for another digest), and the
``attestation.*`` counterparts, ``attestation.type`` for the predicate type.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.canonical_json import canonical_json_bytes
from ..core.digest import digest_hex
from ..core.errors import CheckFailed
from ..core.records import field_record
from ..oci.media_types import OCI_CONFIG, OCI_MANIFEST
from ..oci.remote import Reference, RegistryClient
from . import payloads
from .keys import PrivateKey, PublicKey

SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PREDICATE_TYPE_ANNOTATION = "predicateType"
PAYLOAD_LIMIT = 16 * 1024 * 1024  # an attestation carries the whole receipt
LAYER_LIMIT = 256  # signatures (or attestations) of one image read at most: each is a request


def signature_tag(manifest_digest: str) -> str:
    return f"sha256-{digest_hex(manifest_digest)}.sig"


def attestation_tag(manifest_digest: str) -> str:
    return f"sha256-{digest_hex(manifest_digest)}.att"


def docker_reference(reference: Reference) -> str:
    """The identity cosign signs: the repository, no tag or digest."""
    return f"{reference.registry}/{reference.repository}"


def resolve_digest(client: RegistryClient, reference: Reference) -> str:
    """The manifest digest REF names now (a tag is looked up; a digest must exist)."""
    found = client.head_manifest(reference.repository, reference.reference)
    if found is None:
        raise CheckFailed(f"{reference}: no such image in {reference.registry}", check_id="registry.not-found")
    # a registry need not say the digest on a HEAD (a SHOULD of the distribution spec): then
    # the manifest's own bytes say it
    digest = found[0] or client.get_manifest(reference.repository, reference.reference).digest
    if reference.digest and digest != reference.digest:
        raise CheckFailed(f"{reference}: the registry answers digest {digest}", check_id="registry.manifest-digest")
    return digest


def _placeholder_config(layer_digests: list[str]) -> bytes:
    # cosign's static config: no platform, zero times, the layers as diff_ids
    return canonical_json_bytes({
        "architecture": "",
        "config": {},
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": layer_digests},
    })


def _existing_layers(client: RegistryClient, repository: str, tag: str) -> list[dict[str, Any]]:
    if client.head_manifest(repository, tag) is None:
        return []
    layers = client.get_manifest(repository, tag).document().get("layers")
    return [layer for layer in layers if isinstance(layer, dict)] if isinstance(layers, list) else []


def _push_layer(client: RegistryClient, repository: str, tag: str, content: bytes, media_type: str,
                annotations: Mapping[str, str]) -> TaggedManifest:
    """Add one layer to the manifest under ``tag`` (kept once if already there); returns
    the tag and the digest of the manifest pushed."""
    digest = client.push_small_blob(repository, content)
    layer = {"mediaType": media_type, "size": len(content), "digest": digest, "annotations": dict(annotations)}
    layers = [item for item in _existing_layers(client, repository, tag) if item != layer]
    layers.append(layer)
    config = _placeholder_config([str(item.get("digest")) for item in layers])
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": client.push_small_blob(repository, config)},
        "layers": layers,
    }
    return TaggedManifest(tag, client.push_manifest(repository, tag, canonical_json_bytes(manifest), OCI_MANIFEST))


@dataclass(frozen=True)
class TaggedManifest:
    """A signature's or an attestation's manifest as pushed: the tag cosign finds it by and
    the manifest's digest."""

    tag: str
    manifest: str

    def as_record(self) -> dict[str, Any]:
        return field_record(self)


@dataclass(frozen=True)
class SignResult:
    manifest_digest: str
    signature: TaggedManifest
    attestation: TaggedManifest | None = None

    def as_record(self) -> dict[str, Any]:
        return {
            "manifest_digest": self.manifest_digest,
            "signature": self.signature.as_record(),
            "attestation": self.attestation.as_record() if self.attestation else None,
        }


def sign_image(client: RegistryClient, reference: Reference, key: PrivateKey,
               receipt: Mapping[str, Any] | None = None, receipt_where: str = "") -> SignResult:
    """Sign the manifest digest REF names; with a receipt, attest its provenance too (the
    receipt must be of this digest)."""
    digest = resolve_digest(client, reference)
    identity = docker_reference(reference)
    statement = None
    if receipt is not None:
        statement = payloads.provenance_statement(receipt, identity, digest, receipt_where)
    payload = payloads.simple_signing_payload(identity, digest)
    signature = base64.b64encode(key.sign(payload)).decode()
    signed = _push_layer(client, reference.repository, signature_tag(digest), payload, SIMPLE_SIGNING_MEDIA_TYPE,
                         {SIGNATURE_ANNOTATION: signature})
    if statement is None:
        return SignResult(digest, signed)
    envelope = payloads.dsse_envelope(
        payloads.IN_TOTO_PAYLOAD_TYPE, statement, key.sign(payloads.pae(payloads.IN_TOTO_PAYLOAD_TYPE, statement))
    )
    attested = _push_layer(client, reference.repository, attestation_tag(digest), envelope, DSSE_MEDIA_TYPE,
                           {SIGNATURE_ANNOTATION: "", PREDICATE_TYPE_ANNOTATION: payloads.SLSA_PROVENANCE_V1})
    return SignResult(digest, signed, attested)


def _layers_of(client: RegistryClient, reference: Reference, tag: str, media_type: str, check: str) -> list[dict[str, Any]]:
    where = f"{reference.registry}/{reference.repository}:{tag}"
    try:  # one GET: its 404 is the absent tag (a HEAD first would ask the registry twice)
        manifest = client.get_manifest(reference.repository, tag)
    except CheckFailed as failure:
        if failure.check_id != "registry.not-found":
            raise
        what = "signature" if check == "signature" else "attestation"
        raise CheckFailed(f"{where}: the image has no {what} (no such tag)", check_id=f"{check}.present") from None
    layers = manifest.document().get("layers")
    found = [
        layer for layer in (layers if isinstance(layers, list) else [])
        if isinstance(layer, dict) and layer.get("mediaType") == media_type
    ]
    if not found:
        raise CheckFailed(f"{where}: no {media_type} layer", check_id=f"{check}.present")
    if len(found) > LAYER_LIMIT:
        raise CheckFailed(f"{where}: {len(found)} layers, more than the {LAYER_LIMIT} read",
                          check_id=f"{check}.present")
    return found


def _blob(client: RegistryClient, reference: Reference, layer: Mapping[str, Any]) -> bytes:
    # read_blob checks the bytes against the digest (registry.blob-digest) as they arrive
    return client.read_blob(reference.repository, str(layer.get("digest")), limit=PAYLOAD_LIMIT)


def _first_success(attempts: list[CheckFailed | str], what: str) -> str:
    """What the layer that verified says, or the most telling failure: a later stage of
    the checks (subject) says more than an earlier one (signature)."""
    for attempt in attempts:
        if isinstance(attempt, str):
            return attempt
    order = ("subject", "type", "statement", "payload", "valid", "envelope")
    failures = [a for a in attempts if isinstance(a, CheckFailed)]
    failures.sort(key=lambda f: next((i for i, n in enumerate(order) if str(f.check_id).endswith(n)), len(order)))
    if len(failures) == 1:
        raise failures[0]
    raise CheckFailed(f"none of {len(failures)} {what} verified; {failures[0].message}",
                      check_id=failures[0].check_id)


def verify_signature(client: RegistryClient, reference: Reference, key: PublicKey,
                     digest: str | None = None) -> str:
    """A signature by ``key`` over a simple-signing payload that names the image's digest;
    returns what verified."""
    digest = digest or resolve_digest(client, reference)
    tag = signature_tag(digest)
    attempts: list[CheckFailed | str] = []
    for layer in _layers_of(client, reference, tag, SIMPLE_SIGNING_MEDIA_TYPE, "signature"):
        where = f"{reference.registry}/{reference.repository}:{tag} layer {layer.get('digest')}"
        try:
            payload = _blob(client, reference, layer)
            given = layer.get("annotations")
            annotations: dict[str, Any] = given if isinstance(given, dict) else {}
            try:
                signature = base64.b64decode(str(annotations.get(SIGNATURE_ANNOTATION, "")), validate=True)
            except binascii.Error:
                raise CheckFailed(f"{where}: {SIGNATURE_ANNOTATION}: not base64", check_id="signature.valid") from None
            if not signature or not key.verify(signature, payload):
                raise CheckFailed(f"{where}: the signature does not verify with {key.source}",
                                  check_id="signature.valid")
            signed = payloads.parse_simple_signing(payload, where)
            if signed.manifest_digest != digest:
                raise CheckFailed(f"{where}: signed for {signed.manifest_digest}, the image is {digest}",
                                  check_id="signature.subject")
            attempts.append(f"{tag}: signed by {key.source} for {digest}")
        except CheckFailed as failure:
            attempts.append(failure)
    return _first_success(attempts, "signatures")


def verify_attestation(client: RegistryClient, reference: Reference, key: PublicKey,
                       digest: str | None = None,
                       predicate_type: str = payloads.SLSA_PROVENANCE_V1) -> tuple[str, dict[str, Any]]:
    """A DSSE envelope signed by ``key`` holding an in-toto statement of ``predicate_type``
    whose subject is the image's digest; returns the statement too."""
    digest = digest or resolve_digest(client, reference)
    tag = attestation_tag(digest)
    attempts: list[CheckFailed | str] = []
    statement: dict[str, Any] = {}
    for layer in _layers_of(client, reference, tag, DSSE_MEDIA_TYPE, "attestation"):
        where = f"{reference.registry}/{reference.repository}:{tag} layer {layer.get('digest')}"
        try:
            envelope = payloads.parse_dsse(_blob(client, reference, layer), where)
            message = payloads.pae(envelope.payload_type, envelope.payload)
            if not any(key.verify(signature, message) for signature in envelope.signatures):
                raise CheckFailed(f"{where}: no envelope signature verifies with {key.source}",
                                  check_id="attestation.valid")
            if envelope.payload_type != payloads.IN_TOTO_PAYLOAD_TYPE:
                raise CheckFailed(f"{where}: payloadType {envelope.payload_type!r}, expected "
                                  f"{payloads.IN_TOTO_PAYLOAD_TYPE!r}", check_id="attestation.statement")
            candidate = payloads.parse_statement(envelope.payload, where)
            subjects = payloads.statement_subject_digests(candidate, where)
            if candidate.get("predicateType") != predicate_type:
                raise CheckFailed(f"{where}: predicateType {candidate.get('predicateType')!r}, expected "
                                  f"{predicate_type!r}", check_id="attestation.type")
            if digest not in subjects:
                raise CheckFailed(f"{where}: the statement's subject is {', '.join(sorted(subjects)) or 'empty'}, "
                                  f"the image is {digest}", check_id="attestation.subject")
            statement = candidate
            attempts.append(f"{tag}: {predicate_type} signed by {key.source}, subject {digest}")
        except CheckFailed as failure:
            attempts.append(failure)
    verified = _first_success(attempts, "attestations")
    return verified, statement


def verify_image_signing(client: RegistryClient, reference: Reference, key: PublicKey, digest: str, *,
                         attestation: bool = True) -> list[tuple[str, str | CheckFailed]]:
    """``("signature", what verified or its CheckFailed)``, then the same for the
    attestation unless ``attestation`` is False. Each mostly waits on the registry (two
    requests), so the attestation is checked in a second thread meanwhile; any other error
    of either is raised here."""
    import threading

    outcomes: dict[str, str | CheckFailed | BaseException] = {}

    def attempt(name: str, check: Any) -> None:  # noqa: ANN401 - a verifier returning what verified
        try:
            outcomes[name] = check()
        except CheckFailed as failure:
            outcomes[name] = failure
        except BaseException as error:  # noqa: BLE001 - raised in the calling thread
            outcomes[name] = error

    second = None
    if attestation:
        second = threading.Thread(
            target=attempt, args=("attestation", lambda: verify_attestation(client, reference, key, digest)[0]),
            name="verify-attestation", daemon=True,
        )
        second.start()
    attempt("signature", lambda: verify_signature(client, reference, key, digest))
    if second is not None:
        second.join()
    results: list[tuple[str, str | CheckFailed]] = []
    for name in ("signature", "attestation") if attestation else ("signature",):
        outcome = outcomes[name]
        if isinstance(outcome, BaseException) and not isinstance(outcome, CheckFailed):
            raise outcome
        results.append((name, outcome))
    return results
