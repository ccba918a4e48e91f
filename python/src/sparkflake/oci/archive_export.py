"""An archive written on demand from a build's OCI layout (``sparkflake export``).

A build writes the layout alone by default (its blobs are the layer store's bytes, so it
costs no second copy of the image); an oci-archive or docker-archive is written from it
only when a consumer needs a file (``docker load``, the fan-out's archive route). The
image is read back from the layout into the ``BuiltImage`` the build had (documents as
stored, each layer blob where the layout keeps it, the tar mtime from the manifest's
created annotation, the reference from the index) and handed to the same writers
(``oci.archive``), so the archive has the bytes a build with that format writes.

The archive is written into a run directory beside its target, read back and verified
there (``verify_image``: every blob and diffID re-derived, the docker view checked)
against the manifest and config digests the output's ``digests.json`` records, and only
then renamed onto the target: a layout edited since the build, or a blob changed while
it was copied, leaves the previous target as it was. A target in OUT itself (OUT/KIND.tar)
replaces only the archive sparkflake wrote there (listed in OUT's marker, unchanged): an
operator's file of that name, or a symlink there, is refused, never written over or
through (``check_written_entry``), before the work and again before the rename. A file
system with less free space than the archive needs (``archive_space``) is refused before
anything is written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic_write import (
    check_output_parent,
    record_written_entry,
    regular_output,
    run_directory,
)
from ..core.directory_lock import updating_output
from ..core.documents import parse_json_object
from ..core.errors import CheckFailed, InputError
from ..core.interrupts import interrupts_held
from ..core.output_marker import check_written_entry
from ..core.progress import ProgressCallback
from ..core.timestamps import parse_rfc3339
from . import media_types
from .archive import DOCKER_ARCHIVE, OCI_ARCHIVE, write_docker_archive, write_oci_archive
from .blob_store import BlobStore
from .digests_file import DIGESTS_FILE, RecordedDigests, read_digests_file
from .image_model import BuiltImage
from .layer import Layer
from .reader import ImageReader, open_image
from .types import Platform, platform_text
from .verify import config_diff_ids, verify_image

ARCHIVE_KINDS = (OCI_ARCHIVE, DOCKER_ARCHIVE)
_ELSEWHERE = "name another file with -o FILE"


@dataclass(frozen=True)
class ExportedArchive:
    kind: str
    path: Path
    manifest_digest: str
    config_digest: str
    size: int


def archive_name(kind: str) -> str:
    """The file name a build gives the archive of ``kind`` in its output directory."""
    return f"{kind}.tar"


def recorded_digests(out_dir: Path) -> RecordedDigests:
    """OUT/digests.json, which must list each layer's uncompressed size (a zstd image's
    docker-archive stores its layers decompressed, kept in a blob store under their diffID
    and size)."""
    recorded = read_digests_file(out_dir / DIGESTS_FILE)
    # refused here, before any work, when the file names no manifest or lists no layers
    recorded.manifest()
    recorded.layer_sizes()
    return recorded


def image_of_layout(reader: ImageReader, layout: Path, uncompressed_sizes: tuple[int, ...],
                    store: BlobStore) -> BuiltImage:
    """The ``BuiltImage`` a layout (``open_image`` of it) holds: the documents as stored,
    the layer blobs as the layout's files, each layer's uncompressed size as recorded;
    ``store`` is where a zstd image's docker-archive keeps its decompressed layers."""
    manifest_where = reader.files.describe(reader.manifest_ref.name if reader.manifest_ref else "index.json")
    manifest = reader.manifest
    if manifest is None or reader.index_bytes is None or reader.manifest_bytes is None:
        raise InputError(f"{layout}: not an OCI layout with an index and an image manifest")
    annotations = manifest.get("annotations") or {}
    created = annotations.get(media_types.CREATED_ANNOTATION) if isinstance(annotations, dict) else None
    source_date_epoch = parse_rfc3339(created, f"{manifest_where}: annotations.{media_types.CREATED_ANNOTATION}")
    diff_ids = config_diff_ids(reader.config)
    config_where = reader.files.describe(reader.config_ref.name)
    if diff_ids is None or len(diff_ids) != len(reader.layer_refs) or not diff_ids:
        raise InputError(f"{config_where}: rootfs.diff_ids: expected one digest per layer of {manifest_where}")
    if len(uncompressed_sizes) != len(diff_ids):
        raise InputError(f"{layout}: holds {len(diff_ids)} layers, its digests.json records {len(uncompressed_sizes)}")
    layers = tuple(
        Layer(
            digest=ref.digest or "",
            diff_id=diff_id,
            size=ref.size or 0,
            media_type=ref.media_type,
            uncompressed_size=uncompressed_size,
            blob_path=layout / ref.name,
            compression=media_types.COMPRESSION_OF_LAYER_TYPE.get(ref.media_type, ""),
        )
        for ref, diff_id, uncompressed_size in zip(reader.layer_refs, diff_ids, uncompressed_sizes, strict=True)
    )
    repository, tag = _reference(reader, layout)
    return BuiltImage(
        platform=Platform.parse(platform_text(reader.config)),
        repository=repository,
        tag=tag,
        source_date_epoch=source_date_epoch,
        layers=layers,
        config_bytes=reader.config_bytes,
        manifest_bytes=reader.manifest_bytes,
        index_bytes=reader.index_bytes,
        store=store,
    )


def _reference(reader: ImageReader, layout: Path) -> tuple[str, str]:
    """``repository``, ``tag`` of the index entry's image name (what the docker view's
    ``RepoTags`` holds); its tag must be the entry's ref name."""
    where = f"{layout / 'index.json'}: manifests[0].annotations"
    index = parse_json_object(reader.index_bytes or b"{}", str(layout / "index.json"))
    manifests = index.get("manifests")
    entry = manifests[0] if isinstance(manifests, list) and manifests else None
    annotations = entry.get("annotations") if isinstance(entry, dict) else None
    name = annotations.get(media_types.IMAGE_NAME_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(name, str) or ":" not in name.rsplit("/", 1)[-1]:
        raise InputError(f"{where}: {media_types.IMAGE_NAME_ANNOTATION}: expected REPOSITORY:TAG, got {name!r}")
    repository, tag = name.rsplit(":", 1)
    if reader.ref_name is not None and reader.ref_name != tag:
        raise InputError(f"{where}: {media_types.IMAGE_NAME_ANNOTATION} {name!r} and ref name "
                         f"{reader.ref_name!r} name different tags")
    return repository, tag


TAR_BLOCK = 512


def archive_space(reader: ImageReader, kind: str, uncompressed_sizes: tuple[int, ...]) -> int:
    """Bytes the export writes beside its target, at most: each layer blob, document and
    tar header rounded up to tar's 512-byte blocks, and the end blocks; a zstd image's
    docker-archive holds its layers decompressed, once in the archive and once in the
    scratch blob store they are decompressed into."""
    zstd_docker = kind == DOCKER_ARCHIVE and any(ref.media_type.endswith("+zstd") for ref in reader.layer_refs)
    layers = [2 * size for size in uncompressed_sizes] if zstd_docker else [ref.size or 0 for ref in reader.layer_refs]
    documents = [len(reader.config_bytes), len(reader.manifest_bytes or b""), len(reader.index_bytes or b""), 1 << 16]
    blocks = sum(-(-size // TAR_BLOCK) + 1 for size in (*layers, *documents)) + 8
    return blocks * TAR_BLOCK


def export_archive(out_dir: Path, kind: str, target: Path | None = None,
                   progress: ProgressCallback | None = None) -> ExportedArchive:
    """The archive of ``kind`` (oci-archive or docker-archive) of the build output
    ``out_dir``, written from OUT/oci to ``target`` (default OUT/KIND.tar), verified
    before it replaces ``target``."""
    if kind not in ARCHIVE_KINDS:
        raise InputError(f"--format {kind}: expected one of {', '.join(ARCHIVE_KINDS)}")
    layout = out_dir / "oci"
    if not (layout / "index.json").is_file():
        raise InputError(f"{out_dir}: no OCI layout oci/ (not the output of a sparkflake build?)")
    recorded = recorded_digests(out_dir)
    manifest_digest, config_digest = recorded.manifest(), recorded.config_digest
    reader = open_image(layout)
    if reader.manifest_ref is None or reader.manifest_ref.digest != manifest_digest:
        found = reader.manifest_ref.digest if reader.manifest_ref else None
        raise CheckFailed(f"{layout}: holds manifest {found}, {out_dir / DIGESTS_FILE} records {manifest_digest}",
                          check_id="export.manifest")
    if target is None and not os.stat(out_dir).st_mode & stat.S_IWUSR:
        # a Nix store path (0555) is never written into, not even by root, who could
        raise InputError(f"{out_dir}: is read-only (a Nix store path?); name where the archive goes: -o FILE")
    # OUT/KIND.tar is never resolved: a symlink there is refused, not written through
    output = Path(os.path.realpath(out_dir))
    final = regular_output(target) if target is not None else output / archive_name(kind)
    in_output = final.parent == output
    if in_output:
        with updating_output(final.parent):  # not while another export is renaming its archive in
            check_written_entry(final.parent, final.name, _ELSEWHERE)
    check_output_parent(final)
    sizes = recorded.layer_sizes()
    need = archive_space(reader, kind, sizes)
    free = shutil.disk_usage(final.parent).free
    if need > free:
        raise InputError(f"{final.parent}: not enough free disk space for the {kind} (nothing was written): "
                         f"needs about {need >> 20} MiB, {free >> 20} MiB free")
    with run_directory(final.parent, f".{final.name}.export") as work:
        image = image_of_layout(reader, layout, sizes, BlobStore(work / "store"))
        staged = work / final.name
        (write_oci_archive if kind == OCI_ARCHIVE else write_docker_archive)(image, staged)
        report = verify_image(open_image(staged), progress=progress)
        # a zstd docker-archive has no manifest (its layers are stored decompressed): the
        # config, which names every diffID, binds it
        for what, derived, expected in (("manifest", report.manifest_digest, manifest_digest),
                                        ("config", report.config_digest, config_digest)):
            if derived is not None and derived != expected:
                raise CheckFailed(f"{final}: the archive written holds {what} {derived}, "
                                  f"{out_dir / DIGESTS_FILE} records {expected}; not written",
                                  check_id=f"export.{what}")
        size = staged.stat().st_size
        with interrupts_held():  # the rename and its record in OUT's marker, both or neither
            with updating_output(final.parent) if in_output else contextlib.nullcontext():
                if in_output:
                    check_written_entry(final.parent, final.name, _ELSEWHERE)  # it may have changed meanwhile
                    # recorded first (the next build may replace it with OUT): a marker that cannot
                    # be written (a full disk) leaves OUT as it was
                    record_written_entry(final.parent, final.name, staged)
                os.replace(staged, final)
    return ExportedArchive(kind, final, manifest_digest, config_digest, size)
