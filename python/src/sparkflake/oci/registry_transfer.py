"""An OCI layout to and from a registry: push a layout digest-preserving (every blob and
manifest keeps its digest), pull an image into a layout with every byte verified
(``layout.StagedLayout``). The client itself is ``remote``, the registry medium."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.documents import read_regular_file
from ..core.errors import CheckFailed, InputError
from ..core.progress import ProgressCallback
from ..core.records import field_record
from .layout import StagedLayout
from .manifest import ImageIndex
from .media_types import INDEX_MEDIA_TYPES, OCI_MANIFEST, REF_NAME_ANNOTATION
from .remote import (
    MANIFEST_LIMIT,
    Manifest,
    Reference,
    RegistryClient,
    check_digest,
    descriptor_fields,
    image_blobs,
    json_object,
    select_platform,
)
from .types import Descriptor, Platform


# ---- push a layout, pull into a layout ---------------------------------------------------
@dataclass(frozen=True)
class PushResult:
    reference: str
    manifest_digest: str
    media_type: str
    pinned: str  # REGISTRY/REPOSITORY@DIGEST: what ranks pull
    blobs_pushed: tuple[str, ...]
    blobs_present: tuple[str, ...]

    def as_record(self) -> dict[str, Any]:
        return field_record(self)


def push_layout(client: RegistryClient, layout: Path, target: Reference,
                progress: ProgressCallback | None = None) -> PushResult:
    """Push the image an OCI layout's index.json names (its one entry, or the entry whose
    ref name is the target tag): blobs first, then our manifest bytes, then an index if the
    entry is one."""
    index = json_object(_read_layout_file(layout, "index.json"), f"{layout}/index.json")
    entries = index.get("manifests")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{layout}/index.json: no manifests")
    if len(entries) > 1:
        named = [e for e in entries if isinstance(e, dict)
                 and e.get("annotations", {}).get(REF_NAME_ANNOTATION) == target.tag]
        if len(named) != 1:
            raise InputError(f"{layout}/index.json: {len(entries)} manifests and none named {target.tag!r}")
        entries = named
    top_digest, top_type, _ = descriptor_fields(entries[0], f"{layout}/index.json manifests[0]")
    pushed: list[str] = []
    present: list[str] = []

    def push_image_manifest(digest: str, media_type: str, tag: str) -> None:
        content = _read_blob_file(layout, digest)
        manifest = json_object(content, f"{layout} {digest}")
        blobs = image_blobs(manifest, f"{layout} manifest {digest}")
        total = sum(size for _, _, size in blobs)
        done = 0
        for blob_digest, _, size in blobs:
            path = _blob_path(layout, blob_digest)
            if not path.is_file() or path.stat().st_size != size:
                raise InputError(f"{path}: missing or not {size} bytes, as manifest {digest} says")
            (pushed if client.push_blob(target.repository, blob_digest, size, path) else present).append(blob_digest)
            done += size
            if progress:
                progress(done, total, f"push {blob_digest[:19]}")
        client.push_manifest(target.repository, tag, content, media_type or OCI_MANIFEST)

    if top_type in INDEX_MEDIA_TYPES:
        content = _read_blob_file(layout, top_digest)
        child_index = json_object(content, f"{layout} {top_digest}")
        for position, child in enumerate(child_index.get("manifests") or []):
            child_digest, child_type, _ = descriptor_fields(child, f"{layout} {top_digest} manifests[{position}]")
            push_image_manifest(child_digest, child_type, child_digest)
        digest = client.push_manifest(target.repository, target.tag or top_digest, content, top_type)
    else:
        content = _read_blob_file(layout, top_digest)
        push_image_manifest(top_digest, top_type, target.tag or top_digest)
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
    if digest != top_digest:
        raise CheckFailed(f"{layout}: pushed manifest digest {digest} differs from the layout's {top_digest}",
                          check_id="registry.manifest-digest")
    pinned = f"{target.registry}/{target.repository}@{digest}"
    return PushResult(str(target), digest, top_type, pinned, tuple(pushed), tuple(present))


@dataclass(frozen=True)
class PullResult:
    reference: str
    manifest_digest: str
    config_digest: str  # the image ID in podman/docker stores
    bytes: int
    layout: str

    def as_record(self) -> dict[str, Any]:
        return {"reference": self.reference, "manifest_digest": self.manifest_digest,
                "config_digest": self.config_digest, "image_id": self.config_digest,
                "bytes": self.bytes, "layout": self.layout}


def resolve_manifest(client: RegistryClient, source: Reference, platform: Platform) -> tuple[Manifest, Manifest]:
    """(what the reference names, the image manifest for ``platform``): the same object
    twice when the reference names an image manifest, else the index and its entry."""
    top = client.get_manifest(source.repository, source.reference)
    if top.media_type not in INDEX_MEDIA_TYPES:
        return top, top
    descriptor = select_platform(top.document(), platform, f"{source}")
    digest, _, _ = descriptor_fields(descriptor, f"{source} platform manifest")
    manifest = client.get_manifest(source.repository, digest)
    if manifest.media_type in INDEX_MEDIA_TYPES:
        raise CheckFailed(f"{source}: platform entry {digest} is itself an index", check_id="registry.media-type")
    return top, manifest


def pull_to_layout(client: RegistryClient, source: Reference, layout: Path, platform: Platform,
                   progress: ProgressCallback | None = None) -> PullResult:
    """Fetch an image into an OCI layout directory, every byte verified; an index is
    resolved to the platform's manifest. The layout appears atomically."""
    _, manifest = resolve_manifest(client, source, platform)
    where = f"{source} manifest {manifest.digest}"
    blobs = image_blobs(manifest.document(), where)
    # a blob a manifest names twice (the same layer listed again) is fetched once
    sizes: dict[str, int] = {}
    for digest, _, size in blobs:
        if sizes.setdefault(digest, size) != size:
            raise CheckFailed(f"{where}: blob {digest} is listed with sizes {sizes[digest]} and {size}",
                              check_id="registry.blob-size")
    total = sum(sizes.values())
    fetched = 0
    with StagedLayout(layout) as staged:
        for digest, size in sizes.items():
            fetched += client.fetch_blob(source.repository, digest, staged.blob_path(digest), size=size)
            if progress:
                progress(fetched, total, source.repository)
        staged.write_blob(manifest.digest, manifest.content)
        annotations = {REF_NAME_ANNOTATION: source.tag} if source.tag else None
        staged.commit(ImageIndex([Descriptor(manifest.media_type, manifest.digest, len(manifest.content),
                                             annotations=annotations)]).to_bytes())
    return PullResult(str(source), manifest.digest, blobs[0][0], fetched, str(layout))


def _blob_path(layout: Path, digest: str) -> Path:
    check_digest(digest)
    return layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def _read_layout_file(layout: Path, name: str) -> bytes:
    return read_regular_file(layout / name, "an image document", MANIFEST_LIMIT)


def _read_blob_file(layout: Path, digest: str) -> bytes:
    path = _blob_path(layout, digest)
    content = _read_layout_file(path.parent, path.name)
    found = "sha256:" + hashlib.sha256(content).hexdigest()
    if found != digest:
        raise CheckFailed(f"{path}: content hashes to {found}, not {digest}", check_id="registry.layout-digest")
    return content
