"""Readers for the image formats: OCI layout directory, oci-archive, docker-archive, and
the combined archive that is both (Docker 25 ``docker save``, our own archives).

``open_image`` finds the format and gives an ``ImageReader`` with the raw document bytes
(index, manifest, config) and ``open_blob`` streams; nothing loads a layer in memory.
An archive is indexed once by walking its tar headers (seeking over member data), then
members are read in place as slices of the archive file.

An archive with both ``oci-layout`` and ``manifest.json`` is read through its OCI index
(the documents and blobs verified as for any oci-archive) and also carries its docker
``manifest.json`` entry (``docker_view``), which ``verify`` checks names the same config
and layer blobs in the same order.

Errors: a file or blob that is absent, unparsable or not the expected format is
``InputError`` (exit 2); bytes whose digest or size differ from what references them are
``CheckFailed`` (exit 1), raised by ``verify``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..core.digest import digest_hex, is_digest
from ..core.documents import MAX_DOCUMENT_BYTES, open_regular_file, parse_json_object
from ..core.errors import InputError
from . import media_types
from .types import CLUSTER_PLATFORM, BlobRef, matching_entries


class _Slice(io.RawIOBase):
    """A read-only window [offset, offset+size) of an open file."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        self._handle = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        self._handle.seek(offset)
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

    def readinto(self, buffer) -> int:
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        self._handle.close()
        super().close()


class _DirectoryFiles:
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


class _TarFiles:
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
                    if member.isfile():
                        self.members[name] = (member.offset_data, member.size)
                    elif member.issym() or member.islnk():
                        base = os.path.dirname(name) if member.issym() else ""
                        links[name] = _clean_member_name(os.path.join(base, member.linkname))
        except (tarfile.TarError, EOFError) as exc:
            raise InputError(f"{archive}: not a readable tar archive: {exc}") from exc
        except OSError as exc:
            raise InputError(f"{archive}: cannot read: {exc.strerror}") from exc
        for name, target in links.items():
            if target in self.members:
                self.members[name] = self.members[target]
        archive_size = archive.stat().st_size
        for name, (offset, size) in self.members.items():
            if offset + size > archive_size:
                raise InputError(f"{archive}: member {name} is truncated")

    def describe(self, name: str) -> str:
        return f"{self.archive}:{name}"

    def size(self, name: str) -> int | None:
        found = self.members.get(_clean_member_name(name))
        return None if found is None else found[1]

    def open(self, name: str) -> BinaryIO:
        found = self.members.get(_clean_member_name(name))
        if found is None:
            raise InputError(f"{self.archive}: no member {name}")
        return io.BufferedReader(_Slice(self.archive, *found), buffer_size=1 << 20)


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
    format: str
    path: Path
    files: _DirectoryFiles | _TarFiles
    index_bytes: bytes | None
    manifest_bytes: bytes | None
    manifest_ref: BlobRef | None
    config_ref: BlobRef
    config_bytes: bytes
    layer_refs: list[BlobRef]
    repo_tags: list[str]
    ref_name: str | None
    docker_view: DockerArchiveView | None = None

    def open_blob(self, ref: BlobRef) -> BinaryIO:
        if self.files.size(ref.name) is None:
            raise InputError(
                f"{ref.role} blob {ref.digest or ref.name} is missing: "
                f"{self.files.describe(ref.name)} does not exist"
            )
        return self.files.open(ref.name)

    @property
    def config(self) -> dict:
        return parse_json_object(self.config_bytes, f"{self.files.describe(self.config_ref.name)}")

    @property
    def manifest(self) -> dict | None:
        if self.manifest_bytes is None or self.manifest_ref is None:
            return None
        return parse_json_object(self.manifest_bytes, self.files.describe(self.manifest_ref.name))


def _read_document(files: _DirectoryFiles | _TarFiles, name: str, what: str) -> bytes:
    size = files.size(name)
    if size is None:
        raise InputError(f"{what} missing: {files.describe(name)} does not exist")
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(f"{files.describe(name)}: {what} is {size} bytes, too large")
    with files.open(name) as handle:
        raw = handle.read(MAX_DOCUMENT_BYTES + 1)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{files.describe(name)}: {what} is over {MAX_DOCUMENT_BYTES} bytes, too large")
    return raw


def _blob_name(digest: object, where: str) -> str:
    if not isinstance(digest, str) or ":" not in digest:
        raise InputError(f"{where}: invalid digest {digest!r}")
    algorithm, _, hex_part = digest.partition(":")
    if algorithm != "sha256" or not is_digest(digest):
        raise InputError(f"{where}: unsupported or malformed digest {digest!r}")
    return f"blobs/sha256/{digest_hex(digest)}"


def _descriptor(record: object, role: str, where: str) -> BlobRef:
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a descriptor object")
    digest = record.get("digest")
    size = record.get("size")
    media_type = record.get("mediaType", "")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InputError(f"{where}.size: expected a non-negative integer, got {size!r}")
    if not isinstance(media_type, str):
        raise InputError(f"{where}.mediaType: expected a string")
    return BlobRef(role, _blob_name(digest, f"{where}.digest"), str(digest), size, media_type)


def open_image(path: str | os.PathLike[str], ref_name: str | None = None) -> ImageReader:
    """Open an OCI layout directory, an oci-archive or a docker-archive."""
    location = Path(path)
    if location.is_dir():
        return _open_oci(location, _DirectoryFiles(location), "oci-layout", ref_name)
    if not location.exists():
        raise InputError(f"{location}: no such file or directory")
    files = _TarFiles(location)
    if files.size("oci-layout") is not None:
        if files.size("manifest.json") is not None:
            return _open_combined(location, files, ref_name)
        return _open_oci(location, files, "oci-archive", ref_name)
    if files.size("manifest.json") is not None:
        return _open_docker_archive(location, files)
    raise InputError(
        f"{location}: neither an OCI layout (no oci-layout file) nor a docker-archive "
        "(no manifest.json)"
    )


def _open_oci(
    location: Path, files: _DirectoryFiles | _TarFiles, image_format: str, ref_name: str | None
) -> ImageReader:
    layout_where = files.describe("oci-layout")
    layout_doc = parse_json_object(_read_document(files, "oci-layout", "oci-layout file"), layout_where)
    version = layout_doc.get("imageLayoutVersion")
    if version != media_types.OCI_LAYOUT_VERSION:
        raise InputError(
            f"{layout_where}: imageLayoutVersion is {version!r}, expected "
            f"{media_types.OCI_LAYOUT_VERSION!r}"
        )
    index_bytes = _read_document(files, "index.json", "index.json")
    index_where = files.describe("index.json")
    index = parse_json_object(index_bytes, index_where)
    manifest_ref, chosen_ref_name = _select_manifest(index, index_where, files, ref_name)
    manifest_bytes = _read_document(files, manifest_ref.name, f"manifest {manifest_ref.digest}")
    manifest_where = files.describe(manifest_ref.name)
    manifest = parse_json_object(manifest_bytes, manifest_where)
    config_ref = _descriptor(manifest.get("config"), "config", f"{manifest_where}: config")
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise InputError(f"{manifest_where}: layers: expected a list")
    layer_refs = [
        _descriptor(record, f"layer {position}", f"{manifest_where}: layers[{position}]")
        for position, record in enumerate(layers)
    ]
    config_bytes = _read_document(files, config_ref.name, f"config {config_ref.digest}")
    return ImageReader(
        format=image_format,
        path=location,
        files=files,
        index_bytes=index_bytes,
        manifest_bytes=manifest_bytes,
        manifest_ref=manifest_ref,
        config_ref=config_ref,
        config_bytes=config_bytes,
        layer_refs=layer_refs,
        repo_tags=[],
        ref_name=chosen_ref_name,
    )


def _select_manifest(
    index: dict,
    where: str,
    files: _DirectoryFiles | _TarFiles,
    ref_name: str | None,
) -> tuple[BlobRef, str | None]:
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise InputError(f"{where}: manifests: expected a non-empty list")
    candidates = []
    for position, record in enumerate(manifests):
        ref = _descriptor(record, "manifest", f"{where}: manifests[{position}]")
        annotations = record.get("annotations") or {}
        name = (
            annotations.get(media_types.REF_NAME_ANNOTATION)
            if isinstance(annotations, dict)
            else None
        )
        candidates.append((ref, name))
    if ref_name is not None:
        candidates = [c for c in candidates if c[1] == ref_name]
        if not candidates:
            raise InputError(f"{where}: no manifest is tagged {ref_name!r}")
    if len(candidates) > 1:
        names = ", ".join(repr(c[1]) for c in candidates)
        raise InputError(f"{where}: holds {len(candidates)} manifests ({names}); name one")
    ref, name = candidates[0]
    if ref.media_type in media_types.INDEX_MEDIA_TYPES:
        # A nested index (multi-platform image): follow its manifest for the cluster's
        # platform, else its only or first manifest.
        nested_where = files.describe(ref.name)
        nested = parse_json_object(_read_document(files, ref.name, f"index {ref.digest}"), nested_where)
        entries = nested.get("manifests")
        if isinstance(entries, list) and len(entries) > 1:
            preferred = matching_entries(entries, CLUSTER_PLATFORM)
            nested = {**nested, "manifests": (preferred or entries)[:1]}
        nested_ref, _ = _select_manifest(nested, nested_where, files, None)
        return nested_ref, name
    return ref, name


def _docker_manifest_entries(files: _TarFiles, expectation: str) -> tuple[list[object], str]:
    where = files.describe("manifest.json")
    try:
        entries = json.loads(_read_document(files, "manifest.json", "manifest.json"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: not valid JSON: {exc}") from exc
    if not isinstance(entries, list):
        raise InputError(f"{where}: expected {expectation}")
    return entries, where


def _docker_entry_names(entry: dict, where: str) -> tuple[str, list[str], list[str]]:
    config_name = entry.get("Config")
    layer_names = entry.get("Layers")
    if not isinstance(config_name, str):
        raise InputError(f"{where}.Config: expected a file name")
    if not isinstance(layer_names, list) or not all(isinstance(n, str) for n in layer_names):
        raise InputError(f"{where}.Layers: expected a list of file names")
    repo_tags = entry.get("RepoTags") or []
    if not isinstance(repo_tags, list):
        raise InputError(f"{where}.RepoTags: expected a list")
    return config_name, layer_names, [str(tag) for tag in repo_tags]


def _open_combined(location: Path, files: _TarFiles, ref_name: str | None) -> ImageReader:
    reader = _open_oci(location, files, COMBINED_FORMAT, ref_name)
    expectation = "a non-empty list of image objects"
    entries, where = _docker_manifest_entries(files, expectation)
    if not entries or not all(isinstance(entry, dict) for entry in entries):
        raise InputError(f"{where}: expected {expectation}")
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


def _open_docker_archive(location: Path, files: _TarFiles) -> ImageReader:
    entries, where = _docker_manifest_entries(files, "a list with exactly one image")
    if len(entries) != 1 or not isinstance(entries[0], dict):
        raise InputError(f"{where}: expected a list with exactly one image")
    config_name, layer_names, repo_tags = _docker_entry_names(entries[0], f"{where}: [0]")
    config_bytes = _read_document(files, config_name, f"config {config_name}")
    config_ref = BlobRef("config", config_name, None, len(config_bytes), media_types.DOCKER_CONFIG)
    layer_refs = []
    for position, name in enumerate(layer_names):
        size = files.size(name)
        if size is None:
            raise InputError(f"{where}: [0].Layers[{position}]: {files.describe(name)} is missing")
        # docker save, skopeo and we name layer files after their digest: check it then
        stem = name.rsplit("/", 1)[-1].removesuffix(".tar").removesuffix(".gz")
        named_digest = f"sha256:{stem}" if is_digest(f"sha256:{stem}") else None
        layer_refs.append(BlobRef(f"layer {position}", name, named_digest, size, ""))
    return ImageReader(
        format="docker-archive",
        path=location,
        files=files,
        index_bytes=None,
        manifest_bytes=None,
        manifest_ref=None,
        config_ref=config_ref,
        config_bytes=config_bytes,
        layer_refs=layer_refs,
        repo_tags=repo_tags,
        ref_name=None,
    )


# Public names for the file access of a layout directory or an archive (the audit uses
# them to read blobs of formats it has already identified).
DirectoryFiles = _DirectoryFiles
TarFiles = _TarFiles
