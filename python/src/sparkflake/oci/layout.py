"""Writer of an OCI image layout directory (OCI image spec image-layout.md).

The directory is staged beside its final name and renamed into place (atomic). Given the
blob store the layers are in, a layer blob is the store's bytes without a second copy on
disk (``share_blob``: a copy-on-write clone, else a hard link to the store's read-only
inode, whose recorded identity makes an edit through the layout a miss of the store, never
a wrong hit; see ``oci.blob_store``); without it, a copy (``copy_blob``).

``StagedLayout`` is the one writer of a layout's files (blobs by digest, then index.json
and oci-layout, renamed into place); ``LayoutWriter`` uses it to start the layout before the
image is finished: each layer handed to it (``add_layer``) is copied on a background thread
while the build goes on (the overlay, the verification chain, the top layer). A registry
pull (``registry_transfer``) fills one with the blobs it verified.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.atomic_write import atomic_directory, write_new_file
from ..core.canonical_json import canonical_json_bytes
from ..core.digest import digest_hex
from ..core.errors import InputError
from .artifact import ReferringArtifact
from .background import BackgroundQueue
from .blob_store import BlobStore, copy_blob, share_blob
from .image_model import BuiltImage
from .layer import Layer
from .media_types import OCI_LAYOUT_VERSION

OCI_LAYOUT_BYTES = canonical_json_bytes({"imageLayoutVersion": OCI_LAYOUT_VERSION})


class StagedLayout:
    """An OCI layout written beside ``out_dir`` (``atomic_directory``): ``blobs/sha256/``
    first, each blob under its digest, then ``commit`` writes index.json and oci-layout and
    renames the layout into place; ``discard`` removes it and the previous layout stays.
    As a context manager, leaving the block by an exception (or without ``commit``)
    discards."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.out = Path(out_dir)
        self._context = atomic_directory(self.out)
        self._open = True
        self.staging = self._context.__enter__()
        self.blob_dir = self.staging / "blobs" / "sha256"
        try:
            self.staging.chmod(0o755)  # mkdtemp makes it 0700; a layout is meant to be shared
            self.blob_dir.mkdir(parents=True)
        except BaseException as exc:
            self.discard(exc)
            raise

    def blob_path(self, digest: str) -> Path:
        return self.blob_dir / digest_hex(digest)

    def write_blob(self, digest: str, content: bytes) -> None:
        write_new_file(self.blob_path(digest), content)

    def commit(self, index_bytes: bytes) -> Path:
        try:
            write_new_file(self.staging / "index.json", index_bytes)
            write_new_file(self.staging / "oci-layout", OCI_LAYOUT_BYTES)
        except BaseException as exc:
            self.discard(exc)
            raise
        self._end(None)
        return self.out

    def discard(self, failure: BaseException) -> None:
        self._end(failure)

    def _end(self, failure: BaseException | None) -> None:
        """Leave the staging context once: renamed into place, or removed on ``failure``."""
        if self._open:
            self._open = False
            if failure is None:
                self._context.__exit__(None, None, None)
            else:
                self._context.__exit__(type(failure), failure, failure.__traceback__)

    def __enter__(self) -> StagedLayout:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if self._open:
            self.discard(error if error is not None else RuntimeError("layout left without commit"))


class LayoutWriter:
    """The OCI layout at ``out_dir``, written while the image is made. ``add_layer`` hands
    over a finished layer (its blob is copied on a background thread); ``finish`` copies
    the image's layers not handed over, removes copies of layers the image does not have,
    writes the documents and renames the layout into place. ``abort`` stops the copying
    and leaves no staging directory and the previous layout in place."""

    def __init__(self, out_dir: str | os.PathLike[str], store: BlobStore | None = None) -> None:
        self._out = Path(out_dir)
        self._store = store
        self._layout = StagedLayout(self._out)
        self._copied: set[str] = set()
        self._copier: BackgroundQueue[Layer] = BackgroundQueue(self._copy, "layout-writer")

    def _copy(self, layer: Layer) -> None:
        try:
            target = self._layout.blob_path(layer.digest)
            if self._store is not None and layer.blob_path == self._store.path(layer.digest):
                share_blob(self._store, layer.digest, target)
            else:
                copy_blob(layer.blob_path, target)
        except OSError as exc:
            raise InputError(
                f"{layer.blob_path}: cannot copy layer {layer.digest} into {self._out}: {exc.strerror or exc}"
            ) from exc

    def add_layer(self, layer: Layer) -> None:
        if layer.digest not in self._copied:
            self._copied.add(layer.digest)
            self._copier.put(layer)

    def _stop(self) -> None:
        self._copier.stop()

    def finish(self, image: BuiltImage) -> Path:
        try:
            for layer in image.layers:
                self.add_layer(layer)
            self._stop()
            if self._copier.failure is not None:
                raise self._copier.failure
            for digest in self._copied - {layer.digest for layer in image.layers}:
                self._layout.blob_path(digest).unlink()
            self._layout.write_blob(image.config_digest, image.config_bytes)
            self._layout.write_blob(image.manifest_digest, image.manifest_bytes)
        except BaseException as exc:
            self._stop()
            self._layout.discard(exc)
            raise
        return self._layout.commit(image.index_bytes)

    def abort(self) -> None:
        """Stop and remove the staged layout (the previous one, if any, stays)."""
        self._stop()
        self._layout.discard(RuntimeError("layout aborted"))


def output_layout(out: Path) -> Path:
    """Where the OCI layout of ``out`` is: ``out`` itself when it is a layout (its
    oci-layout file), ``out/oci`` when it is a build output holding one there, else ``out``
    (an archive, or a directory a reader then refuses)."""
    if not (out / "oci-layout").is_file() and (out / "oci" / "oci-layout").is_file():
        return out / "oci"
    return out


def write_oci_layout(image: BuiltImage, out_dir: str | os.PathLike[str], store: BlobStore | None = None) -> Path:
    """``LayoutWriter`` handed every layer at once."""
    return LayoutWriter(out_dir, store).finish(image)


def add_artifact_blobs(layout: Path, artifact: ReferringArtifact) -> None:
    """An artifact's manifest and blobs into an existing layout's blobs/ (not its index)."""
    blob_dir = layout / "blobs" / "sha256"
    for digest, content in (*artifact.blobs().items(), (artifact.manifest_digest, artifact.manifest_bytes)):
        target = blob_dir / digest_hex(digest)
        if not target.exists():
            write_new_file(target, content)
