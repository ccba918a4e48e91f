"""oci-archive and docker-archive writers.

Both are tar streams written by ``tar_stream`` (fixed mtime, uid/gid 0, fixed member
order) into a temporary file renamed into place, so an archive is byte-identical
whenever the image is. The config bytes are the same bytes object as in the layout, so
the image ID that ``docker load``/``podman load`` computes equals our config digest.

Member order puts metadata first (oci-layout, index.json; manifest.json, config) so a
reader that streams the archive meets the documents before the layer blobs.

docker-archive layers: gzip and uncompressed layer blobs are stored as they are (docker
and podman decompress gzip layers on load and identify them by diffID); zstd blobs are
stored decompressed (the uncompressed tar, kept in the blob store under its diffID),
because docker before 23 and the docker-archive readers of older tools accept only plain
or gzip layer tarballs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..atomic_write import atomic_file
from ..errors import CheckFailed
from .canonical_json import canonical_json_bytes
from .compression import Decompressor
from .digests import digest_hex
from .image_model import BuiltImage
from .layer import Layer
from .layout import OCI_LAYOUT_BYTES
from .tar_stream import EntryKind, TarEntry, write_tar_file


def _bytes_entry(path: str, content: bytes) -> TarEntry:
    return TarEntry(path, EntryKind.FILE, 0o644, size=len(content), content=content)


def _file_entry(path: str, source: Path) -> TarEntry:
    return TarEntry(
        path, EntryKind.FILE, 0o644, size=source.stat().st_size, source=os.fspath(source)
    )


def _dir_entry(path: str) -> TarEntry:
    return TarEntry(path, EntryKind.DIRECTORY, 0o755)


def _write_tar(entries: list[TarEntry], out_path: str | os.PathLike[str], mtime: int) -> Path:
    with atomic_file(out_path) as handle:
        write_tar_file(entries, handle, mtime)
    return Path(out_path)


def write_oci_archive(image: BuiltImage, out_path: str | os.PathLike[str]) -> Path:
    entries = [
        _bytes_entry("oci-layout", OCI_LAYOUT_BYTES),
        _bytes_entry("index.json", image.index_bytes),
        _dir_entry("blobs"),
        _dir_entry("blobs/sha256"),
        _bytes_entry(f"blobs/sha256/{digest_hex(image.manifest_digest)}", image.manifest_bytes),
        _bytes_entry(f"blobs/sha256/{digest_hex(image.config_digest)}", image.config_bytes),
    ]
    seen = set()
    for layer in image.layers:
        if layer.digest in seen:
            continue
        seen.add(layer.digest)
        entries.append(_file_entry(f"blobs/sha256/{digest_hex(layer.digest)}", layer.blob_path))
    return _write_tar(entries, out_path, image.source_date_epoch)


def docker_archive_manifest(image: BuiltImage) -> bytes:
    return canonical_json_bytes(
        [
            {
                "Config": f"{digest_hex(image.config_digest)}.json",
                "RepoTags": [image.reference],
                "Layers": [_docker_layer_name(layer) for layer in image.layers],
            }
        ]
    )


def _docker_layer_name(layer: Layer) -> str:
    return f"{digest_hex(_docker_layer_digest(layer))}.tar"


def _docker_layer_digest(layer: Layer) -> str:
    return layer.diff_id if layer.media_type.endswith("+zstd") else layer.digest


def write_docker_archive(image: BuiltImage, out_path: str | os.PathLike[str]) -> Path:
    entries = [
        _bytes_entry("manifest.json", docker_archive_manifest(image)),
        _bytes_entry(f"{digest_hex(image.config_digest)}.json", image.config_bytes),
    ]
    seen = set()
    for layer in image.layers:
        name = _docker_layer_name(layer)
        if name in seen:
            continue
        seen.add(name)
        entries.append(_file_entry(name, _docker_layer_source(image, layer)))
    return _write_tar(entries, out_path, image.source_date_epoch)


def _docker_layer_source(image: BuiltImage, layer: Layer) -> Path:
    if not layer.media_type.endswith("+zstd"):
        return layer.blob_path
    store = image.store
    if store.has(layer.diff_id, layer.uncompressed_size):
        return store.path(layer.diff_id)
    decompressor = Decompressor("zstd")
    hasher = hashlib.sha256()
    with store.new_blob() as (handle, tmp_path):
        with open(layer.blob_path, "rb") as blob:
            while chunk := blob.read(1 << 20):
                plain = decompressor.decompress(chunk)
                hasher.update(plain)
                handle.write(plain)
        decompressor.finish()
    if "sha256:" + hasher.hexdigest() != layer.diff_id:
        tmp_path.unlink()
        raise CheckFailed(
            f"layer {layer.digest} decompresses to sha256:{hasher.hexdigest()}, "
            f"expected diffID {layer.diff_id}",
            check_id="oci.layer-diff-id",
        )
    return store.commit(tmp_path, layer.diff_id)
