"""Readers for the image formats: OCI layout directory, oci-archive, docker-archive, and
the combined archive that is both (Docker 25 ``docker save``, our own archives); a
registry's image is read by ``oci.remote_image`` into the same ``ImageReader``.

``open_image`` finds the format and gives an ``ImageReader`` with the raw document bytes
(index, manifest, config), kept exactly as stored so that what is hashed is what is there,
and ``open_blob`` streams; nothing loads a layer in memory. An archive is indexed once by
walking its tar headers (seeking over member data), then members are read in place as
slices of the archive file. A manifest whose bytes do not hash to the index's reference is
refused before anything it says is parsed or followed.

An archive with both ``oci-layout`` and ``manifest.json`` is read through its OCI index
(the documents and blobs verified as for any oci-archive) and also carries its docker
``manifest.json`` entry (``docker_view``), which ``verify`` checks names the same config
and layer blobs in the same order.

Errors: a file or blob that is absent, unparsable or not the expected format is
``InputError`` (exit 2, its check id says which: ``image.readable``, ``document.parse``,
``document.size``, ``digest.well-formed``, ``layout.inside``, ``layout.regular-file``,
``platform.index``); bytes whose digest or size differ from what references them are
``CheckFailed`` (exit 1), raised by ``verify`` (by the reader for the manifest).
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

from ..core.digest import digest_hex, is_digest
from ..core.documents import MAX_DOCUMENT_BYTES, open_regular_file, parse_json, parse_json_object
from ..core.errors import InputError
from . import media_types
from .document_rules import (
    docker_repo_tags,
    require_config_fields,
    require_consistent_data,
    require_descriptor_fields,
    require_layers_rootfs,
    require_schema_version,
)
from .stored_blob import stored_document
from .types import BlobRef, select_index_entry


class _Prefix(io.RawIOBase):
    """The first ``size`` bytes of ``handle`` (read from where it stands); closing it closes
    the handle."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self._handle = handle
        self._remaining = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._remaining <= 0:
            return b""
        if size < 0 or size > self._remaining:
            size = self._remaining
        chunk = self._handle.read(size)
        self._remaining -= len(chunk)
        return chunk

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]  # io.BufferedReader hands it only these
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        self._handle.close()
        super().close()


class ImageFiles(Protocol):
    """Named files of an image's container (layout paths, archive members, registry
    digests): ``size`` is None for an absent one."""

    def describe(self, name: str) -> str: ...

    def size(self, name: str) -> int | None: ...

    def open(self, name: str) -> BinaryIO: ...


class DirectoryFiles:
    """The files of a layout directory. What is read: a regular file at its path inside
    the layout, or a symlink that resolves to one inside the layout. A symlink out of it
    (to a host file, ``/dev/zero``) is refused (``layout.inside``), and so is anything
    but a regular file (``layout.regular-file``: a FIFO would hang, a device never ends)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._real_root = os.path.realpath(root)

    def describe(self, name: str) -> str:
        return str(self.root / name)

    def _inside(self, name: str) -> Path:
        path = self.root / name
        real = os.path.realpath(path)
        if real != self._real_root and not real.startswith(self._real_root.rstrip(os.sep) + os.sep):
            raise InputError(
                f"{path}: resolves to {real}, outside the layout {self.root} (only files inside it are read)",
                check_id="layout.inside",
            )
        return path

    def size(self, name: str) -> int | None:
        try:
            return os.stat(self._inside(name)).st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def open(self, name: str) -> BinaryIO:
        path = self._inside(name)
        try:
            fd = open_regular_file(path, "an image document or blob")
        except InputError as exc:
            raise InputError(exc.message, check_id="layout.regular-file") from None
        return os.fdopen(fd, "rb")


class TarFiles:
    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.members: dict[str, tuple[int, int]] = {}
        links: dict[str, str] = {}
        try:
            fd = open_regular_file(archive, "an image archive")
        except InputError as exc:
            raise InputError(exc.message, check_id="image.readable") from None
        try:
            with os.fdopen(fd, "rb") as handle, tarfile.open(fileobj=handle, mode="r:") as tar:
                for member in tar:
                    name = _clean_member_name(member.name)
                    if (member.isfile() or member.issym() or member.islnk()) and (
                        name in self.members or name in links
                    ):
                        # docker load, skopeo and we could each take another copy
                        raise InputError(f"{archive}: member {name} appears twice", check_id="image.readable")
                    if member.isfile():
                        self.members[name] = (member.offset_data, member.size)
                    elif member.issym() or member.islnk():
                        base = os.path.dirname(name) if member.issym() else ""
                        links[name] = _clean_member_name(os.path.join(base, member.linkname))
                _refuse_data_after_the_end(archive, handle, tar.offset)
        except (tarfile.TarError, EOFError) as exc:
            raise InputError(f"{archive}: not a readable tar archive: {exc}", check_id="image.readable") from exc
        except OSError as exc:
            raise InputError(f"{archive}: cannot read: {exc.strerror}", check_id="image.readable") from exc
        for name, target in links.items():
            if target in self.members:
                self.members[name] = self.members[target]
        archive_size = archive.stat().st_size
        for name, (offset, size) in self.members.items():
            if offset + size > archive_size:
                raise InputError(f"{archive}: member {name} is truncated", check_id="image.readable")

    def describe(self, name: str) -> str:
        return f"{self.archive}:{name}"

    def size(self, name: str) -> int | None:
        found = self.members.get(_clean_member_name(name))
        return None if found is None else found[1]

    def open(self, name: str) -> BinaryIO:
        found = self.members.get(_clean_member_name(name))
        if found is None:
            raise InputError(f"{self.archive}: no member {name}", check_id="image.readable")
        offset, size = found
        handle = open(self.archive, "rb", buffering=0)  # noqa: SIM115 - closed with the prefix
        handle.seek(offset)
        return io.BufferedReader(_Prefix(handle, size), buffer_size=1 << 20)


def _refuse_data_after_the_end(archive: Path, handle: BinaryIO, end: int) -> None:
    """tarfile stops at the first zero block (``end``); Go's archive/tar refuses a header
    after a single one, and ``tar --ignore-zeros`` reads members hidden after the two: only
    zeros (a writer's record padding) may follow."""
    handle.seek(end)
    position = end
    while chunk := handle.read(1 << 20):
        if chunk.strip(b"\0"):
            at = position + next(index for index, byte in enumerate(chunk) if byte)
            raise InputError(
                f"{archive}: data at byte {at}, after the archive's end-of-archive block: members there are "
                "refused by Go's archive/tar or hidden from it",
                check_id="image.readable",
            )
        position += len(chunk)


def _clean_member_name(name: str) -> str:
    return os.path.normpath(name).lstrip("/").removeprefix("./")


COMBINED_FORMAT = "oci-archive+docker-archive"


@dataclass(frozen=True)
class DockerArchiveView:
    """The docker ``manifest.json`` entry of a combined archive: the member names it
    gives for the config and the layers, normalized as tar member names."""

    where: str
    position: int
    config_name: str
    layer_names: tuple[str, ...]
    repo_tags: tuple[str, ...]


@dataclass
class ImageReader:
    """An image's documents as stored and its blobs as named files. A docker-archive
    stores no index and no manifest; only a layout names a manifest (``ref_name``)."""

    format: str
    location: str
    files: ImageFiles
    config_ref: BlobRef
    config_bytes: bytes
    layer_refs: list[BlobRef]
    index_bytes: bytes | None = None
    manifest_bytes: bytes | None = None
    manifest_ref: BlobRef | None = None
    repo_tags: list[str] = field(default_factory=list)
    ref_name: str | None = None
    # the ``platform`` object of the index entry the manifest was chosen by, if any
    index_platform: dict[str, Any] | None = None
    docker_view: DockerArchiveView | None = None

    def missing_blob(self, ref: BlobRef) -> InputError:
        return InputError(
            f"{ref.role} blob {ref.digest or ref.name} is missing: "
            f"{self.files.describe(ref.name)} does not exist"
        )

    def open_blob(self, ref: BlobRef) -> BinaryIO:
        """The blob's bytes, at most one past its descriptor's size: enough for a check to see
        it is longer, and no more (a registry's body without end, after a HEAD that gave the
        right size, would otherwise be read for ever)."""
        if self.files.size(ref.name) is None:
            raise self.missing_blob(ref)
        handle = self.files.open(ref.name)
        if ref.size is None:
            return handle
        # read() passes straight through (no copy); a stream's reader needs nothing else of it
        return cast("BinaryIO", _Prefix(handle, ref.size + 1))

    @property
    def config(self) -> dict[str, Any]:
        where = self.files.describe(self.config_ref.name)
        config = parse_json_object(self.config_bytes, where, check_id="document.parse")
        require_layers_rootfs(config, where)
        require_config_fields(config, where)
        return config

    @property
    def manifest(self) -> dict[str, Any] | None:
        if self.manifest_bytes is None or self.manifest_ref is None:
            return None
        return parse_json_object(self.manifest_bytes, self.files.describe(self.manifest_ref.name), check_id="document.parse")


def _read_document(files: ImageFiles, name: str, what: str) -> bytes:
    """A document's bytes, bounded: never more than ``MAX_DOCUMENT_BYTES`` are read."""
    size = files.size(name)
    if size is None:
        raise InputError(f"{what} missing: {files.describe(name)} does not exist", check_id="image.readable")
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(f"{files.describe(name)}: {what} is {size} bytes, too large", check_id="document.size")
    with files.open(name) as handle:
        raw = handle.read(MAX_DOCUMENT_BYTES + 1)  # the file may have grown since size()
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise InputError(
            f"{files.describe(name)}: {what} is over {MAX_DOCUMENT_BYTES} bytes, too large", check_id="document.size"
        )
    return raw


def checked_digest(digest: object, where: str) -> str:
    if not isinstance(digest, str) or not is_digest(digest):
        raise InputError(
            f"{where}: expected sha256:<64 lowercase hex digits>, got {digest!r}", check_id="digest.well-formed"
        )
    return digest


def _layout_blob_name(digest: object, where: str) -> str:
    """Where a layout (directory or archive) stores the blob of ``digest``."""
    return f"blobs/sha256/{digest_hex(checked_digest(digest, where))}"


def _descriptor(record: object, role: str, where: str, locate: Callable[[object, str], str]) -> BlobRef:
    """A descriptor of a document as a ``BlobRef``, its blob found by ``locate``."""
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a descriptor object", check_id="document.parse")
    digest = record.get("digest")
    size = record.get("size")
    media_type = record.get("mediaType", "")
    name = locate(digest, f"{where}.digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InputError(f"{where}.size: expected a non-negative integer, got {size!r}", check_id="document.parse")
    require_consistent_data(record, where)
    if not isinstance(media_type, str):
        raise InputError(f"{where}.mediaType: expected a string", check_id="document.parse")
    return BlobRef(role, name, str(digest), size, media_type)


def open_image(
    path: str | os.PathLike[str], ref_name: str | None = None, platform: str | None = None
) -> ImageReader:
    """Open an OCI layout directory, an oci-archive or a docker-archive; ``platform``
    (``OS/ARCH[/VARIANT]``) picks the manifest of a multi-platform index."""
    location = Path(path)
    if location.is_dir():
        return _open_oci(location, DirectoryFiles(location), "oci-layout", ref_name, platform)
    if not location.exists():
        raise InputError(f"{location}: no such file or directory", check_id="image.readable")
    files = TarFiles(location)
    if files.size("oci-layout") is not None:
        if files.size("manifest.json") is not None:
            return _open_combined(location, files, ref_name, platform)
        return _open_oci(location, files, "oci-archive", ref_name, platform)
    if files.size("manifest.json") is not None:
        return _open_docker_archive(location, files)
    raise InputError(
        f"{location}: neither an OCI layout (no oci-layout file) nor a docker-archive "
        "(no manifest.json)",
        check_id="image.readable",
    )


def _open_oci(
    location: Path, files: DirectoryFiles | TarFiles, image_format: str, ref_name: str | None, platform: str | None
) -> ImageReader:
    layout_where = files.describe("oci-layout")
    layout_doc = parse_json_object(_read_document(files, "oci-layout", "oci-layout file"), layout_where,
                                   check_id="document.parse")
    version = layout_doc.get("imageLayoutVersion")
    if version != media_types.OCI_LAYOUT_VERSION:
        raise InputError(
            f"{layout_where}: imageLayoutVersion is {version!r}, expected "
            f"{media_types.OCI_LAYOUT_VERSION!r}",
            check_id="image.readable",
        )
    index_bytes = _read_document(files, "index.json", "index.json")
    index_where = files.describe("index.json")
    index = parse_json_object(index_bytes, index_where, check_id="document.parse")
    require_schema_version(index, index_where)
    require_descriptor_fields(index, index_where)
    manifest_ref, chosen_ref_name, index_platform = _select_manifest(index, index_where, files, ref_name, platform)
    manifest_bytes = _read_document(files, manifest_ref.name, f"manifest {manifest_ref.digest}")
    return reader_from_manifest(
        image_format, str(location), files, manifest_bytes, manifest_ref, _layout_blob_name,
        index_bytes=index_bytes, index_platform=index_platform, ref_name=chosen_ref_name,
    )


def reader_from_manifest(
    image_format: str,
    location: str,
    files: ImageFiles,
    manifest_bytes: bytes,
    manifest_ref: BlobRef,
    locate: Callable[[object, str], str],
    *,
    index_bytes: bytes | None,
    index_platform: dict[str, Any] | None,
    ref_name: str | None = None,
) -> ImageReader:
    """The image an image manifest describes; the manifest's bytes must hash to
    ``manifest_ref`` before anything it says is parsed or followed."""
    manifest_where = files.describe(manifest_ref.name)
    stored_document(manifest_ref, manifest_bytes, manifest_where).refuse_difference()
    manifest = parse_json_object(manifest_bytes, manifest_where, check_id="document.parse")
    require_schema_version(manifest, manifest_where)
    require_descriptor_fields(manifest, manifest_where)
    config_ref = _descriptor(manifest.get("config"), "config", f"{manifest_where}: config", locate)
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise InputError(f"{manifest_where}: layers: expected a list", check_id="document.parse")
    layer_refs = [
        _descriptor(record, f"layer {position}", f"{manifest_where}: layers[{position}]", locate)
        for position, record in enumerate(layers)
    ]
    config_bytes = _read_document(files, config_ref.name, f"config {config_ref.digest}")
    return ImageReader(
        image_format, location, files, config_ref, config_bytes, layer_refs,
        index_bytes=index_bytes, manifest_bytes=manifest_bytes, manifest_ref=manifest_ref,
        ref_name=ref_name, index_platform=index_platform,
    )


def select_platform_manifest(
    index: dict[str, Any], where: str, platform: str | None, locate: Callable[[object, str], str]
) -> tuple[BlobRef, dict[str, Any] | None]:
    """The manifest descriptor of an image index chosen by ``oci.types``' one rule, and
    the ``platform`` object of its entry."""
    require_schema_version(index, where)
    require_descriptor_fields(index, where)
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise InputError(f"{where}: manifests: expected a non-empty list", check_id="document.parse")
    entry = select_index_entry(manifests, platform, where)
    ref = _descriptor(entry, "manifest", f"{where}: manifests[{manifests.index(entry)}]", locate)
    entry_platform = entry.get("platform")
    return ref, entry_platform if isinstance(entry_platform, dict) else None


def _select_manifest(
    index: dict[str, Any],
    where: str,
    files: DirectoryFiles | TarFiles,
    ref_name: str | None,
    platform: str | None,
) -> tuple[BlobRef, str | None, dict[str, Any] | None]:
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise InputError(f"{where}: manifests: expected a non-empty list", check_id="document.parse")
    candidates = []
    for position, record in enumerate(manifests):
        ref = _descriptor(record, "manifest", f"{where}: manifests[{position}]", _layout_blob_name)
        annotations = record.get("annotations") or {}
        name = (
            annotations.get(media_types.REF_NAME_ANNOTATION)
            if isinstance(annotations, dict)
            else None
        )
        entry_platform = record.get("platform")
        candidates.append((ref, name, entry_platform if isinstance(entry_platform, dict) else None))
    if ref_name is not None:
        candidates = [c for c in candidates if c[1] == ref_name]
        if not candidates:
            raise InputError(f"{where}: no manifest is tagged {ref_name!r}", check_id="image.readable")
    if len(candidates) > 1:
        names = ", ".join(repr(c[1]) for c in candidates)
        raise InputError(
            f"{where}: holds {len(candidates)} manifests ({names}); name one", check_id="image.readable"
        )
    ref, name, entry_platform = candidates[0]
    if ref.media_type in media_types.INDEX_MEDIA_TYPES:
        # A nested index (multi-platform image): follow its manifest for the platform.
        nested_where = files.describe(ref.name)
        nested = parse_json_object(_read_document(files, ref.name, f"index {ref.digest}"), nested_where, check_id="document.parse")
        nested_ref, nested_platform = select_platform_manifest(nested, nested_where, platform, _layout_blob_name)
        return nested_ref, name, nested_platform
    return ref, name, entry_platform


def _docker_manifest_entries(files: TarFiles, expectation: str) -> tuple[list[Any], str]:
    where = files.describe("manifest.json")
    try:
        entries = parse_json(_read_document(files, "manifest.json", "manifest.json"), where)
    except InputError as exc:
        raise InputError(exc.message, check_id="document.parse") from None
    if not isinstance(entries, list):
        raise InputError(f"{where}: expected {expectation}", check_id="document.parse")
    return entries, where


def _docker_entry_names(entry: dict[str, Any], where: str) -> tuple[str, list[str], list[str]]:
    config_name = entry.get("Config")
    layer_names = entry.get("Layers")
    if not isinstance(config_name, str):
        raise InputError(f"{where}.Config: expected a file name", check_id="document.parse")
    if not isinstance(layer_names, list) or not all(isinstance(n, str) for n in layer_names):
        raise InputError(f"{where}.Layers: expected a list of file names", check_id="document.parse")
    return config_name, layer_names, docker_repo_tags(entry, where)


def _open_combined(location: Path, files: TarFiles, ref_name: str | None, platform: str | None) -> ImageReader:
    reader = _open_oci(location, files, COMBINED_FORMAT, ref_name, platform)
    expectation = "a non-empty list of image objects"
    entries, where = _docker_manifest_entries(files, expectation)
    if not entries or not all(isinstance(entry, dict) for entry in entries):
        raise InputError(f"{where}: expected {expectation}", check_id="document.parse")
    views = []
    for position, entry in enumerate(entries):
        config_name, layer_names, repo_tags = _docker_entry_names(entry, f"{where}: [{position}]")
        views.append(
            DockerArchiveView(
                where=where,
                position=position,
                config_name=_clean_member_name(config_name),
                layer_names=tuple(_clean_member_name(name) for name in layer_names),
                repo_tags=tuple(repo_tags),
            )
        )
    # docker save of several images lists each: the entry for the image the OCI index
    # selected is the one naming its config; with none, verify reports the first.
    matching = [view for view in views if view.config_name == reader.config_ref.name]
    reader.docker_view = (matching or views)[0]
    reader.repo_tags = list(reader.docker_view.repo_tags)
    return reader


def _named_digest(name: str, suffixes: tuple[str, ...]) -> str | None:
    """docker save, skopeo and we name a docker-archive's files after their digest: the
    digest a name gives, for the bytes to be checked against, or None."""
    stem = name.rsplit("/", 1)[-1]
    for suffix in suffixes:
        stem = stem.removesuffix(suffix)
    return f"sha256:{stem}" if is_digest(f"sha256:{stem}") else None


def _open_docker_archive(location: Path, files: TarFiles) -> ImageReader:
    entries, where = _docker_manifest_entries(files, "a list with exactly one image")
    if len(entries) != 1 or not isinstance(entries[0], dict):
        raise InputError(f"{where}: expected a list with exactly one image", check_id="document.parse")
    config_name, layer_names, repo_tags = _docker_entry_names(entries[0], f"{where}: [0]")
    config_bytes = _read_document(files, config_name, f"config {config_name}")
    config_ref = BlobRef(
        "config", config_name, _named_digest(config_name, (".json",)), len(config_bytes), media_types.DOCKER_CONFIG
    )
    layer_refs = []
    for position, name in enumerate(layer_names):
        size = files.size(name)
        if size is None:
            raise InputError(
                f"{where}: [0].Layers[{position}]: {files.describe(name)} is missing", check_id="image.readable"
            )
        layer_refs.append(BlobRef(f"layer {position}", name, _named_digest(name, (".tar", ".gz")), size, ""))
    return ImageReader("docker-archive", str(location), files, config_ref, config_bytes, layer_refs, repo_tags=repo_tags)
