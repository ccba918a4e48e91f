"""Writer of an OCI image layout directory (OCI image spec image-layout.md).

The directory is staged beside its final name and renamed into place (atomic); layer
blobs are copies of the blob store's (``copy_blob``: a copy-on-write clone where the file
system has them), never hard links: an output edited in place must not change the store."""

from __future__ import annotations

import os
from pathlib import Path

from ..core.atomic_write import atomic_directory
from ..core.canonical_json import canonical_json_bytes
from ..core.digest import digest_hex
from .artifact import ReferringArtifact
from .blob_store import copy_blob
from .image_model import BuiltImage
from .media_types import OCI_LAYOUT_VERSION

OCI_LAYOUT_BYTES = canonical_json_bytes({"imageLayoutVersion": OCI_LAYOUT_VERSION})


def write_oci_layout(image: BuiltImage, out_dir: str | os.PathLike[str]) -> Path:
    with atomic_directory(out_dir) as staging:
        staging.chmod(0o755)  # mkdtemp makes it 0700; a layout is meant to be shared
        blob_dir = staging / "blobs" / "sha256"
        blob_dir.mkdir(parents=True)
        for layer in image.layers:
            copy_blob(layer.blob_path, blob_dir / digest_hex(layer.digest))
        (blob_dir / digest_hex(image.config_digest)).write_bytes(image.config_bytes)
        (blob_dir / digest_hex(image.manifest_digest)).write_bytes(image.manifest_bytes)
        (staging / "index.json").write_bytes(image.index_bytes)
        (staging / "oci-layout").write_bytes(OCI_LAYOUT_BYTES)
    return Path(out_dir)


def add_artifact_blobs(layout: Path, artifact: ReferringArtifact) -> None:
    """An artifact's manifest and blobs into an existing layout's blobs/ (not its index)."""
    blob_dir = layout / "blobs" / "sha256"
    for digest, content in (*artifact.blobs().items(), (artifact.manifest_digest, artifact.manifest_bytes)):
        target = blob_dir / digest_hex(digest)
        if not target.exists():
            target.write_bytes(content)
