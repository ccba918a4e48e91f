"""``digests.json``: what a build says its image is. The one model of the file, its only
writer (``digests_record``, serialized by the caller as the rest of its output) and its only
reader (``read_digests_file``), used by export, the launch, the service and status alike.

The reader asks only for what those readers use: the config digest (the image ID, all that
`load` needs), the manifest digest (``manifest``, which export, the launch and status ask
for), and each layer's uncompressed size where the file lists layers (export rebuilds an
archive from them). Every other key is left as written."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.digest import is_digest
from ..core.documents import parse_json_object, read_regular_file
from ..core.errors import InputError
from ..core.records import field_record
from .image_model import BuiltImage, digests_by_kind
from .layer import LAYER_DIGEST_FIELDS

DIGESTS_FILE = "digests.json"


@dataclass(frozen=True)
class RecordedDigests:
    """A build's ``digests.json`` as read: ``where`` is the file; ``manifest_digest`` and
    ``uncompressed_sizes`` are None when it names no manifest or lists no layers."""

    manifest_digest: str | None
    config_digest: str
    where: str
    uncompressed_sizes: tuple[int, ...] | None = None

    @property
    def image_id(self) -> str:
        """The config digest: the name podman and docker give the image."""
        return self.config_digest

    def manifest(self) -> str:
        """The manifest digest, which a reader that names the image by it needs."""
        if self.manifest_digest is None:
            raise InputError(f"{self.where}: $.manifest: expected sha256:<64 lowercase hex digits>, got None")
        return self.manifest_digest

    def layer_sizes(self) -> tuple[int, ...]:
        """Each layer's uncompressed size, which a reader that rebuilds the image needs."""
        if self.uncompressed_sizes is None:
            raise InputError(f"{self.where}: $.layers: expected the build's layers, each with its uncompressed_size")
        return self.uncompressed_sizes


def digests_record(
    image: BuiltImage, *, profile: str | None = None, layer_names: Sequence[str] = ()
) -> dict[str, object]:
    """The document: every digest with its kind as the key that names it; a profile's build
    adds the profile and its layers' names."""
    record: dict[str, object] = {
        **digests_by_kind(
            manifest=image.manifest_digest, index=image.index_digest, config=image.config_digest,
            chain_id=image.chain_id,
        ),
        "platform": str(image.platform),
        "tag": image.tag,
        "reference": image.reference,
        "manifest_size": len(image.manifest_bytes),
        "config_size": len(image.config_bytes),
        "layers": [field_record(layer, LAYER_DIGEST_FIELDS) for layer in image.layers],
    }
    if profile is not None:
        record["profile"] = profile
        record["layer_names"] = list(layer_names)
    return record


def read_digests_file(path: str | os.PathLike[str]) -> RecordedDigests:
    """The file at ``path``, or an ``InputError`` naming it and the JSON path at fault."""
    shown = os.fspath(path)
    document = parse_json_object(read_regular_file(Path(path), "the digests.json of a build"), shown,
                                 "a JSON object (the digests.json of a build)")
    manifest = _digest(document, "manifest", shown) if document.get("manifest") is not None else None
    return RecordedDigests(manifest, _digest(document, "config", shown), shown,
                           _uncompressed_sizes(document.get("layers"), shown))


def _digest(document: dict[str, Any], key: str, shown: str) -> str:
    value = document.get(key)
    if not is_digest(value):
        raise InputError(f"{shown}: $.{key}: expected sha256:<64 lowercase hex digits>, got {value!r}")
    return value


def _uncompressed_sizes(layers: object, shown: str) -> tuple[int, ...] | None:
    if layers is None:
        return None
    if not isinstance(layers, list):
        raise InputError(f"{shown}: $.layers: expected an array of layer objects, got {type(layers).__name__}")
    sizes = []
    for position, layer in enumerate(layers):
        size = layer.get("uncompressed_size") if isinstance(layer, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InputError(f"{shown}: $.layers[{position}].uncompressed_size: expected a non-negative integer, "
                             f"got {size!r}")
        sizes.append(size)
    return tuple(sizes)
