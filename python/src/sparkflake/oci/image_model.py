"""A built image: its layers and its canonical config/manifest/index bytes; each digest is
the hash of those bytes, so no digest can disagree with the document it names."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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
    chain_id: str
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

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    def digests_record(self) -> dict[str, object]:
        """``digests.json``: every digest with its kind as the key that names it."""
        return {
            "manifest": self.manifest_digest,
            "index": self.index_digest,
            "config": self.config_digest,
            "image_id": self.config_digest,
            "chain_id": self.chain_id,
            "platform": str(self.platform),
            "tag": self.tag,
            "reference": self.reference,
            "manifest_size": len(self.manifest_bytes),
            "config_size": len(self.config_bytes),
            "layers": [
                {
                    "digest": layer.digest,
                    "diff_id": layer.diff_id,
                    "size": layer.size,
                    "media_type": layer.media_type,
                    "uncompressed_size": layer.uncompressed_size,
                }
                for layer in self.layers
            ],
        }
