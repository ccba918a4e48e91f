"""Stage 5 of a build: what the top (composition) layer holds besides the overlay: the labels,
the in-image receipt (SLSA provenance of the composition), ``/etc/sparkflake/*``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..core.canonical_json import readable_json_bytes
from ..core.digest import sha256_file
from ..core.records import record_to_dict
from ..core.timestamps import rfc3339
from ..lock.pins import DebPin, GitPin, SdistPin, WheelPin
from ..oci.layer_input import LayerInput, TreeSource
from ..profile.model import Profile
from . import generated, receipt
from .assembly import Assembly, source_packages_document_of
from .composition import Composition
from .python_env import DEFAULT_PREFIX

LICENSES = "Apache-2.0"


DEFAULT_ENV = (
    f"PATH={DEFAULT_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"VIRTUAL_ENV={DEFAULT_PREFIX}",
    "LANG=C.UTF-8",
    "PYTHONDONTWRITEBYTECODE=1",
)


@dataclass(frozen=True)
class PreparedTop:
    labels: Mapping[str, str]
    in_image_receipt: Mapping[str, Any]
    in_image_receipt_bytes: bytes
    profile_bytes: bytes
    top_input: LayerInput
    base_digest: str
    resolved: tuple[receipt.ResolvedDependency, ...]


def resolved_dependencies(composition: Composition, assembly: Assembly) -> tuple[receipt.ResolvedDependency, ...]:
    role_of = {pin.name: role for role, pin in composition.roles.items()}
    dependencies: list[receipt.ResolvedDependency] = []
    pins: list[DebPin | WheelPin | SdistPin | GitPin] = [*composition.debs, *composition.wheels, composition.source,
                       *(source for _role, _wheel, source in composition.package_sources)]
    for pin in sorted(pins, key=lambda p: (p.kind, p.name)):
        annotations: dict[str, Any] = {"kind": pin.kind}
        if pin.name in role_of:
            annotations["role"] = role_of[pin.name]
        version = getattr(pin, "version", None)
        if version:
            annotations["version"] = version
        dependencies.append(
            receipt.ResolvedDependency(
                name=pin.name,
                uri=pin.urls[0] if pin.urls else "",
                digest=(
                    {"gitCommit": pin.rev, "gitTree": pin.tree}
                    if isinstance(pin, GitPin)
                    else {"sha256": pin.sha256}
                ),
                annotations=annotations,
            )
        )
    dependencies.append(
        receipt.ResolvedDependency(
            name=f"patch-set:{composition.patch_set_name}",
            uri="",
            digest={"sha256": composition.patch_set.patch_set_sha256},
            annotations={"kind": "patch-set", "patches": [p.name for p in composition.patch_set.patches]},
        )
    )
    return tuple(dependencies)


def claim_records(profile: Profile, fetched_git: Sequence[GitPin] = ()) -> list[dict[str, Any]]:
    """The profile's claims as receipt records. A git claim whose commit and tree are those
    of a git input this build fetched and checked (and whose source sha256, if it states
    one, the input pins and the build checked) is recorded as ``verified``."""
    bound = {(pin.rev, pin.tree): pin for pin in fetched_git}
    records = []
    for claim in profile.claims:
        record: dict[str, Any] = {
            "name": claim.name,
            "kind": claim.kind,
            "subject": claim.subject,
            "status": claim.status,
            "source": claim.source,
        }
        for key in ("rev", "tree", "source_sha256", "sha256", "reference", "manifest_digest", "config_digest"):
            value = getattr(claim, key)
            if value is not None:
                record[key] = value
        pin = None
        if claim.kind == "git" and claim.rev is not None and claim.tree is not None:
            pin = bound.get((claim.rev, claim.tree))
        if pin is not None and claim.source_sha256 in (None, pin.source_sha256):
            record["status"] = "verified"
            record["verifiedBy"] = pin.name
        records.append(record)
    return records


def prepare_top(
    composition: Composition,
    assembly: Assembly,
    *,
    lower_diff_ids: Sequence[str],
    base_digest: str,
    compression: Mapping[str, Any],
    source_date_epoch: int,
) -> PreparedTop:
    """The top layer's generated files, labels and in-image receipt over the lower layers
    (``lower_diff_ids``) and the OS base alone as an image (``base_digest``, its manifest
    digest, a label)."""
    profile = composition.profile
    lower_trees = assembly.lower_layers()
    role_sha = {role: getattr(pin, "sha256", "") for role, pin in composition.roles.items()}
    source = assembly.source_identity
    facts = generated.LabelFacts(
        profile_name=profile.name,
        status=profile.status,
        served_model_name=profile.served_model_name,
        cache_root=profile.cache_root,
        jit_root=profile.jit_root,
        source_url=str(source["uri"]),
        revision=str(source["rev"]) if source["kind"] == "git" else f"sha256:{source['sha256']}",
        version=str(source["version"]),
        created=rfc3339(source_date_epoch),
        licenses=LICENSES,
        base_digest=base_digest,
        role_sha256=role_sha,
        vllm_source_identity=(
            f"git:{source['uri']}@{source['rev']}:tree:{source['tree']}"
            if source["kind"] == "git"
            else f"sdist:{source['filename']}:sha256:{source['sha256']}"
        ),
        nccl_library_sha256=assembly.nccl_library_sha256,
        patch_set_sha256=composition.patch_set.patch_set_sha256,
        retained_native_sha256=receipt.sha256_hex(assembly.retained_native_bytes),
        overlay_sha256=receipt.sha256_hex(assembly.overlay_bytes),
    )
    labels = generated.composition_labels(facts, profile.labels)
    resolved = resolved_dependencies(composition, assembly)
    profile_document = record_to_dict(profile)
    profile_bytes = readable_json_bytes(profile_document)
    byproducts = [
        {
            "name": receipt.RETAINED_NATIVE,
            "uri": f"file://{generated.RETAINED_NATIVE_PATH}",
            "digest": {"sha256": receipt.sha256_hex(assembly.retained_native_bytes)},
            "mediaType": "application/json",
        },
        {
            "name": receipt.OVERLAY,
            "uri": f"file://{generated.OVERLAY_PATH}",
            "digest": {"sha256": receipt.sha256_hex(assembly.overlay_bytes)},
            "mediaType": "application/json",
        },
        {
            "name": receipt.PATCH_SET,
            "digest": {"sha256": composition.patch_set.patch_set_sha256},
            "annotations": composition.patch_set.identity(),
        },
        {
            "name": "profile",
            "uri": f"file://{generated.PROFILE_PATH}",
            "digest": {"sha256": receipt.sha256_hex(profile_bytes)},
            "mediaType": "application/json",
        },
    ]
    source_packages = None
    provenance: dict[str, Any] = {}
    if assembly.package_overlays:
        document = source_packages_document_of(assembly)
        source_packages = readable_json_bytes(document)
        # which files came from which source, per package (the lists: source-packages.json)
        provenance["sourcePackages"] = [
            {"package": entry["package"], "source": entry["source"],
             "filesFromSource": len(entry["files_from_source"]), "filesFromWheel": len(entry["files_from_wheel"])}
            for entry in document["packages"]
        ]
        byproducts.append({
            "name": "source-packages",
            "uri": f"file://{generated.SOURCE_PACKAGES_PATH}",
            "digest": {"sha256": receipt.sha256_hex(source_packages)},
            "mediaType": "application/json",
        })
    predicate = receipt.provenance_predicate(
        external_parameters={
            "profile": profile.name,
            "platform": profile.platform,
            "compression": dict(compression),
            "source_date_epoch": source_date_epoch,
            "locks": {
                path.name: sha256_file(path) for path in composition.lock_paths
            },
        },
        internal_parameters={
            "status": profile.status,
            "labels": labels,
            "entrypoint": list(generated.ENTRYPOINT),
            "env": list(DEFAULT_ENV),
            "layers": [tree.name for tree in lower_trees] + ["composition"],
            "upstreamClaims": claim_records(profile, composition.git_pins()),
            "patchedSource": assembly.overlay["patched_source"],
            **provenance,
        },
        resolved_dependencies=resolved,
        byproducts=byproducts,
        builder_version=__version__,
    )
    in_image = receipt.in_image_statement(lower_diff_ids=list(lower_diff_ids), predicate=predicate)
    in_image_bytes = readable_json_bytes(in_image)
    top_input = _top_input(assembly, in_image_bytes, profile_bytes, source_packages)
    return PreparedTop(labels, in_image, in_image_bytes, profile_bytes, top_input, base_digest, resolved)


def _top_input(assembly: Assembly, in_image_bytes: bytes, profile_bytes: bytes, source_packages: bytes | None) -> LayerInput:
    files = generated.generated_files(
        receipt=in_image_bytes,
        profile_document=profile_bytes,
        retained_native=assembly.retained_native_bytes,
        overlay=assembly.overlay_bytes,
        source_packages=source_packages,
    )
    deleted = [*assembly.overlay_deletions, *(path for overlay in assembly.package_overlays for path in overlay.deletions)]
    deletions = tuple(f"{assembly.site_packages}/{path}" for path in deleted)
    sources = (TreeSource(str(assembly.overlay_tree), assembly.site_packages),) if any(assembly.overlay_tree.iterdir()) else ()
    return LayerInput(sources=sources, files=files, deletions=deletions)
