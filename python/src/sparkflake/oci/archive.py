"""oci-archive and docker-archive writers.

All are tar streams written by ``tar_stream`` (fixed mtime, uid/gid 0, fixed member
order) into a temporary file renamed into place, so an archive is byte-identical
whenever the image is. The config bytes are the same bytes object as in the layout, so
the image ID that ``docker load``/``podman load`` computes equals our config digest.

The combined archive (the layout ``docker save`` writes since Docker 25) is at once an
OCI image layout and a legacy docker-archive: ``oci-layout``, ``index.json`` and a docker
``manifest.json`` whose ``Config`` and ``Layers`` name the same ``blobs/sha256/<hex>``
members the OCI manifest references, so each blob is stored once. containers/image
(skopeo, podman), ``docker load`` and umoci read either view. It is written whenever the
image allows it: no zstd layer.

Member order of the combined archive is blob-first: ``blobs/``, ``blobs/sha256/``, the
layer blobs in layer order, the config and manifest blobs, then ``index.json``,
``oci-layout`` and ``manifest.json``. That lets ``CombinedArchiveWriter`` copy each layer
blob into the archive while the image's other layers are still being made, and still
give the same bytes as writing it at the end. (Readers index the whole tar; none needs
the documents first.) The plain oci-archive of a zstd image keeps metadata first.

zstd images: docker and the docker-archive readers of older tools accept only plain or
gzip layer tarballs, so such an image gets a separate docker-archive whose layers are
stored decompressed (the uncompressed tar, kept in the blob store under its diffID) and
a plain oci-archive.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from ..core.atomic_write import atomic_stream, regular_output
from ..core.canonical_json import canonical_json_bytes
from ..core.digest import digest_hex
from ..core.errors import CheckFailed, InputError
from .background import BackgroundQueue
from .image_model import BuiltImage
from .layer import Layer
from .layer_stream import LayerStream
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
    with atomic_stream(out_path) as sink:
        write_tar_file(entries, sink, mtime)
    return Path(out_path)


OCI_ARCHIVE = "oci-archive"
DOCKER_ARCHIVE = "docker-archive"


def combined_archive_allowed(image: BuiltImage) -> bool:
    """True when one archive can serve as both formats: docker-archive readers take only
    plain or gzip layers, so any zstd layer rules it out."""
    return not any(_is_zstd(layer) for layer in image.layers)


def _is_zstd(layer: Layer) -> bool:
    return layer.media_type.endswith("+zstd")


def _blob_member(digest: str) -> str:
    return f"blobs/sha256/{digest_hex(digest)}"


def _oci_entries(image: BuiltImage) -> list[TarEntry]:
    """The plain oci-archive (zstd images): documents first, then the layer blobs."""
    entries = [
        _bytes_entry("oci-layout", OCI_LAYOUT_BYTES),
        _bytes_entry("index.json", image.index_bytes),
        _dir_entry("blobs"),
        _dir_entry("blobs/sha256"),
        _bytes_entry(_blob_member(image.manifest_digest), image.manifest_bytes),
        _bytes_entry(_blob_member(image.config_digest), image.config_bytes),
    ]
    seen = {image.manifest_digest, image.config_digest}
    for layer in image.layers:
        if layer.digest in seen:
            continue
        seen.add(layer.digest)
        entries.append(_file_entry(_blob_member(layer.digest), layer.blob_path))
    return entries


def _combined_document_entries(image: BuiltImage, seen: set[str]) -> list[TarEntry]:
    entries = []
    for digest, content in (
        (image.config_digest, image.config_bytes),
        (image.manifest_digest, image.manifest_bytes),
    ):
        if digest not in seen:
            seen.add(digest)
            entries.append(_bytes_entry(_blob_member(digest), content))
    entries += [
        _bytes_entry("index.json", image.index_bytes),
        _bytes_entry("oci-layout", OCI_LAYOUT_BYTES),
        _bytes_entry("manifest.json", docker_archive_manifest(image)),
    ]
    return entries


def _refuse_zstd(image: BuiltImage, out_path: str | os.PathLike[str]) -> None:
    if not combined_archive_allowed(image):
        raise InputError(
            f"{out_path}: image {image.reference} has zstd layers; a docker-archive cannot "
            "hold them, so it cannot be written as a combined oci-archive+docker-archive"
        )


def write_combined_archive(image: BuiltImage, out_path: str | os.PathLike[str]) -> Path:
    """One tar that is both the oci-archive and the docker-archive (Docker 25 layout):
    ``CombinedArchiveWriter`` handed every layer at once."""
    _refuse_zstd(image, out_path)
    return CombinedArchiveWriter(out_path, image.source_date_epoch).finish(image)


class CombinedArchiveWriter:
    """The combined archive written while the image is made. ``add_layer`` hands over a
    finished layer; its blob is read into the archive writer's buffers on a background
    thread, so the copy overlaps the other layers' scanning and compression. ``finish``
    adds the layers not handed over yet, appends the documents, fsyncs and renames: the
    bytes depend only on the finished image, not on when its layers were handed over
    (checked: the layers handed over must be the image's first layers, in order, else
    the archive is written again with all of them at once).
    ``abort`` leaves no file behind and the previous archive in place."""

    def __init__(self, out_path: str | os.PathLike[str], mtime: int) -> None:
        self._out = Path(out_path)
        self._mtime = mtime
        self._context = atomic_stream(self._out)
        self._sink = self._context.__enter__()
        self._layers: list[Layer] = []
        self._seen: set[str] = set()
        self._writer: BackgroundQueue[list[TarEntry]] = BackgroundQueue(
            lambda entries: write_tar_file(entries, self._sink, self._mtime, terminate=False), "archive-writer"
        )
        self._writer.put([_dir_entry("blobs"), _dir_entry("blobs/sha256")])

    @property
    def path(self) -> Path:
        return self._out

    def add_layer(self, layer: Layer) -> None:
        self._layers.append(layer)
        if _is_zstd(layer) or layer.digest in self._seen:
            return
        self._seen.add(layer.digest)
        self._writer.put([_file_entry(_blob_member(layer.digest), layer.blob_path)])

    def _stop(self) -> None:
        self._writer.stop()

    def finish(self, image: BuiltImage) -> Path:
        """Hand over the image's layers not yet added (those handed over must be the
        first of the image's layers), append the documents, fsync and rename."""
        _refuse_zstd(image, self._out)
        handed = [layer.digest for layer in self._layers]
        prefix = handed == [layer.digest for layer in image.layers[: len(handed)]]
        if prefix and not self._writer.stopped:
            for layer in image.layers[len(handed) :]:
                self.add_layer(layer)
        self._stop()
        same = (
            self._writer.failure is None
            and image.source_date_epoch == self._mtime
            and [layer.digest for layer in self._layers] == [layer.digest for layer in image.layers]
        )
        if not same:
            self.abort()
            if self._writer.failure is not None:  # a write or source error (named), or a bug
                raise self._writer.failure
            return write_combined_archive(image, self._out)
        try:
            write_tar_file(_combined_document_entries(image, set(self._seen)), self._sink, self._mtime)
        except BaseException as exc:
            self._context.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._context.__exit__(None, None, None)
        return self._out

    def abort(self) -> None:
        """Stop and remove the partial archive (the previous one, if any, stays)."""
        self._stop()
        with contextlib.suppress(BaseException):
            error = RuntimeError("archive aborted")
            self._context.__exit__(RuntimeError, error, None)


def write_oci_archive(image: BuiltImage, out_path: str | os.PathLike[str]) -> Path:
    """The oci-archive; in the combined form (also a docker-archive) unless zstd."""
    if combined_archive_allowed(image):
        return write_combined_archive(image, out_path)
    return _write_tar(_oci_entries(image), out_path, image.source_date_epoch)


def write_docker_archive(image: BuiltImage, out_path: str | os.PathLike[str]) -> Path:
    """The docker-archive; in the combined form (also an oci-archive) unless zstd, where
    it is a legacy docker-archive with the layers decompressed."""
    if combined_archive_allowed(image):
        return write_combined_archive(image, out_path)
    entries = [
        _bytes_entry("manifest.json", docker_archive_manifest(image)),
        _bytes_entry(_docker_config_member(image), image.config_bytes),
    ]
    seen = set()
    for layer in image.layers:
        name = _docker_layer_member(image, layer)
        if name in seen:
            continue
        seen.add(name)
        entries.append(_file_entry(name, _docker_layer_source(image, layer)))
    return _write_tar(entries, out_path, image.source_date_epoch)


def write_archives(
    image: BuiltImage,
    oci_archive_path: str | os.PathLike[str] | None,
    docker_archive_path: str | os.PathLike[str] | None,
    combined: CombinedArchiveWriter | None = None,
) -> dict[str, Path]:
    """Write the requested archives; returns {"oci-archive": path, "docker-archive": path}
    for those requested. When the image has no zstd layer, the combined archive is
    written once (at ``oci_archive_path``, else ``docker_archive_path``) and the other
    path is a hard link to it (a copy only where linking fails, e.g. across filesystems):
    one write, one copy of the blobs on disk. ``combined`` is that archive already being
    written (``CombinedArchiveWriter`` at one of the two paths): finished here, or
    aborted if the image turned out to have zstd layers. Each path is replaced atomically."""
    requested = {
        kind: Path(path)
        for kind, path in ((OCI_ARCHIVE, oci_archive_path), (DOCKER_ARCHIVE, docker_archive_path))
        if path is not None
    }
    if combined is not None and not (combined_archive_allowed(image) and combined.path in requested.values()):
        combined.abort()
        combined = None
    if not requested:
        return {}
    if combined_archive_allowed(image):
        first = combined.finish(image) if combined is not None else write_combined_archive(image, next(iter(requested.values())))
        return {kind: path if path == first else link_or_copy_atomic(first, path) for kind, path in requested.items()}
    written: dict[str, Path] = {}
    if oci_archive_path is not None:
        written[OCI_ARCHIVE] = write_oci_archive(image, oci_archive_path)
    if docker_archive_path is not None:
        written[DOCKER_ARCHIVE] = write_docker_archive(image, docker_archive_path)
    return written


def link_or_copy_atomic(source: Path, target: Path) -> Path:
    """``target`` becomes the same file as ``source`` (hard link), else a copy of it;
    replaced in one rename, so a reader sees the old or the new archive, never none. A
    target that is not a regular file is refused (``regular_output``)."""
    target = regular_output(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and os.path.samefile(source, target):
        return target
    for _ in range(100):
        staged = target.parent / f".{target.name}.{secrets.token_hex(6)}.partial"
        try:
            os.link(source, staged)
        except FileExistsError:
            continue
        except OSError:
            break  # EXDEV, EPERM, EMLINK, no hard links on this filesystem: copy
        try:
            os.replace(staged, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
            raise
        return target
    with atomic_stream(target) as sink, open(source, "rb", buffering=0) as original:
        size = os.fstat(original.fileno()).st_size
        if sink.copy_from(original.fileno(), size) != size:
            raise InputError(f"{source}: changed size while it was being copied to {target}")
    return target


def docker_archive_manifest(image: BuiltImage) -> bytes:
    """The docker ``manifest.json`` (canonical JSON). In the combined form it names the
    OCI blobs (``blobs/sha256/<hex>``), as Docker 25 writes it; for zstd images the
    legacy names ``<config hex>.json`` and ``<hex>.tar``."""
    return canonical_json_bytes(
        [
            {
                "Config": _docker_config_member(image),
                "RepoTags": [image.reference],
                "Layers": [_docker_layer_member(image, layer) for layer in image.layers],
            }
        ]
    )


def _docker_config_member(image: BuiltImage) -> str:
    if combined_archive_allowed(image):
        return _blob_member(image.config_digest)
    return f"{digest_hex(image.config_digest)}.json"


def _docker_layer_member(image: BuiltImage, layer: Layer) -> str:
    if combined_archive_allowed(image):
        return _blob_member(layer.digest)
    return f"{digest_hex(_docker_layer_digest(layer))}.tar"


def _docker_layer_digest(layer: Layer) -> str:
    return layer.diff_id if _is_zstd(layer) else layer.digest


def _docker_layer_source(image: BuiltImage, layer: Layer) -> Path:
    if not _is_zstd(layer):
        return layer.blob_path
    store = image.store
    verified = store.verified(layer.diff_id, layer.uncompressed_size)
    if verified is not None:
        return verified
    with store.new_blob() as (handle, tmp_path):
        with open(layer.blob_path, "rb") as blob, LayerStream(blob) as stream:
            problem: str | None
            try:
                for plain in stream.chunks():
                    handle.write(plain)
            except ValueError as exc:  # a zstd stream our own store holds, cut or corrupt
                problem = str(exc)
            else:
                problem = None
            diff_id = stream.digests().diff_id
    if problem is not None or diff_id != layer.diff_id:
        tmp_path.unlink()
        raise CheckFailed(
            f"layer {layer.digest} decompresses to {problem or diff_id}, expected diffID {layer.diff_id}",
            check_id="oci.layer-diff-id",
        )
    return store.commit(tmp_path, layer.diff_id)
