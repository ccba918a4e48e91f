"""What the build writes itself: the entrypoint, ``/etc/sparkflake/*`` files, labels.

Labels live in the image config, so they cannot name the config digest (nor the manifest
digest); everything else that identifies the composition is here: the OCI annotations
keys (source, revision, version, created, licenses, base.digest) and ``org.sparkflake.*``
(profile, status, each identity-bearing input, the patch set, both manifests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..oci.layer_input import GeneratedFile

# The launcher supplies only `vllm serve` arguments (seeds: "Entrypoint: vllm serve").
ENTRYPOINT = ("vllm", "serve")

ETC_DIR = "/etc/sparkflake"
RECEIPT_PATH = f"{ETC_DIR}/receipt.json"
PROFILE_PATH = f"{ETC_DIR}/profile.json"
RETAINED_NATIVE_PATH = f"{ETC_DIR}/retained-native.json"
OVERLAY_PATH = f"{ETC_DIR}/source-overlay.json"
SOURCE_PACKAGES_PATH = f"{ETC_DIR}/source-packages.json"  # only when packages come from git sources

OCI = "org.opencontainers.image"
SPARKFLAKE = "org.sparkflake"

# label key -> profile role whose input's sha256 it carries
ROLE_LABELS = {
    f"{SPARKFLAKE}.input.vllm-wheel.sha256": "vllm_wheel",
    f"{SPARKFLAKE}.input.b12x.sha256": "b12x",
    f"{SPARKFLAKE}.input.sparkcache.sha256": "sparkcache",
    f"{SPARKFLAKE}.input.fastsafetensors.sha256": "fastsafetensors",
    f"{SPARKFLAKE}.input.torch.sha256": "torch",
    f"{SPARKFLAKE}.input.nccl.sha256": "nccl",
}
VLLM_SOURCE_LABEL = f"{SPARKFLAKE}.input.vllm-source"
NCCL_LIBRARY_LABEL = f"{SPARKFLAKE}.nccl.library.sha256"
PATCH_SET_LABEL = f"{SPARKFLAKE}.patch-set.sha256"
RETAINED_NATIVE_LABEL = f"{SPARKFLAKE}.retained-native.sha256"
OVERLAY_LABEL = f"{SPARKFLAKE}.source-overlay.sha256"
PROFILE_LABEL = f"{SPARKFLAKE}.profile"
STATUS_LABEL = f"{SPARKFLAKE}.status"

REQUIRED_LABELS = (
    f"{OCI}.source",
    f"{OCI}.revision",
    f"{OCI}.version",
    f"{OCI}.created",
    f"{OCI}.licenses",
    f"{OCI}.base.digest",
    PROFILE_LABEL,
    STATUS_LABEL,
    *ROLE_LABELS,
    VLLM_SOURCE_LABEL,
    NCCL_LIBRARY_LABEL,
    PATCH_SET_LABEL,
    RETAINED_NATIVE_LABEL,
    OVERLAY_LABEL,
    f"{SPARKFLAKE}.served-model-name",
    f"{SPARKFLAKE}.cache-root",
    f"{SPARKFLAKE}.jit-root",
)


@dataclass(frozen=True)
class LabelFacts:
    """Everything the labels say, gathered by the build before the top layer is made."""

    profile_name: str
    status: str
    served_model_name: str
    cache_root: str
    jit_root: str
    source_url: str
    revision: str
    version: str
    created: str
    licenses: str
    base_digest: str
    role_sha256: Mapping[str, str]  # role -> input sha256
    vllm_source_identity: str
    nccl_library_sha256: str
    patch_set_sha256: str
    retained_native_sha256: str
    overlay_sha256: str


def composition_labels(facts: LabelFacts, profile_labels: Mapping[str, str]) -> dict[str, str]:
    """The config labels: the profile's own labels plus the computed ones (which win only
    if equal: a profile may not override a computed identity)."""
    computed = {
        f"{OCI}.source": facts.source_url,
        f"{OCI}.revision": facts.revision,
        f"{OCI}.version": facts.version,
        f"{OCI}.created": facts.created,
        f"{OCI}.licenses": facts.licenses,
        f"{OCI}.base.digest": facts.base_digest,
        PROFILE_LABEL: facts.profile_name,
        STATUS_LABEL: facts.status,
        VLLM_SOURCE_LABEL: facts.vllm_source_identity,
        NCCL_LIBRARY_LABEL: facts.nccl_library_sha256,
        PATCH_SET_LABEL: facts.patch_set_sha256,
        RETAINED_NATIVE_LABEL: facts.retained_native_sha256,
        OVERLAY_LABEL: facts.overlay_sha256,
        f"{SPARKFLAKE}.served-model-name": facts.served_model_name,
        f"{SPARKFLAKE}.cache-root": facts.cache_root,
        f"{SPARKFLAKE}.jit-root": facts.jit_root,
    }
    for key, role in ROLE_LABELS.items():
        computed[key] = facts.role_sha256[role]
    labels = dict(profile_labels)
    for key, value in computed.items():
        if key in labels and labels[key] != value:
            from ..core.errors import InputError

            raise InputError(
                f"profile labels.\"{key}\" = {labels[key]!r} conflicts with the computed value {value!r}"
            )
        labels[key] = value
    return dict(sorted(labels.items()))


def missing_labels(labels: Mapping[str, str]) -> list[str]:
    return [key for key in REQUIRED_LABELS if not labels.get(key)]


def generated_files(
    *,
    receipt: bytes,
    profile_document: bytes,
    retained_native: bytes,
    overlay: bytes,
    source_packages: bytes | None = None,
) -> tuple[GeneratedFile, ...]:
    files = (
        GeneratedFile(RECEIPT_PATH, receipt, 0o644),
        GeneratedFile(PROFILE_PATH, profile_document, 0o644),
        GeneratedFile(RETAINED_NATIVE_PATH, retained_native, 0o644),
        GeneratedFile(OVERLAY_PATH, overlay, 0o644),
    )
    if source_packages is None:
        return files
    return (*files, GeneratedFile(SOURCE_PACKAGES_PATH, source_packages, 0o644))
