"""Image manifest and image index documents (OCI image spec manifest.md, image-index.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.canonical_json import canonical_json_bytes
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


@dataclass(frozen=True)
class ImageManifest:
    """An image manifest (manifest.md): the config and the layers, by descriptor."""

    config: Descriptor
    layers: Sequence[Descriptor]
    annotations: Mapping[str, str]

    def as_record(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": media_types.OCI_MANIFEST,
            "config": self.config.as_record(),
            "layers": [layer.as_record() for layer in self.layers],
        }
        if self.annotations:
            document["annotations"] = dict(sorted(self.annotations.items()))
        return document

    def to_bytes(self) -> bytes:
        return canonical_json_bytes(self.as_record())


@dataclass(frozen=True)
class ImageIndex:
    """An image index (image-index.md): the manifests it lists, by descriptor."""

    manifests: Sequence[Descriptor]

    def as_record(self) -> dict[str, Any]:
        return {
            "schemaVersion": 2,
            "mediaType": media_types.OCI_INDEX,
            "manifests": [manifest.as_record() for manifest in self.manifests],
        }

    def to_bytes(self) -> bytes:
        return canonical_json_bytes(self.as_record())
