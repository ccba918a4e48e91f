"""Image manifest and image index documents (OCI image spec manifest.md, image-index.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import media_types
from .layer import Layer
from .types import Descriptor


def layer_descriptor(layer: Layer) -> Descriptor:
    return Descriptor(
        media_type=layer.media_type,
        digest=layer.digest,
        size=layer.size,
        annotations={media_types.COMPRESSION_ANNOTATION: layer.compression},
    )


def manifest_document(
    config: Descriptor, layers: Sequence[Descriptor], annotations: Mapping[str, str]
) -> dict[str, object]:
    document: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": media_types.OCI_MANIFEST,
        "config": config.as_record(),
        "layers": [layer.as_record() for layer in layers],
    }
    if annotations:
        document["annotations"] = dict(sorted(annotations.items()))
    return document


def index_document(manifests: Sequence[Descriptor]) -> dict[str, object]:
    return {
        "schemaVersion": 2,
        "mediaType": media_types.OCI_INDEX,
        "manifests": [manifest.as_record() for manifest in manifests],
    }
