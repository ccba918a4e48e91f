"""OCI 1.1 artifacts that refer to an image (an SBOM), and the referrers fallback index.

An artifact is an image manifest with ``artifactType``, the empty config
(``application/vnd.oci.empty.v1+json``, the two bytes ``{}``) and a ``subject``: the
descriptor of the image manifest it is about (image-spec 1.1, manifest.md, "Guidelines for
ReferringArtifact Usage"). A registry without the referrers API finds it through the fallback tag
``sha256-<hex of the subject>``, an image index listing every referrer's descriptor with its
``artifactType`` and annotations (distribution-spec 1.1, "Referrers Tag Schema").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import media_types
from .canonical_json import canonical_json_bytes
from .digests import digest_hex, sha256_digest

EMPTY_CONFIG_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
TITLE_ANNOTATION = "org.opencontainers.image.title"


@dataclass(frozen=True)
class ReferringArtifact:
    """An artifact manifest and the blobs it needs (the empty config and its one layer)."""

    artifact_type: str
    manifest_bytes: bytes
    manifest_digest: str
    blob: bytes
    blob_digest: str
    annotations: Mapping[str, str]

    def descriptor(self) -> dict[str, object]:
        """As a referrers index lists it."""
        descriptor: dict[str, object] = {
            "mediaType": media_types.OCI_MANIFEST,
            "digest": self.manifest_digest,
            "size": len(self.manifest_bytes),
            "artifactType": self.artifact_type,
        }
        if self.annotations:
            descriptor["annotations"] = dict(sorted(self.annotations.items()))
        return descriptor

    def blobs(self) -> dict[str, bytes]:
        return {sha256_digest(EMPTY_CONFIG): EMPTY_CONFIG, self.blob_digest: self.blob}


def referring_artifact(*, artifact_type: str, blob: bytes, title: str, subject_digest: str,
                       subject_size: int, annotations: Mapping[str, str] | None = None) -> ReferringArtifact:
    annotations = dict(annotations or {})
    blob_digest = sha256_digest(blob)
    document = {
        "schemaVersion": 2,
        "mediaType": media_types.OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_CONFIG_MEDIA_TYPE, "digest": sha256_digest(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)},
        "layers": [
            {"mediaType": artifact_type, "digest": blob_digest, "size": len(blob),
             "annotations": {TITLE_ANNOTATION: title}},
        ],
        "subject": {"mediaType": media_types.OCI_MANIFEST, "digest": subject_digest, "size": subject_size},
    }
    if annotations:
        document["annotations"] = dict(sorted(annotations.items()))
    manifest = canonical_json_bytes(document)
    return ReferringArtifact(artifact_type, manifest, sha256_digest(manifest), blob, blob_digest, annotations)


def fallback_tag(subject_digest: str) -> str:
    return f"sha256-{digest_hex(subject_digest)}"


def referrers_index(descriptors: Sequence[Mapping[str, object]]) -> bytes:
    """The fallback tag's index: each descriptor once, in the order first listed."""
    unique: list[Mapping[str, object]] = []
    for descriptor in descriptors:
        if all(existing.get("digest") != descriptor.get("digest") for existing in unique):
            unique.append(descriptor)
    return canonical_json_bytes(
        {"schemaVersion": 2, "mediaType": media_types.OCI_INDEX, "manifests": [dict(d) for d in unique]}
    )
