"""Deterministic OCI image engine.

Public API (other stages build on these):
- ``build_layer(LayerInput, LayerOptions, BlobStore, LayerCache|None, progress) -> Layer``
  with ``LayerInput(sources=(TreeSource(host_dir, target),...), files=(GeneratedFile(...),),
  deletions=(image paths,), opaque_dirs=(...))``;
- ``build_image(ImageSpec, BlobStore, LayerCache|None, progress) -> BuiltImage`` and
  ``assemble_image(ImageSpec, [Layer], BlobStore)`` for layers built separately;
- ``write_image_outputs(BuiltImage, out_dir)`` or the single writers
  ``write_oci_layout``, ``write_archives(BuiltImage, oci_archive_path|None,
  docker_archive_path|None) -> {"oci-archive": Path, "docker-archive": Path}`` (one
  combined file, hard-linked, unless a layer is zstd), ``write_oci_archive``,
  ``write_docker_archive``;
- ``open_image(path) -> ImageReader`` for a layout, an oci-archive or a docker-archive,
  and ``verify_image(reader) -> ImageReport`` re-deriving every digest from the bytes;
- ``load_spec_file(path) -> ImageSpec`` for SPEC.json.
"""

from ..compose.layer_input import GeneratedFile, LayerInput, TreeSource
from ..core.digest import chain_id
from .archive import write_archives, write_docker_archive, write_oci_archive
from .blob_store import BlobStore
from .compression import Compression
from .config import RuntimeConfig
from .image import (
    ImageOutputs,
    ImageSpec,
    LayerSpec,
    assemble_image,
    build_image,
    default_source_date_epoch,
    write_image_outputs,
)
from .image_model import BuiltImage
from .layer import Layer, LayerOptions, build_layer
from .layer_cache import LayerCache
from .layout import write_oci_layout
from .reader import ImageReader, open_image
from .spec_file import load_spec_file, parse_spec
from .types import Platform
from .verify import ImageReport, LayerReport, verify_image

__all__ = [
    "BlobStore",
    "BuiltImage",
    "Compression",
    "GeneratedFile",
    "ImageOutputs",
    "ImageReader",
    "ImageReport",
    "ImageSpec",
    "Layer",
    "LayerCache",
    "LayerInput",
    "LayerOptions",
    "LayerReport",
    "LayerSpec",
    "Platform",
    "RuntimeConfig",
    "TreeSource",
    "assemble_image",
    "build_image",
    "build_layer",
    "chain_id",
    "default_source_date_epoch",
    "load_spec_file",
    "open_image",
    "parse_spec",
    "verify_image",
    "write_archives",
    "write_docker_archive",
    "write_image_outputs",
    "write_oci_archive",
    "write_oci_layout",
]
