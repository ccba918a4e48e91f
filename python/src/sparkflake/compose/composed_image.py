"""The image of a composition, built with the oci library: the lower layers from compose's
trees (layer cache: an unchanged tree is never re-tarred or re-compressed), the top layer,
config, manifest, full receipt and SBOM, and the output directory (layout, archives,
digests, receipt)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.atomic_write import write_bytes_atomic
from ..core.builder_identity import builder_identity
from ..core.canonical_json import readable_json_bytes
from ..core.errors import InputError
from ..core.progress import ProgressCallback
from ..core.timestamps import rfc3339
from ..lock.pins import Pin
from ..oci.archive import CombinedArchiveWriter, write_archives
from ..oci.artifact import ReferringArtifact, referring_artifact
from ..oci.blob_store import BlobStore
from ..oci.compression import Compression
from ..oci.config import RuntimeConfig
from ..oci.digests_file import DIGESTS_FILE, digests_record
from ..oci.image import ImageSpec, LayerSpec, assemble_image
from ..oci.image_model import BuiltImage
from ..oci.layer import Layer, LayerOptions, build_layer, cached_layers, record_by_fingerprint
from ..oci.layer_cache import LayerCache
from ..oci.layout import LayoutWriter, add_artifact_blobs, write_oci_layout
from ..oci.media_types import CREATED_ANNOTATION
from ..oci.types import Platform
from ..profile.model import Profile
from . import generated, receipt, sbom
from .assembly import Assembly, LayerTree, python_group, source_packages_document_of
from .composition import Composition
from .inputs import FetchedInputs
from .top_layer import DEFAULT_ENV, PreparedTop, prepare_top
from .verification import LinkResult

DEFAULT_REPOSITORY = "localhost/sparkflake"


@dataclass(frozen=True)
class ImageOptions:
    compression: Compression = Compression("gzip")
    source_date_epoch: int = 1
    repository: str = DEFAULT_REPOSITORY
    tag: str | None = None  # default: the profile name


def build_lower_layers(
    trees: Sequence[LayerTree],
    options: ImageOptions,
    store: BlobStore,
    layer_cache: LayerCache | None,
    progress: ProgressCallback | None = None,
    on_layer: Callable[[Layer], None] | None = None,
) -> list[Layer]:
    """One layer per lower tree; an unchanged tree is a layer-cache hit found by its input
    fingerprint (one lstat walk, see ``oci.layer_cache``). ``on_layer`` gets each layer
    as soon as it is made."""
    layer_options = LayerOptions(options.compression, options.source_date_epoch)
    built = []
    for tree in trees:
        def layer_progress(done: int, total: int, what: str, name: str = tree.name) -> None:
            if progress:
                progress(done, total, f"{name}: {what}")

        built.append(build_layer(tree.layer_input, layer_options, store, layer_cache, layer_progress))
        if on_layer is not None:
            on_layer(built[-1])
    return built


def cached_lower_layers(
    trees: Sequence[LayerTree], options: ImageOptions, store: BlobStore, layer_cache: LayerCache | None
) -> list[Layer]:
    """The first of ``trees`` whose layers the layer cache already holds (found by input
    fingerprint, nothing scanned or compressed), in order, up to the first it lacks."""
    if layer_cache is None:
        return []
    layer_options = LayerOptions(options.compression, options.source_date_epoch)
    records = []
    for tree in trees:
        record = record_by_fingerprint(tree.layer_input, layer_options, layer_cache)
        if record is None:
            break
        records.append(record)
    found: list[Layer] = []
    for layer in cached_layers(records, store):
        if layer is None:
            break
        found.append(layer)
    return found


class LowerLayers:
    """The layers below the top one, in order. Those the layer cache already holds (a
    rebuild: all of them) are taken as soon as compose has their trees, so the outputs
    start copying them early; the others are made after the overlay is planned, so a patch
    that does not apply is refused before any of them is compressed."""

    def __init__(self, options: ImageOptions, store: BlobStore, layer_cache: LayerCache | None,
                 on_layer: Callable[[Layer], None]) -> None:
        self.options, self.store, self.layer_cache, self.on_layer = options, store, layer_cache, on_layer
        self.layers: list[Layer] = []
        self._to_make: list[LayerTree] = []

    def take_cached(self, trees: Sequence[LayerTree]) -> None:
        cached = cached_lower_layers(trees, self.options, self.store, self.layer_cache)
        self.layers.extend(cached)
        for layer in cached:
            self.on_layer(layer)
        self._to_make.extend(trees[len(cached) :])

    def make_the_rest(self, progress: ProgressCallback | None) -> list[Layer]:
        self.layers.extend(
            build_lower_layers(self._to_make, self.options, self.store, self.layer_cache, progress, self.on_layer)
        )
        self._to_make = []
        return self.layers


def _platform(profile: Profile) -> Platform:
    platform = Platform.parse(profile.platform)
    if platform.architecture == "arm64" and not platform.variant:
        platform = Platform.parse("linux/arm64/v8")
    return platform


def _spec(profile: Profile, options: ImageOptions, layers: Sequence[LayerTree], runtime: RuntimeConfig) -> ImageSpec:
    return ImageSpec(
        layers=tuple(LayerSpec(tree.layer_input, tree.created_by) for tree in layers),
        platform=_platform(profile),
        runtime=runtime,
        compression=options.compression,
        source_date_epoch=options.source_date_epoch,
        tag=options.tag or profile.name,
        repository=options.repository,
    )


@dataclass(frozen=True)
class BuildResult:
    profile: str
    image: BuiltImage
    full_receipt: Mapping[str, Any]
    chain: tuple[LinkResult, ...]
    layer_names: tuple[str, ...]
    layers_from_cache: tuple[bool, ...]
    assembly: Assembly | None = None
    sbom_bytes: bytes | None = None  # OUT/sbom.spdx.json
    sbom_artifact: ReferringArtifact | None = None  # the SBOM as an OCI artifact whose subject is the image
    extra: Mapping[str, Any] = field(default_factory=dict)


def image_sbom(composition: Composition, fetched: FetchedInputs, image: BuiltImage,
               assembly: Assembly | None = None) -> tuple[bytes, ReferringArtifact]:
    """The SPDX SBOM of the image (compose.sbom) and the OCI artifact that carries it; both
    digests follow from the lock and the image, so they are known at build time. With the
    assembly, wheel licenses are read from the METADATA files it installed."""
    pins: list[Pin] = [*composition.debs, *composition.wheels, composition.source]
    layer_of = {pin.name: "os-base" for pin in composition.debs}
    layer_of.update({pin.name: python_group(pin.name) for pin in composition.wheels})
    layer_of[composition.source.name] = "composition"
    installed: dict[str, Path] = {}
    if assembly is not None:
        site = assembly.site_packages.lstrip("/")
        for wheel in composition.wheels:
            tree = assembly.python_trees.get(layer_of[wheel.name])
            if tree is not None:
                installed[wheel.name] = tree / site / sbom.dist_info_name(wheel) / "METADATA"
    document = sbom.sbom_document(
        profile_name=composition.profile.name,
        image=sbom.ImageIdentity(image.repository, image.tag, image.manifest_digest, image.platform.architecture),
        pins=pins,
        source_date_epoch=image.source_date_epoch,
        tool_version=__version__,
        licenses=sbom.stated_licenses(pins, fetched.paths, installed),
        layer_of=layer_of,
        roles={pin.name: role for role, pin in composition.roles.items()},
        patch_set=(f"patch-set:{composition.patch_set_name}", composition.patch_set.patch_set_sha256),
        source_name=composition.source.name,
    )
    content = readable_json_bytes(document)
    artifact = referring_artifact(
        artifact_type=sbom.SPDX_MEDIA_TYPE, blob=content, title=SBOM_FILE,
        subject_digest=image.manifest_digest, subject_size=len(image.manifest_bytes),
        annotations={CREATED_ANNOTATION: rfc3339(image.source_date_epoch)},
    )
    return content, artifact


def prepare_top_over_layers(
    composition: Composition, assembly: Assembly, lower: Sequence[Layer], options: ImageOptions, store: BlobStore
) -> PreparedTop:
    """``compose.top_layer.prepare_top`` over the made lower layers; its ``base.digest``
    label is the manifest digest of the OS base layer alone as an image."""
    base_image = assemble_image(
        _spec(composition.profile, options, assembly.lower_layers()[:1], RuntimeConfig()), [lower[0]], store
    )
    return prepare_top(
        composition,
        assembly,
        lower_diff_ids=[layer.diff_id for layer in lower],
        base_digest=base_image.manifest_digest,
        compression=options.compression.as_record(),
        source_date_epoch=options.source_date_epoch,
    )


def finish(
    composition: Composition,
    fetched: FetchedInputs,
    assembly: Assembly,
    lower: Sequence[Layer],
    prepared: PreparedTop,
    chain: Sequence[LinkResult],
    *,
    options: ImageOptions,
    store: BlobStore,
    layer_cache: LayerCache | None,
) -> BuildResult:
    profile = composition.profile
    top_tree = LayerTree("composition", prepared.top_input,
                         "sparkflake: vLLM source overlay, anchored patches, generated files", (assembly.overlay_tree,))
    top = build_layer(prepared.top_input, LayerOptions(options.compression, options.source_date_epoch), store, layer_cache)
    layers = [*lower, top]
    runtime = RuntimeConfig(
        env=DEFAULT_ENV,
        entrypoint=generated.ENTRYPOINT,
        labels=prepared.labels,
        working_dir="/",
    )
    trees = [*assembly.lower_layers(), top_tree]
    image = assemble_image(_spec(profile, options, trees, runtime), layers, store)
    full = receipt.full_statement(
        prepared.in_image_receipt,
        image_name=f"{image.repository}:{image.tag}",
        manifest_digest=image.manifest_digest,
        config_digest=image.config_digest,
        layers=[layer.as_record() for layer in layers],
        builder_versions=builder_identity(),
    )
    full["predicate"]["runDetails"]["metadata"] = {
        "verification": [result.as_record() for result in chain],
    }
    sbom_content, sbom_artifact = image_sbom(composition, fetched, image, assembly)
    receipt.add_sbom_byproducts(full, sbom_content, sbom_artifact.manifest_digest, SBOM_FILE)
    return BuildResult(
        profile=profile.name,
        image=image,
        full_receipt=full,
        chain=tuple(chain),
        layer_names=tuple(tree.name for tree in trees),
        layers_from_cache=tuple(layer.from_cache for layer in layers),
        assembly=assembly,
        sbom_bytes=sbom_content,
        sbom_artifact=sbom_artifact,
    )


OUTPUT_FORMATS = ("oci", "oci-archive", "docker-archive")
# The layout alone: its blobs are the layer store's (no second copy of the image); an
# archive is asked for (--formats) or written from the layout later (``sparkflake export``).
DEFAULT_FORMATS = ("oci",)


SBOM_FILE = "sbom.spdx.json"


def check_formats(formats: Sequence[str]) -> None:
    unknown = set(formats) - set(OUTPUT_FORMATS)
    if unknown or not formats:
        raise InputError(f"--formats {','.join(formats)}: expected some of {', '.join(OUTPUT_FORMATS)}")


def start_archive(staging: Path, formats: Sequence[str], options: ImageOptions) -> CombinedArchiveWriter | None:
    """The combined archive (oci-archive and docker-archive in one file) started in the
    staging directory: each layer handed to it (``add_layer``) is copied on a background
    thread while the next layers are made and the chain is verified. None when no archive
    is asked for or the layers are zstd (then ``write_outputs_into`` writes the archives
    at the end)."""
    names = [f"{kind}.tar" for kind in ("oci-archive", "docker-archive") if kind in formats]
    if not names or options.compression.algorithm == "zstd":
        return None
    return CombinedArchiveWriter(staging / names[0], options.source_date_epoch)


def start_layout(staging: Path, formats: Sequence[str], store: BlobStore | None = None) -> LayoutWriter | None:
    """The OCI layout started in the staging directory (each layer handed to it,
    ``add_layer``, is shared from ``store`` on a background thread), or None when it is not
    asked for."""
    return LayoutWriter(staging / "oci", store) if "oci" in formats else None


class OutputWriters:
    """The archive and the OCI layout started in the staging directory, each taking every
    layer as soon as it is known (``add_layer``, copied on background threads) and finished
    by ``write``; leaving the ``with`` block by an exception aborts both."""

    def __init__(self, staging: Path, formats: Sequence[str], options: ImageOptions,
                 store: BlobStore | None = None) -> None:
        self.staging, self.formats, self.options, self.store = staging, formats, options, store
        self.combined: CombinedArchiveWriter | None = None
        self.layout: LayoutWriter | None = None

    def __enter__(self) -> OutputWriters:
        try:
            self.combined = start_archive(self.staging, self.formats, self.options)
            self.layout = start_layout(self.staging, self.formats, self.store)
        except BaseException:
            self._abort()
            raise
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if error is not None:
            self._abort()

    def add_layer(self, layer: Layer) -> None:
        for writer in (self.combined, self.layout):
            if writer is not None:
                writer.add_layer(layer)

    def write(self, result: BuildResult) -> None:
        write_outputs_into(self.staging, result, self.formats, self.combined, self.layout)

    def _abort(self) -> None:
        for writer in (self.combined, self.layout):
            if writer is not None:
                writer.abort()


def write_outputs_into(
    staging: Path,
    result: BuildResult,
    formats: Sequence[str],
    combined: CombinedArchiveWriter | None = None,
    layout: LayoutWriter | None = None,
) -> None:
    """A build's output files into a staging directory: oci/ (the layout), oci-archive.tar,
    docker-archive.tar (each only if in ``formats``), receipt.json, the SBOM,
    retained-native.json, source-overlay.json (source-packages.json when packages were
    overlaid), digests.json; ``combined`` and ``layout`` are the archive and the layout
    ``start_archive`` and ``start_layout`` began there (finished here)."""
    if "oci" in formats:
        if layout is not None:
            layout.finish(result.image)
        else:
            write_oci_layout(result.image, staging / "oci")
        if result.sbom_artifact is not None:
            # beside the image in blobs/, reachable from the image through the artifact's
            # subject; index.json keeps the image alone (its digest, and tools that take
            # oci:DIR without a tag, stay as they were)
            add_artifact_blobs(staging / "oci", result.sbom_artifact)
    # One file for both archives when the layers allow it (gzip or none): the
    # oci-archive that is also a docker-archive, the second name a hard link.
    write_archives(
        result.image,
        staging / "oci-archive.tar" if "oci-archive" in formats else None,
        staging / "docker-archive.tar" if "docker-archive" in formats else None,
        combined,
    )
    write_bytes_atomic(staging / "receipt.json", readable_json_bytes(result.full_receipt))
    if result.sbom_bytes is not None:
        write_bytes_atomic(staging / SBOM_FILE, result.sbom_bytes)
    if result.assembly is not None:
        write_bytes_atomic(staging / "retained-native.json", result.assembly.retained_native_bytes)
        write_bytes_atomic(staging / "source-overlay.json", result.assembly.overlay_bytes)
        if result.assembly.package_overlays:
            write_bytes_atomic(staging / "source-packages.json",
                               readable_json_bytes(source_packages_document_of(result.assembly)))
    digests = digests_record(result.image, profile=result.profile, layer_names=result.layer_names)
    write_bytes_atomic(staging / DIGESTS_FILE, readable_json_bytes(digests))
