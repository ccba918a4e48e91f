"""Where an audited image comes from: its documents as stored bytes and a way to stream
each blob, whatever the container (OCI layout, oci-archive, docker-archive, a registry,
a local engine's store).

A source only reads; it never checks. It keeps every document as the exact bytes stored,
so the audit hashes what is there, not a re-serialization. Digests inside documents are
kept as found (even malformed) so the audit can name them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..core.digest import is_digest, sha256_digest
from ..core.documents import MAX_DOCUMENT_BYTES
from ..core.errors import CheckFailed, InputError
from ..oci import media_types
from ..oci.reader import DirectoryFiles, TarFiles
from ..oci.types import BlobRef, Platform


@dataclass
class ImageSource:
    kind: str
    location: str
    manifest_bytes: bytes | None
    manifest_descriptor: BlobRef | None
    config_bytes: bytes
    config_descriptor: BlobRef
    layers: list[BlobRef]
    blob_size: Callable[[BlobRef], int | None]
    open_blob: Callable[[BlobRef], BinaryIO]
    index_bytes: bytes | None = None
    index_platform: dict[str, str] | None = None
    engine_image_id: str | None = None
    repo_tags: list[str] = field(default_factory=list)
    cleanup: Callable[[], None] | None = None
    # A combined archive (oci-archive that is also a docker-archive): what its docker
    # manifest.json names, (config member, layer members), for the audit to compare with
    # the OCI chain; docker and podman load the image manifest.json describes.
    docker_view: tuple[str, list[str]] | None = None

    @property
    def manifest(self) -> dict[str, Any] | None:
        if self.manifest_bytes is None:
            return None
        return parse_document(self.manifest_bytes, f"{self.location}: manifest")

    @property
    def config(self) -> dict[str, Any]:
        return parse_document(self.config_bytes, f"{self.location}: config")


def parse_document(raw: bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: malformed JSON: {exc}", check_id="document.parse") from exc
    if not isinstance(document, dict):
        raise InputError(f"{where}: expected a JSON object", check_id="document.parse")
    return document


def descriptor_from(record: object, role: str, where: str, locate: Callable[[str], str]) -> BlobRef:
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a descriptor object", check_id="document.parse")
    digest = record.get("digest")
    size = record.get("size")
    media_type = record.get("mediaType", "")
    if not is_digest(digest):
        raise InputError(
            f"{where}.digest: expected sha256:<64 lowercase hex digits>, got {digest!r}",
            check_id="digest.well-formed",
        )
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InputError(f"{where}.size: expected a non-negative integer, got {size!r}", check_id="document.parse")
    if not isinstance(media_type, str):
        raise InputError(f"{where}.mediaType: expected a string", check_id="document.parse")
    return BlobRef(role=role, name=locate(digest), digest=digest, size=size, media_type=media_type)


def _blob_path(digest: str) -> str:
    algorithm, _, hex_part = digest.partition(":")
    return f"blobs/{algorithm}/{hex_part}"


def _read_small(files: DirectoryFiles | TarFiles, name: str, what: str) -> bytes:
    size = files.size(name)
    if size is None:
        raise InputError(f"{files.describe(name)}: {what} is missing", check_id="image.readable")
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(
            f"{files.describe(name)}: {what} is {size} bytes, over the {MAX_DOCUMENT_BYTES}-byte limit",
            check_id="document.size",
        )
    with files.open(name) as handle:
        raw = handle.read(MAX_DOCUMENT_BYTES + 1)  # the file may have grown since size()
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{files.describe(name)}: {what} is over the {MAX_DOCUMENT_BYTES}-byte limit", check_id="document.size")
    return raw


def open_file_source(path: str | os.PathLike[str], ref_name: str | None, platform: str | None) -> ImageSource:
    """An OCI layout directory, an oci-archive or a docker-archive."""
    location = Path(path)
    if location.is_dir():
        return _oci_source(DirectoryFiles(location), "oci-layout", str(location), ref_name, platform)
    if not location.exists():
        raise InputError(f"{location}: no such file or directory", check_id="image.readable")
    try:
        files = TarFiles(location)
    except InputError as exc:
        raise InputError(exc.message, check_id="image.readable") from exc
    if files.size("oci-layout") is not None:
        source = _oci_source(files, "oci-archive", str(location), ref_name, platform)
        if files.size("manifest.json") is None:
            return source
        config_name, layer_names, _entry = _docker_manifest_entry(files)
        return dataclasses.replace(source, kind="oci-archive+docker-archive", docker_view=(config_name, layer_names))
    if files.size("manifest.json") is not None:
        return _docker_archive_source(files, str(location))
    raise InputError(
        f"{location}: neither an OCI layout/archive (no oci-layout) nor a docker-archive "
        "(no manifest.json)",
        check_id="image.readable",
    )


def _oci_source(
    files: DirectoryFiles | TarFiles, kind: str, location: str, ref_name: str | None, platform: str | None
) -> ImageSource:
    layout_doc = parse_document(_read_small(files, "oci-layout", "oci-layout file"), files.describe("oci-layout"))
    if layout_doc.get("imageLayoutVersion") != media_types.OCI_LAYOUT_VERSION:
        raise InputError(
            f"{files.describe('oci-layout')}: imageLayoutVersion is "
            f"{layout_doc.get('imageLayoutVersion')!r}, expected {media_types.OCI_LAYOUT_VERSION!r}",
            check_id="image.readable",
        )
    index_bytes = _read_small(files, "index.json", "index.json")
    index_where = files.describe("index.json")
    index = parse_document(index_bytes, index_where)
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise InputError(f"{index_where}: manifests: expected a non-empty list", check_id="document.parse")
    candidates = []
    for position, record in enumerate(manifests):
        descriptor = descriptor_from(record, "manifest", f"{index_where}: manifests[{position}]", _blob_path)
        annotations = record.get("annotations") if isinstance(record, dict) else None
        name = annotations.get(media_types.REF_NAME_ANNOTATION) if isinstance(annotations, dict) else None
        candidates.append((descriptor, name, record.get("platform")))
    if ref_name is not None:
        candidates = [c for c in candidates if c[1] == ref_name]
        if not candidates:
            raise InputError(f"{index_where}: no manifest is tagged {ref_name!r}", check_id="image.readable")
    if len(candidates) > 1:
        names = ", ".join(repr(c[1]) for c in candidates)
        raise InputError(f"{index_where}: holds {len(candidates)} manifests ({names}); name one with :TAG", check_id="image.readable")
    descriptor, _, index_platform = candidates[0]
    if descriptor.media_type in media_types.INDEX_MEDIA_TYPES:
        nested_bytes = _read_small(files, descriptor.name, f"index {descriptor.digest}")
        index_bytes = nested_bytes
        descriptor, index_platform = select_platform_manifest(
            parse_document(nested_bytes, files.describe(descriptor.name)),
            files.describe(descriptor.name),
            platform,
            _blob_path,
        )
    manifest_bytes = _read_small(files, descriptor.name, f"manifest {descriptor.digest}")
    refuse_unreadable_mismatch(manifest_bytes, descriptor, location)
    return source_from_manifest(
        kind,
        location,
        manifest_bytes,
        descriptor,
        lambda d: files.size(d.name),
        lambda d: files.open(d.name),
        lambda d: _read_small(files, d.name, f"config {d.digest}"),
        index_bytes=index_bytes,
        index_platform=index_platform if isinstance(index_platform, dict) else None,
    )


def refuse_unreadable_mismatch(manifest_bytes: bytes, descriptor: BlobRef, location: str) -> None:
    """A manifest whose bytes do not hash to its reference is a mismatch (exit 1), named
    by digest, before anything it says is trusted or parsed."""
    actual = sha256_digest(manifest_bytes)
    if descriptor.digest is not None and actual != descriptor.digest:
        raise CheckFailed(
            f"{location}: manifest bytes hash to {actual}, the reference says {descriptor.digest}",
            check_id="manifest.digest",
        )


def select_platform_manifest(
    index: dict[str, Any], where: str, platform: str | None, locate: Callable[[str], str]
) -> tuple[BlobRef, dict[str, Any] | None]:
    """The manifest of ``platform`` (``os/arch[/variant]``) in an image index."""
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise InputError(f"{where}: manifests: expected a non-empty list", check_id="document.parse")
    found = []
    for position, record in enumerate(manifests):
        descriptor = descriptor_from(record, "manifest", f"{where}: manifests[{position}]", locate)
        record_platform = record.get("platform") if isinstance(record, dict) else None
        found.append((descriptor, record_platform if isinstance(record_platform, dict) else None))
    if platform is None:
        if len(found) == 1:
            return found[0]
        linux = [f for f in found if f[1] and f[1].get("os") == "linux"]
        if len(linux) == 1:
            return linux[0]
        raise InputError(f"{where}: index lists {len(found)} manifests; name the platform", check_id="image.readable")
    try:
        wanted = Platform.parse_any(platform)
    except InputError:
        wanted = None
    for descriptor, record_platform in found:
        if wanted is not None and record_platform and wanted.matches(Platform.of_record(record_platform)):
            return descriptor, record_platform
    raise InputError(f"{where}: no manifest for platform {platform}", check_id="platform.index")


def source_from_manifest(
    kind: str,
    location: str,
    manifest_bytes: bytes,
    manifest_descriptor: BlobRef | None,
    blob_size: Callable[[BlobRef], int | None],
    open_blob: Callable[[BlobRef], BinaryIO],
    read_config: Callable[[BlobRef], bytes],
    **extra: Any,
) -> ImageSource:
    where = f"{location}: manifest {manifest_descriptor.digest if manifest_descriptor else ''}".rstrip()
    manifest = parse_document(manifest_bytes, where)
    locate = extra.pop("locate", _blob_path)
    config_descriptor = descriptor_from(manifest.get("config"), "config", f"{where}: config", locate)
    layer_records = manifest.get("layers")
    if not isinstance(layer_records, list):
        raise InputError(f"{where}: layers: expected a list", check_id="document.parse")
    layers = [
        descriptor_from(record, f"layer {position}", f"{where}: layers[{position}]", locate)
        for position, record in enumerate(layer_records)
    ]
    config_bytes = read_config(config_descriptor)
    return ImageSource(
        kind=kind,
        location=location,
        manifest_bytes=manifest_bytes,
        manifest_descriptor=manifest_descriptor,
        config_bytes=config_bytes,
        config_descriptor=config_descriptor,
        layers=layers,
        blob_size=blob_size,
        open_blob=open_blob,
        **extra,
    )


def _docker_manifest_entry(files: TarFiles) -> tuple[str, list[str], dict[str, Any]]:
    """The one image of a docker-archive's manifest.json: config member, layer members."""
    where = files.describe("manifest.json")
    try:
        entries = json.loads(_read_small(files, "manifest.json", "manifest.json"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: malformed JSON: {exc}", check_id="document.parse") from exc
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise InputError(f"{where}: expected a list with exactly one image", check_id="document.parse")
    entry = entries[0]
    config_name = entry.get("Config")
    layer_names = entry.get("Layers")
    if not isinstance(config_name, str):
        raise InputError(f"{where}: [0].Config: expected a file name", check_id="document.parse")
    if not isinstance(layer_names, list) or not all(isinstance(n, str) for n in layer_names):
        raise InputError(f"{where}: [0].Layers: expected a list of file names", check_id="document.parse")
    return config_name, layer_names, entry


def _docker_archive_source(files: TarFiles, location: str) -> ImageSource:
    config_name, layer_names, entry = _docker_manifest_entry(files)
    config_bytes = _read_small(files, config_name, f"config {config_name}")
    stem = config_name.rsplit("/", 1)[-1].removesuffix(".json")
    named_digest = f"sha256:{stem}" if len(stem) == 64 else None
    config_descriptor = BlobRef(role="config", name=config_name, digest=named_digest, size=len(config_bytes), media_type=media_types.DOCKER_CONFIG)
    layers = [BlobRef(role=f"layer {i}", name=name, digest=None, size=files.size(name), media_type="") for i, name in enumerate(layer_names)]
    repo_tags = entry.get("RepoTags") or []
    return ImageSource(
        kind="docker-archive",
        location=location,
        manifest_bytes=None,
        manifest_descriptor=None,
        config_bytes=config_bytes,
        config_descriptor=config_descriptor,
        layers=layers,
        blob_size=lambda d: files.size(d.name),
        open_blob=lambda d: files.open(d.name),
        repo_tags=[str(t) for t in repo_tags] if isinstance(repo_tags, list) else [],
    )


def open_engine_source(engine: str, name: str, engine_args: Sequence[str] = ()) -> ImageSource:
    """An image in podman's or docker's local store: ``ENGINE image inspect`` for the
    image ID the engine reports, and ``ENGINE save`` to a private temporary docker-archive
    whose bytes the audit re-derives every digest from."""
    binary = shutil.which(engine)
    if binary is None:
        raise InputError(f"{engine}: not installed (needed to audit {engine}:{name})", check_id="image.readable")
    inspect = subprocess.run(
        [binary, *engine_args, "image", "inspect", "--format", "{{.Id}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if inspect.returncode != 0:
        raise InputError(
            f"{engine}:{name}: not in the local store: {inspect.stderr.strip() or inspect.stdout.strip()}",
            check_id="image.readable",
        )
    image_id = inspect.stdout.strip()
    if not image_id.startswith("sha256:"):
        image_id = f"sha256:{image_id}"
    workdir = Path(tempfile.mkdtemp(prefix="sparkflake-audit-"))
    archive = workdir / "image.tar"
    saved = subprocess.run(
        [binary, *engine_args, "save", "--format", "docker-archive", "-o", str(archive), name]
        if engine == "podman"
        else [binary, *engine_args, "save", "-o", str(archive), name],
        capture_output=True,
        text=True,
        check=False,
    )
    if saved.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise InputError(f"{engine}:{name}: save failed: {saved.stderr.strip()}", check_id="image.readable")
    source = open_file_source(archive, None, None)
    source.kind = engine
    source.location = f"{engine}:{name}"
    source.engine_image_id = image_id
    source.cleanup = lambda: shutil.rmtree(workdir, ignore_errors=True)
    return source
