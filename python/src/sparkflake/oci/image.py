"""ImageSpec -> layers, config, manifest, index -> BuiltImage -> the output formats.

The config, manifest and index bytes are made once here (canonical JSON) and the same
bytes go into the layout, the oci-archive and the docker-archive (one combined file
unless a layer is zstd); so the manifest digest is known before any push and the config
digest (the image ID) is the same in every format.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.counts import ascii_count
from ..core.digest import sha256_digest
from ..core.errors import InputError
from ..core.progress import ProgressCallback
from ..core.timestamps import rfc3339
from . import media_types
from .archive import DOCKER_ARCHIVE, OCI_ARCHIVE, CombinedArchiveWriter, write_archives
from .blob_store import BlobStore
from .compression import Compression
from .config import ImageConfig, RuntimeConfig
from .digests_file import DIGESTS_FILE, digests_record
from .image_model import BuiltImage
from .layer import DEFAULT_SOURCE_DATE_EPOCH, Layer, LayerOptions, build_layer
from .layer_cache import LayerCache
from .layer_input import LayerInput
from .layout import LayoutWriter, write_oci_layout
from .manifest import ImageIndex, ImageManifest, layer_descriptor
from .media_types import TAG_PATTERN
from .types import Descriptor, Platform

_REPOSITORY = re.compile(
    r"(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)


@dataclass(frozen=True)
class LayerSpec:
    """One layer to build: its input, and the ``created_by`` of its history entry."""

    layer_input: LayerInput
    created_by: str


@dataclass(frozen=True)
class ImageSpec:
    """An image to build: its layers in order, and the config, tag and annotations around them."""

    layers: tuple[LayerSpec, ...]
    platform: Platform = Platform()
    runtime: RuntimeConfig = RuntimeConfig()
    compression: Compression = Compression("gzip")
    source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH
    tag: str = "latest"
    repository: str = "localhost/sparkflake"
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.layers:
            raise InputError("an image needs at least one layer")
        if not TAG_PATTERN.fullmatch(self.tag):
            raise InputError(f"tag {self.tag!r} is not a valid tag ([A-Za-z0-9_][A-Za-z0-9_.-]*)")
        if not _REPOSITORY.fullmatch(self.repository):
            raise InputError(f"repository name {self.repository!r} is not a valid reference name")


def default_source_date_epoch() -> int:
    text = os.environ.get("SOURCE_DATE_EPOCH")
    if text is None or text == "":
        return DEFAULT_SOURCE_DATE_EPOCH
    epoch = ascii_count(text)
    if epoch is None:
        raise InputError(f"SOURCE_DATE_EPOCH={text!r} is not a non-negative integer (ASCII digits)")
    return epoch


def build_image(
    spec: ImageSpec,
    store: BlobStore,
    cache: LayerCache | None = None,
    progress: ProgressCallback | None = None,
    on_layer: Callable[[Layer], None] | None = None,
) -> BuiltImage:
    """Every layer (from the cache or made), then config, manifest and index.
    ``on_layer`` is called with each layer as soon as it exists, in order (the archive
    writer copies its blob meanwhile)."""
    options = LayerOptions(spec.compression, spec.source_date_epoch)
    layers: list[Layer] = []
    count = len(spec.layers)
    for position, layer_spec in enumerate(spec.layers, start=1):
        label = f"layer {position}/{count}"

        def layer_progress(done: int, total: int, what: str, label: str = label) -> None:
            if progress is not None:
                progress(done, total, f"{label} {what}")

        layers.append(build_layer(layer_spec.layer_input, options, store, cache, layer_progress))
        if on_layer is not None:
            on_layer(layers[-1])
    return assemble_image(spec, layers, store)


def assemble_image(spec: ImageSpec, layers: list[Layer], store: BlobStore) -> BuiltImage:
    """Config, manifest and index for already built layers (the composition stage may
    build layers itself with ``build_layer`` and call this)."""
    diff_ids = [layer.diff_id for layer in layers]
    config_bytes = ImageConfig(
        spec.platform,
        spec.runtime,
        diff_ids,
        [layer_spec.created_by for layer_spec in spec.layers],
        spec.source_date_epoch,
    ).to_bytes()
    config_digest = sha256_digest(config_bytes)
    annotations = {
        media_types.CREATED_ANNOTATION: rfc3339(spec.source_date_epoch),
        **spec.annotations,
    }
    manifest_bytes = ImageManifest(
        Descriptor(media_types.OCI_CONFIG, config_digest, len(config_bytes)),
        [layer_descriptor(layer) for layer in layers],
        annotations,
    ).to_bytes()
    manifest_digest = sha256_digest(manifest_bytes)
    index_bytes = ImageIndex(
        [
            Descriptor(
                media_types.OCI_MANIFEST,
                manifest_digest,
                len(manifest_bytes),
                annotations={
                    media_types.REF_NAME_ANNOTATION: spec.tag,
                    media_types.IMAGE_NAME_ANNOTATION: f"{spec.repository}:{spec.tag}",
                },
                platform=spec.platform,
            )
        ]
    ).to_bytes()
    return BuiltImage(
        platform=spec.platform,
        repository=spec.repository,
        tag=spec.tag,
        source_date_epoch=spec.source_date_epoch,
        layers=tuple(layers),
        config_bytes=config_bytes,
        manifest_bytes=manifest_bytes,
        index_bytes=index_bytes,
        store=store,
    )


@dataclass(frozen=True)
class ImageOutputs:
    layout: Path
    oci_archive: Path
    docker_archive: Path
    digests_file: Path


def write_image_outputs(
    image: BuiltImage,
    out_dir: str | os.PathLike[str],
    combined: CombinedArchiveWriter | None = None,
    layout_writer: LayoutWriter | None = None,
) -> ImageOutputs:
    """``out_dir``/oci (layout), oci-archive.tar, docker-archive.tar, digests.json.
    Without zstd layers the two archives are one combined file, hard-linked; ``combined``
    is that archive already being written at ``out_dir``/oci-archive.tar and
    ``layout_writer`` the layout being written at ``out_dir``/oci (each finished here), or
    None (written here)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    layout = layout_writer.finish(image) if layout_writer is not None else write_oci_layout(image, out / "oci")
    archives = write_archives(image, out / "oci-archive.tar", out / "docker-archive.tar", combined)
    oci_archive = archives[OCI_ARCHIVE]
    docker_archive = archives[DOCKER_ARCHIVE]
    digests_file = out / DIGESTS_FILE
    # compact here: `sparkflake image build`'s file has always been canonical JSON
    write_bytes_atomic(digests_file, canonical_json_bytes(digests_record(image)) + b"\n")
    return ImageOutputs(layout, oci_archive, docker_archive, digests_file)
