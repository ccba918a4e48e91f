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
from pathlib import Path

from ..core.canonical_json import canonical_json_bytes
from ..core.digest import digest_hex, sha256_digest
from ..core.documents import parse_json, read_regular_file
from ..core.errors import CheckFailed, InputError
from . import media_types

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
        "config": {"mediaType": media_types.OCI_EMPTY, "digest": sha256_digest(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)},
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


ARTIFACT_LIMIT = 16 * 1024 * 1024  # an SBOM of a few hundred packages is a few hundred KiB


def _layout_blob(layout: Path, digest: str, limit: int) -> bytes:
    path = layout / "blobs" / "sha256" / digest_hex(digest)
    content = read_regular_file(path, f"the blob {digest}", limit)
    if sha256_digest(content) != digest:
        raise CheckFailed(f"{path}: content hashes to {sha256_digest(content)}, not {digest}",
                          check_id="layout.blob-digest")
    return content


def read_referring_artifact(layout: Path, manifest_digest: str, subject_digest: str) -> ReferringArtifact:
    """The artifact manifest ``manifest_digest`` of an OCI layout, its blobs checked, and
    refused unless its subject is ``subject_digest``."""
    where = f"{layout} artifact {manifest_digest}"
    manifest_bytes = _layout_blob(layout, manifest_digest, ARTIFACT_LIMIT)
    document = parse_json(manifest_bytes, where)
    subject = document.get("subject") if isinstance(document, dict) else None
    if not isinstance(subject, dict) or subject.get("digest") != subject_digest:
        found = subject.get("digest") if isinstance(subject, dict) else None
        raise CheckFailed(f"{where}: $.subject.digest is {found!r}, the image is {subject_digest}",
                          check_id="artifact.subject")
    layers = document.get("layers")
    config = document.get("config")
    artifact_type = document.get("artifactType")
    if (not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict)
            or not isinstance(config, dict) or config.get("mediaType") != media_types.OCI_EMPTY
            or not isinstance(artifact_type, str)):
        raise InputError(f"{where}: expected an artifactType, the empty config and one layer")
    blob_digest = str(layers[0].get("digest"))
    blob = _layout_blob(layout, blob_digest, ARTIFACT_LIMIT)
    annotations = document.get("annotations") if isinstance(document.get("annotations"), dict) else {}
    return ReferringArtifact(artifact_type, manifest_bytes, manifest_digest, blob, blob_digest, annotations)
