"""A built image: its layers and its canonical config/manifest/index bytes; each digest is
the hash of those bytes (the chain ID that of its layers' diffIDs), so no digest can disagree
with the document it names."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..core.digest import chain_id as layer_chain_id
from ..core.digest import sha256_digest
from .blob_store import BlobStore
from .layer import Layer
from .types import Platform


@dataclass(frozen=True)
class BuiltImage:
    platform: Platform
    repository: str
    tag: str
    source_date_epoch: int
    layers: tuple[Layer, ...]
    config_bytes: bytes
    manifest_bytes: bytes
    index_bytes: bytes
    store: BlobStore

    @cached_property
    def config_digest(self) -> str:
        return sha256_digest(self.config_bytes)

    @cached_property
    def manifest_digest(self) -> str:
        return sha256_digest(self.manifest_bytes)

    @cached_property
    def index_digest(self) -> str:
        return sha256_digest(self.index_bytes)

    @cached_property
    def chain_id(self) -> str:
        return layer_chain_id([layer.diff_id for layer in self.layers])

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"


def digests_by_kind(
    *, manifest: str | None, index: str | None, config: str, chain_id: str | None
) -> dict[str, str | None]:
    """An image's digests keyed by their kinds, as ``digests.json`` and the verify report name
    them; the config digest is the image ID too (the name podman and docker give it)."""
    return {"manifest": manifest, "index": index, "config": config, "image_id": config, "chain_id": chain_id}
