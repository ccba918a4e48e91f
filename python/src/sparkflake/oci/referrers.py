"""Artifacts about an image (its SBOM) pushed to and found in a registry.

Where the registry has the OCI 1.1 referrers API, pushing a manifest with a ``subject`` is
enough: the registry lists it under ``/v2/<repo>/referrers/<digest>``. Where it has not
(distribution 2.x answers 404 there), the pusher maintains the fallback tag
``sha256-<hex>``: an index of the referrers, the existing entries kept (distribution-spec
1.1, "Pushing Manifests with Subject"). Finding reads whichever the registry offers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import CheckFailed
from . import media_types
from .artifact import ReferringArtifact, fallback_tag, referrers_index
from .remote import RegistryClient


@dataclass(frozen=True)
class PushedReferrer:
    manifest_digest: str
    artifact_type: str
    via: str  # "referrers-api" or "fallback-tag"
    tag: str | None = None

    def as_record(self) -> dict[str, Any]:
        return {"manifest": self.manifest_digest, "artifact_type": self.artifact_type, "via": self.via,
                "tag": self.tag}


def _fallback_descriptors(client: RegistryClient, repository: str, tag: str) -> list[dict[str, Any]]:
    if client.head_manifest(repository, tag) is None:
        return []
    index = client.get_manifest(repository, tag).document()
    if index.get("mediaType") != media_types.OCI_INDEX or not isinstance(index.get("manifests"), list):
        raise CheckFailed(f"{client.registry}/{repository}:{tag}: the referrers fallback tag holds no image index",
                          check_id="referrers.fallback")
    return [entry for entry in index["manifests"] if isinstance(entry, dict)]


def push_referrer(client: RegistryClient, repository: str, artifact: ReferringArtifact, subject_digest: str) -> PushedReferrer:
    for blob in artifact.blobs().values():
        client.push_small_blob(repository, blob)
    client.push_manifest(repository, artifact.manifest_digest, artifact.manifest_bytes, media_types.OCI_MANIFEST)
    if client.referrers(repository, subject_digest) is not None:
        return PushedReferrer(artifact.manifest_digest, artifact.artifact_type, "referrers-api")
    tag = fallback_tag(subject_digest)
    descriptors = [*_fallback_descriptors(client, repository, tag), artifact.descriptor()]
    client.push_manifest(repository, tag, referrers_index(descriptors), media_types.OCI_INDEX)
    return PushedReferrer(artifact.manifest_digest, artifact.artifact_type, "fallback-tag", tag)


def find_referrers(client: RegistryClient, repository: str, subject_digest: str,
                   artifact_type: str | None = None) -> list[dict[str, Any]]:
    """Descriptors of the manifests that refer to ``subject_digest`` (of ``artifact_type``)."""
    index = client.referrers(repository, subject_digest)
    if index is not None:
        entries = [entry for entry in index.get("manifests") or [] if isinstance(entry, dict)]
    else:
        entries = _fallback_descriptors(client, repository, fallback_tag(subject_digest))
    return [entry for entry in entries if artifact_type is None or entry.get("artifactType") == artifact_type]
