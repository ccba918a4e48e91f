"""Re-derive every digest of an image from its bytes and check each reference: the one
verifier. ``verify_image`` refuses the first difference (``image inspect``, fan-out, the
store); the audit builds on the same pieces (``stored_document``, ``read_layer``,
``config_diff_ids``, ``docker_view_difference``) and reports every difference.

A combined archive (oci-archive+docker-archive) is verified as both: the OCI chain, and
its docker ``manifest.json`` naming the same config and layer blobs in the same order.

Every blob is streamed once: hashed as stored (blob digest, size) and, for layers,
decompressed and hashed again (diffID). The report names each digest by its kind.
Mismatches raise ``CheckFailed`` naming the blob and both digests; a blob that cannot be
read or decompressed raises ``InputError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.canonical_json import go_struct_json_bytes
from ..core.digest import chain_id, sha256_digest
from ..core.errors import CheckFailed, InputError
from ..core.progress import BytesProgress, ProgressCallback
from ..core.records import field_record
from . import media_types
from .entry_safety import EntrySafety
from .image_model import digests_by_kind
from .layer_scan import LayerScan, scan_layer
from .reader import COMBINED_FORMAT, DockerArchiveView, ImageReader
from .stored_blob import StoredBlob, stored_document
from .types import BlobRef, platform_text


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
    layers_known: int = 0  # the first layers a verified run covered, not read (not in the record)
    run_keys: tuple[str, ...] = ()  # ``prefix_keys`` of the layers (none without digests; not in the record)
    # what the scans of the layers read found, when asked for their contents (not in the record)
    layer_scans: tuple[LayerScan, ...] = ()

    @property
    def layers_read(self) -> int:
        """The layers this verification read (``verify_layers``: all but the known ones)."""
        return len(self.layers) - self.layers_known if self.layers_verified else 0

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "format": self.format,
            "path": self.path,
            "ref_name": self.ref_name,
            "repo_tags": list(self.repo_tags),
            "digests": digests_by_kind(
                manifest=self.manifest_digest, index=self.index_digest, config=self.config_digest,
                chain_id=self.chain_id,
            ),
            "manifest_media_type": self.manifest_media_type,
            "platform": self.platform,
            "labels": self.labels,
            "annotations": self.annotations,
            "layers_verified": self.layers_verified,
            "layers": [field_record(layer) for layer in self.layers],
        }
        if self.docker_manifest_digest is not None:
            record["digests"]["docker_archive_manifest"] = self.docker_manifest_digest
        return record


@dataclass(frozen=True)
class StoredLayer:
    """A layer blob as stored: the blob beside its reference, and what one streaming pass
    over it found (None where it was not hashed: absent, or its size already differs)."""

    blob: StoredBlob
    scan: LayerScan | None


def read_layer(
    reader: ImageReader,
    ref: BlobRef,
    *,
    safety: EntrySafety,
    on_bytes: Callable[[int], None] | None = None,
    max_uncompressed_bytes: int | None = None,
    capture_paths: frozenset[str] = frozenset(),
    record_members: bool = False,
) -> StoredLayer:
    """Hash a layer as stored (digest, size) and uncompressed (diffID) in one pass; a blob
    whose stored size already differs from its descriptor's is not read."""
    where = reader.files.describe(ref.name)
    size = reader.files.size(ref.name)
    if size is None or (ref.size is not None and ref.digest is not None and size != ref.size):
        return StoredLayer(StoredBlob(ref, where, size, None), None)
    with reader.open_blob(ref) as handle:
        scan = scan_layer(
            handle,
            max_uncompressed_bytes=max_uncompressed_bytes,
            capture_paths=capture_paths,
            on_bytes=on_bytes,
            safety=safety,
            record_members=record_members,
        )
    return StoredLayer(StoredBlob(ref, where, scan.size, scan.blob_digest), scan)


def config_diff_ids(config: dict[str, Any]) -> list[str] | None:
    """The config's ``rootfs.diff_ids``, or None where it is not a list of strings."""
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
        return None
    return diff_ids


@dataclass(frozen=True)
class DockerViewDifference:
    """Where a combined archive's docker ``manifest.json`` entry and its OCI manifest name
    different members: the config, else the first layer position that differs."""

    view: DockerArchiveView
    oci_config: str
    oci_layers: tuple[str, ...]
    layer_position: int | None  # None: the config differs


def docker_view_difference(reader: ImageReader) -> DockerViewDifference | None:
    """docker/podman load what a combined archive's manifest.json names, OCI tools what
    index.json leads to: the two must be one image."""
    view = reader.docker_view
    if view is None:
        return None
    oci_layers = tuple(ref.name for ref in reader.layer_refs)
    if view.config_name != reader.config_ref.name:
        return DockerViewDifference(view, reader.config_ref.name, oci_layers, None)
    for position in range(max(len(view.layer_names), len(oci_layers))):
        docker_name = view.layer_names[position] if position < len(view.layer_names) else None
        oci_name = oci_layers[position] if position < len(oci_layers) else None
        if docker_name != oci_name:
            return DockerViewDifference(view, reader.config_ref.name, oci_layers, position)
    return None


class VerifiedPrefixes(Protocol):
    """What an earlier verification found of a first run of layers, by ``prefix_key``: the
    symlinks they leave (their entries were safe, each blob inflated to its diffID). A
    store of it is its caller's: trusted as the blobs beside it are."""

    def symlinks_after(self, key: str) -> dict[str, str] | None: ...

    def record(self, key: str, symlinks: dict[str, str]) -> None: ...


def prefix_keys(layers: Sequence[tuple[str, str]]) -> list[str]:
    """The key of each first run of layers, given as (blob digest, diffID) pairs: a sha256
    over the pairs, so a run is known only with the same blobs inflating to the same diffIDs
    in the same order (a layer's entries are safe or not given the symlinks below it)."""
    hasher, keys = hashlib.sha256(b"sparkflake verified layer prefix v1\n"), []
    for digest, diff_id in layers:
        hasher.update(f"{digest} {diff_id}\n".encode())
        keys.append(hasher.copy().hexdigest())
    return keys


def image_prefix_keys(layer_refs: Sequence[BlobRef], diff_ids: Sequence[str]) -> list[str] | None:
    """``prefix_keys`` of an image's layers and its config's diffIDs; None when a layer has
    no digest (a docker-archive names its layers by path: a run is known by digests only)."""
    if not all(ref.digest for ref in layer_refs):
        return None
    return prefix_keys([(ref.digest or "", diff_id) for ref, diff_id in zip(layer_refs, diff_ids, strict=True)])


def verify_image(
    reader: ImageReader,
    *,
    verify_layers: bool = True,
    progress: ProgressCallback | None = None,
    verified: VerifiedPrefixes | None = None,
    capture_paths: frozenset[str] = frozenset(),
    record_members: bool = False,
) -> ImageReport:
    """Every digest re-derived from the bytes; the first difference is refused. With
    ``verified``, the longest first run of layers it knows is not read again (its blobs'
    digests are then the caller's to vouch for), and each run verified now is recorded.

    Asked for the layers' contents (``capture_paths``, ``record_members``: as
    ``scan_layer`` takes them), the report keeps the scan of each layer read
    (``layer_scans``), so that a caller needs no second pass over a layer."""
    manifest_digest = None
    manifest = reader.manifest
    if reader.manifest_ref is not None and reader.manifest_bytes is not None:
        manifest_digest = _verified_document(reader, reader.manifest_ref, reader.manifest_bytes)
    config_digest = _verified_document(reader, reader.config_ref, reader.config_bytes)
    config = reader.config
    config_where = reader.files.describe(reader.config_ref.name)
    _refuse_docker_view_difference(reader)
    diff_ids = config_diff_ids(config)
    if diff_ids is None:
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
    scans = []
    keep_scans = bool(capture_paths) or record_members
    keys = image_prefix_keys(reader.layer_refs, diff_ids)
    if keys is None:
        keys, verified = [], None
    known, safety = _known_prefix(keys, verified) if verify_layers else (0, EntrySafety())
    for position, ref in enumerate(reader.layer_refs):
        if verify_layers and position >= known:
            tick = BytesProgress(progress, done, total, "verifying layers")
            stored = read_layer(reader, ref, safety=safety, on_bytes=tick, capture_paths=capture_paths,
                                record_members=record_members)
            layer, scan = _verified_layer(reader, ref, diff_ids[position], stored)
            if keep_scans:
                scans.append(scan)
            if verified is not None:
                verified.record(keys[position], safety.settled_symlinks())
        else:
            if reader.files.size(ref.name) is None:
                raise reader.missing_blob(ref)
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
        path=reader.location,
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
        layers_known=known,
        run_keys=tuple(keys),
        layer_scans=tuple(scans),
    )


def _known_prefix(keys: list[str], verified: VerifiedPrefixes | None) -> tuple[int, EntrySafety]:
    """How many first layers ``verified`` knows, and the check resumed after them."""
    if verified is None:
        return 0, EntrySafety()
    for count in range(len(keys), 0, -1):
        symlinks = verified.symlinks_after(keys[count - 1])
        if symlinks is not None:
            return count, EntrySafety(symlinks=symlinks)
    return 0, EntrySafety()


def _verified_document(reader: ImageReader, ref: BlobRef, raw: bytes) -> str:
    stored = stored_document(ref, raw, reader.files.describe(ref.name))
    stored.refuse_difference()
    return stored.digest or ""


def _refuse_docker_view_difference(reader: ImageReader) -> None:
    difference = docker_view_difference(reader)
    if difference is None:
        return
    view = difference.view
    oci_where = (
        f"{reader.files.describe('index.json')} -> manifest "
        f"{reader.manifest_ref.digest if reader.manifest_ref else '?'}"
    )
    position = difference.layer_position
    if position is None:
        raise CheckFailed(
            f"{view.where}: [{view.position}].Config names member {view.config_name}, but "
            f"{oci_where} names config {difference.oci_config}",
            check_id="oci.combined-config",
        )
    docker_name = view.layer_names[position] if position < len(view.layer_names) else None
    oci_name = difference.oci_layers[position] if position < len(difference.oci_layers) else None
    raise CheckFailed(
        f"{view.where}: [{view.position}].Layers[{position}] names member "
        f"{docker_name or '(none)'}, but {oci_where} layers[{position}] names "
        f"{oci_name or '(none)'} ({len(view.layer_names)} vs {len(difference.oci_layers)} layers)",
        check_id="oci.combined-layers",
    )


def _verified_layer(
    reader: ImageReader, ref: BlobRef, expected_diff_id: str, stored: StoredLayer
) -> tuple[LayerReport, LayerScan]:
    """The layer read as ``stored``, every difference from its references refused."""
    where = stored.blob.where
    if stored.blob.size is None:
        raise reader.missing_blob(ref)
    scan = stored.scan
    if scan is not None and scan.error is not None and scan.error.startswith("cannot read"):
        raise InputError(f"{where}: {scan.error}")
    stored.blob.refuse_difference()
    assert scan is not None  # read_layer hashes every blob whose size is not already refused
    if scan.error is not None:
        raise InputError(f"{ref.role} blob {where}: {scan.error}")
    if scan.diff_id != expected_diff_id:
        raise CheckFailed(
            f"{ref.role} {ref.digest or where}: uncompressed digest (diffID) is {scan.diff_id}, "
            f"the config says {expected_diff_id}",
            check_id="oci.layer-diff-id",
        )
    if scan.unsafe_entry is not None:
        raise CheckFailed(f"{ref.role} {ref.digest or where}: unsafe entry: {scan.unsafe_entry}", check_id="oci.layer-entries")
    return LayerReport(
        digest=ref.digest or scan.blob_digest,
        diff_id=scan.diff_id,
        size=scan.size,
        media_type=ref.media_type,
        compression=scan.compression,
        uncompressed_size=scan.uncompressed_size,
    ), scan


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
    return go_struct_json_bytes(document)
