"""Re-derive every digest of an image from its bytes and check each reference.

A combined archive (oci-archive+docker-archive) is verified as both: the OCI chain, and
its docker ``manifest.json`` naming the same config and layer blobs in the same order.

Every blob is streamed once: hashed as stored (blob digest, size) and, for layers,
decompressed and hashed again (diffID). The report names each digest by its kind.
Mismatches raise ``CheckFailed`` naming the blob and both digests; a blob that cannot be
read or decompressed raises ``InputError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..core.digest import chain_id, sha256_digest
from ..core.errors import CheckFailed, InputError
from ..core.progress import BytesProgress, ProgressCallback
from . import media_types
from .entry_safety import EntrySafety
from .layer_scan import scan_layer
from .reader import COMBINED_FORMAT, DockerArchiveView, ImageReader
from .types import BlobRef, platform_text

READ_CHUNK = 1 << 20



@dataclass(frozen=True)
class LayerReport:
    digest: str
    diff_id: str
    size: int
    media_type: str
    compression: str
    uncompressed_size: int | None


@dataclass(frozen=True)
class ImageReport:
    format: str
    path: str
    ref_name: str | None
    repo_tags: tuple[str, ...]
    index_digest: str | None
    manifest_digest: str | None
    manifest_media_type: str | None
    config_digest: str
    chain_id: str | None
    platform: str
    labels: dict[str, str]
    layers: tuple[LayerReport, ...]
    layers_verified: bool
    docker_manifest_digest: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    def as_record(self) -> dict[str, object]:
        record: dict[str, Any] = {
            "format": self.format,
            "path": self.path,
            "ref_name": self.ref_name,
            "repo_tags": list(self.repo_tags),
            "digests": {
                "index": self.index_digest,
                "manifest": self.manifest_digest,
                "config": self.config_digest,
                "image_id": self.config_digest,
                "chain_id": self.chain_id,
            },
            "manifest_media_type": self.manifest_media_type,
            "platform": self.platform,
            "labels": self.labels,
            "annotations": self.annotations,
            "layers_verified": self.layers_verified,
            "layers": [
                {
                    "digest": layer.digest,
                    "diff_id": layer.diff_id,
                    "size": layer.size,
                    "media_type": layer.media_type,
                    "compression": layer.compression,
                    "uncompressed_size": layer.uncompressed_size,
                }
                for layer in self.layers
            ],
        }
        if self.docker_manifest_digest is not None:
            record["digests"]["docker_archive_manifest"] = self.docker_manifest_digest
        return record


def _check_document(reader: ImageReader, ref: BlobRef, raw: bytes) -> str:
    actual = sha256_digest(raw)
    where = reader.files.describe(ref.name)
    if ref.size is not None and len(raw) != ref.size:
        raise CheckFailed(
            f"{ref.role} {ref.digest or ref.name}: {where} is {len(raw)} bytes, "
            f"the descriptor says {ref.size}",
            check_id="oci.blob-size",
        )
    if ref.digest is not None and actual != ref.digest:
        raise CheckFailed(
            f"{ref.role} blob {where} has digest {actual}, expected {ref.digest}",
            check_id="oci.blob-digest",
        )
    return actual


def verify_image(
    reader: ImageReader,
    *,
    verify_layers: bool = True,
    progress: ProgressCallback | None = None,
) -> ImageReport:
    manifest_digest = None
    manifest = reader.manifest
    if reader.manifest_ref is not None and reader.manifest_bytes is not None:
        manifest_digest = _check_document(reader, reader.manifest_ref, reader.manifest_bytes)
    config_digest = _check_document(reader, reader.config_ref, reader.config_bytes)
    config = reader.config
    config_where = reader.files.describe(reader.config_ref.name)
    if reader.format == "docker-archive":
        _check_docker_config_name(reader, config_digest)
    if reader.docker_view is not None:
        _check_docker_view(reader, reader.docker_view)
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
        raise InputError(f"{config_where}: rootfs.diff_ids: expected a list of digests")
    if len(diff_ids) != len(reader.layer_refs):
        raise CheckFailed(
            f"{config_where}: rootfs.diff_ids lists {len(diff_ids)} layers, the "
            f"{'manifest' if manifest else 'manifest.json'} {len(reader.layer_refs)}",
            check_id="oci.layer-count",
        )
    total = sum(ref.size or 0 for ref in reader.layer_refs)
    done = 0
    layer_reports = []
    safety = EntrySafety()
    for position, ref in enumerate(reader.layer_refs):
        if verify_layers:
            layer = _verify_layer(reader, ref, diff_ids[position], done, total, progress, safety)
        else:
            if reader.files.size(ref.name) is None:
                reader.open_blob(ref)  # raises the missing-blob error
            layer = LayerReport(
                ref.digest or "", diff_ids[position], ref.size or 0, ref.media_type, "", None
            )
        done += ref.size or 0
        layer_reports.append(layer)
    docker_manifest_digest = None
    if reader.format in ("docker-archive", COMBINED_FORMAT) and verify_layers:
        docker_manifest_digest = sha256_digest(
            containers_image_docker_archive_manifest(reader.config_bytes, layer_reports)
        )
    annotations = (manifest or {}).get("annotations") or {}
    labels = (config.get("config") or {}).get("Labels") or {}
    platform = platform_text(config)
    return ImageReport(
        format=reader.format,
        path=str(reader.path),
        ref_name=reader.ref_name,
        repo_tags=tuple(reader.repo_tags),
        index_digest=sha256_digest(reader.index_bytes) if reader.index_bytes is not None else None,
        manifest_digest=manifest_digest,
        manifest_media_type=(manifest or {}).get("mediaType")
        or (reader.manifest_ref.media_type if reader.manifest_ref else None),
        config_digest=config_digest,
        chain_id=chain_id(diff_ids) if diff_ids else None,
        platform=platform,
        labels=dict(labels),
        layers=tuple(layer_reports),
        layers_verified=verify_layers,
        docker_manifest_digest=docker_manifest_digest,
        annotations=dict(annotations),
    )


def _check_docker_config_name(reader: ImageReader, config_digest: str) -> None:
    name = reader.config_ref.name
    stem = name.rsplit("/", 1)[-1].removesuffix(".json")
    if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem):
        if f"sha256:{stem}" != config_digest:
            raise CheckFailed(
                f"{reader.files.describe(name)}: config is named after sha256:{stem} "
                f"but its digest is {config_digest}",
                check_id="oci.blob-digest",
            )


def _check_docker_view(reader: ImageReader, view: DockerArchiveView) -> None:
    """The docker manifest.json of a combined archive must name exactly the blobs the
    OCI manifest references, else docker/podman and OCI tools would load different
    images from the same file."""
    oci_where = (
        f"{reader.files.describe('index.json')} -> manifest "
        f"{reader.manifest_ref.digest if reader.manifest_ref else '?'}"
    )
    if view.config_name != reader.config_ref.name:
        raise CheckFailed(
            f"{view.where}: [{view.position}].Config names member {view.config_name}, but "
            f"{oci_where} names config {reader.config_ref.name}",
            check_id="oci.combined-config",
        )
    oci_names = [ref.name for ref in reader.layer_refs]
    for position in range(max(len(view.layer_names), len(oci_names))):
        docker_name = view.layer_names[position] if position < len(view.layer_names) else None
        oci_name = oci_names[position] if position < len(oci_names) else None
        if docker_name != oci_name:
            raise CheckFailed(
                f"{view.where}: [{view.position}].Layers[{position}] names member "
                f"{docker_name or '(none)'}, but {oci_where} layers[{position}] names "
                f"{oci_name or '(none)'} ({len(view.layer_names)} vs {len(oci_names)} layers)",
                check_id="oci.combined-layers",
            )


def _verify_layer(
    reader: ImageReader,
    ref: BlobRef,
    expected_diff_id: str,
    done_before: int,
    total: int,
    progress: ProgressCallback | None,
    safety: EntrySafety,
) -> LayerReport:
    where = reader.files.describe(ref.name)

    tick = BytesProgress(progress, done_before, total, "verifying layers")
    with reader.open_blob(ref) as handle:
        scan = scan_layer(handle, on_bytes=tick, safety=safety)
    if scan.error is not None and scan.error.startswith("cannot read"):
        raise InputError(f"{where}: {scan.error}")
    size = scan.size
    uncompressed = scan.uncompressed_size
    decompress_error = scan.error
    blob_digest = scan.blob_digest
    if ref.size is not None and ref.digest is not None and size != ref.size:
        raise CheckFailed(
            f"{ref.role} {ref.digest}: {where} is {size} bytes, the descriptor says {ref.size}",
            check_id="oci.blob-size",
        )
    if ref.digest is not None and blob_digest != ref.digest:
        raise CheckFailed(
            f"{ref.role} blob {where} has digest {blob_digest}, expected {ref.digest}",
            check_id="oci.blob-digest",
        )
    if decompress_error is not None:
        raise InputError(f"{ref.role} blob {where}: {decompress_error}")
    diff_id = scan.diff_id
    if diff_id != expected_diff_id:
        raise CheckFailed(
            f"{ref.role} {ref.digest or where}: uncompressed digest (diffID) is {diff_id}, "
            f"the config says {expected_diff_id}",
            check_id="oci.layer-diff-id",
        )
    if scan.unsafe_entry is not None:
        raise CheckFailed(f"{ref.role} {ref.digest or where}: unsafe entry: {scan.unsafe_entry}", check_id="oci.layer-entries")
    return LayerReport(
        digest=ref.digest or blob_digest,
        diff_id=diff_id,
        size=size,
        media_type=ref.media_type,
        compression=scan.compression,
        uncompressed_size=uncompressed,
    )


def containers_image_docker_archive_manifest(
    config_bytes: bytes, layers: list[LayerReport]
) -> bytes:
    """The docker schema2 manifest that containers/image (skopeo, podman) derives for a
    docker-archive: layers by diffID with their uncompressed size, serialized as Go's
    encoding/json writes its struct (field order schemaVersion, mediaType, config,
    layers; no spaces). Its digest is what ``skopeo inspect docker-archive:…`` reports."""
    document = {
        "schemaVersion": 2,
        "mediaType": media_types.DOCKER_MANIFEST,
        "config": {
            "mediaType": media_types.DOCKER_CONFIG,
            "size": len(config_bytes),
            "digest": sha256_digest(config_bytes),
        },
        "layers": [
            {
                "mediaType": media_types.DOCKER_LAYER_GZIP,
                "size": layer.uncompressed_size,
                "digest": layer.diff_id,
            }
            for layer in layers
        ],
    }
    return json.dumps(document, separators=(",", ":")).encode("utf-8")
