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

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker and a reader see; at run time, _SOURCE_MODULE
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
    from .layer_input import GeneratedFile, LayerInput, TreeSource
    from .layout import write_oci_layout
    from .reader import ImageReader, open_image
    from .spec_file import load_spec_file, parse_spec
    from .types import Platform
    from .verify import ImageReport, LayerReport, verify_image

# The names above, each imported from its module on first use (PEP 562): a command that needs
# one part of the engine (`sparkflake verify` needs the registry client) does not pay for
# importing all of it, which costs more than the command's own work.
_SOURCE_MODULE = {
    "BlobStore": ".blob_store",
    "BuiltImage": ".image_model",
    "Compression": ".compression",
    "GeneratedFile": ".layer_input",
    "ImageOutputs": ".image",
    "ImageReader": ".reader",
    "ImageReport": ".verify",
    "ImageSpec": ".image",
    "Layer": ".layer",
    "LayerCache": ".layer_cache",
    "LayerInput": ".layer_input",
    "LayerOptions": ".layer",
    "LayerReport": ".verify",
    "LayerSpec": ".image",
    "Platform": ".types",
    "RuntimeConfig": ".config",
    "TreeSource": ".layer_input",
    "assemble_image": ".image",
    "build_image": ".image",
    "build_layer": ".layer",
    "chain_id": "..core.digest",
    "default_source_date_epoch": ".image",
    "load_spec_file": ".spec_file",
    "open_image": ".reader",
    "parse_spec": ".spec_file",
    "verify_image": ".verify",
    "write_archives": ".archive",
    "write_docker_archive": ".archive",
    "write_image_outputs": ".image",
    "write_oci_archive": ".archive",
    "write_oci_layout": ".layout",
}


def __getattr__(name: str) -> object:
    module = _SOURCE_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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
