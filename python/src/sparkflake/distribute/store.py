"""A rank's image store for the blob route: an OCI image layout (``oci-layout``,
``index.json``, ``blobs/sha256/<hex>``) under ``DATA_DIR/image-store``, which skopeo and
podman read as ``oci:DIR``.

Blobs arrive through the chain receiver (``DIR/blobs/sha256/.<hex>.partial``, renamed to
``<hex>`` only once size and sha256 matched). The manifest and ``index.json`` are written by
``commit`` only after every blob the manifest names is present and verified, so the store
never holds a manifest whose blobs are missing; the previous ``index.json`` stays until the
new one replaces it (atomic rename).

Which blobs a rank "holds verified": a blob whose sha256 was checked, remembered under its
stat identity (device, inode, size, mtime, ctime; ``file_hashes.stat_identity``) in
``DIR/sparkflake-verified.json``. A blob changed in place gets a new ctime, so it is hashed
again and, if wrong, fetched again (the receiver moves the wrong copy aside). ``rehash``
ignores the record and reads every blob.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, TypeVar

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.digest import digest_hex, is_digest, sha256_file
from ..core.documents import MAX_DOCUMENT_BYTES
from ..core.errors import CheckFailed, InputError
from ..core.file_hashes import stat_identity
from ..core.own_files import read_own_json
from ..oci.layout import OCI_LAYOUT_BYTES, output_layout
from ..oci.reader import open_image
from ..oci.types import Descriptor
from ..oci.verify import verify_image

AnyPath = TypeVar("AnyPath", bound=PurePath)  # a local Path, or a PurePosixPath on a rank

STORE_NAME = "image-store"
RECORD_NAME = "sparkflake-verified.json"
RECORD_FORMAT = "sparkflake-verified-blobs/v1"


def blob_path(root: AnyPath, digest: str) -> AnyPath:
    return root / "blobs" / "sha256" / digest_hex(digest)


def parse_blobs(document: Any, origin: str) -> list[Descriptor]:
    if not isinstance(document, list):
        raise InputError(f"{origin}: expected a list of blob descriptors")
    found = []
    for position, raw in enumerate(document):
        where = f"{origin}[{position}]"
        if not isinstance(raw, dict) or set(raw) != {"digest", "size", "mediaType"}:
            raise InputError(f"{where}: expected exactly digest, size, mediaType")
        digest, size, media_type = raw["digest"], raw["size"], raw["mediaType"]
        if not isinstance(digest, str) or not digest.startswith("sha256:") or not is_digest(digest):
            raise InputError(f"{where}.digest: expected sha256: and 64 lowercase hex digits, got {digest!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InputError(f"{where}.size: expected a non-negative integer, got {size!r}")
        if not isinstance(media_type, str):
            raise InputError(f"{where}.mediaType: expected a string")
        found.append(Descriptor(media_type, digest, size))
    return found


# ---- the source layout, on rank 0 ---------------------------------------------------------
@dataclass(frozen=True)
class LayoutPlan:
    """What the source layout holds: its documents (bytes, as written) and its blobs."""

    index_bytes: bytes
    manifest_digest: str
    manifest_bytes: bytes
    config: Descriptor
    layers: tuple[Descriptor, ...]
    ref_name: str | None

    @property
    def blobs(self) -> list[Descriptor]:
        return [*self.layers, self.config]

    def as_record(self) -> dict[str, Any]:
        return {
            "index": base64.b64encode(self.index_bytes).decode(),
            "manifest_digest": self.manifest_digest,
            "manifest": base64.b64encode(self.manifest_bytes).decode(),
            "config": self.config.as_record(),
            "layers": [layer.as_record() for layer in self.layers],
            "ref_name": self.ref_name,
        }


def find_layout(path: Path) -> Path:
    """``path`` itself when it is an OCI layout, or the ``oci/`` layout of a build output."""
    layout = output_layout(path)
    if (layout / "oci-layout").is_file():
        return layout
    raise InputError(f"{path}: neither an OCI layout (no oci-layout file) nor a build output with oci/")


def read_layout(layout: Path) -> LayoutPlan:
    """The plan of an OCI layout directory: its documents re-derived from their bytes (the
    index's manifest digest, the manifest's config digest and size), layers only listed."""
    if not layout.is_dir():
        raise InputError(f"{layout}: expected an OCI layout directory")
    reader = open_image(layout)
    # The layers only listed: each rank checks them, entries included, before its import
    # (engine.import_layout), as the archive route does; rank 0 sends what it has.
    report = verify_image(reader, verify_layers=False)
    assert reader.index_bytes is not None and reader.manifest_bytes is not None and report.manifest_digest
    config = Descriptor(reader.config_ref.media_type, report.config_digest, len(reader.config_bytes))
    layers = tuple(Descriptor(ref.media_type, str(ref.digest), int(ref.size or 0)) for ref in reader.layer_refs)
    return LayoutPlan(reader.index_bytes, report.manifest_digest, reader.manifest_bytes, config, layers,
                      reader.ref_name)


def plan_from_document(document: Any, origin: str) -> LayoutPlan:
    if not isinstance(document, dict):
        raise InputError(f"{origin}: expected an object")
    try:
        index_bytes = base64.b64decode(document["index"], validate=True)
        manifest_bytes = base64.b64decode(document["manifest"], validate=True)
        manifest_digest = document["manifest_digest"]
        config = parse_blobs([document["config"]], f"{origin}: config")[0]
        layers = tuple(parse_blobs(document["layers"], f"{origin}: layers"))
        ref_name = document.get("ref_name")
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{origin}: malformed layout plan: {exc}") from exc
    if "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() != manifest_digest:
        raise CheckFailed(f"{origin}: manifest bytes do not have digest {manifest_digest}",
                          check_id="fanout.manifest-digest")
    if ref_name is not None and not isinstance(ref_name, str):
        raise InputError(f"{origin}: ref_name: expected a string")
    return LayoutPlan(index_bytes, manifest_digest, manifest_bytes, config, layers, ref_name)


# ---- what a store holds -------------------------------------------------------------------
class VerifiedRecord:
    """hex digest -> the stat identity the blob had when its sha256 was last checked."""

    def __init__(self, root: Path) -> None:
        self.path = root / RECORD_NAME
        self.blobs: dict[str, list[int]] = {}
        self.dirty = False
        # absent, or no record this store could have written (a link, a FIFO, a directory,
        # unreadable, over the bound, not JSON, nested past the parser): trusts nothing
        document = read_own_json(self.path, "the store's record of verified blobs", MAX_DOCUMENT_BYTES * 4)
        if isinstance(document, dict) and document.get("format") == RECORD_FORMAT:
            blobs = document.get("blobs")
            if isinstance(blobs, dict):
                self.blobs = {key: value for key, value in blobs.items()
                              if isinstance(value, list) and all(isinstance(n, int) for n in value)}

    def trusted(self, digest: str, identity: list[int]) -> bool:
        return self.blobs.get(digest_hex(digest)) == identity

    def remember(self, digest: str, identity: list[int]) -> None:
        if self.blobs.get(digest_hex(digest)) != identity:
            self.blobs[digest_hex(digest)] = identity
            self.dirty = True

    def save(self) -> None:
        if self.dirty:
            document = {"format": RECORD_FORMAT, "blobs": dict(sorted(self.blobs.items()))}
            write_bytes_atomic(self.path, canonical_json_bytes(document) + b"\n")
            self.dirty = False


def held_identity(root: Path, blob: Descriptor, trusted: VerifiedRecord | None) -> list[int] | None:
    """The blob's stat identity if ``root`` holds it with the right size and sha256 (taken
    from ``trusted`` when the identity is unchanged, else read), else None. Regular files
    only: a symlink under a blob name is not a blob this store holds."""
    path = blob_path(root, blob.digest)
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(status.st_mode) or status.st_size != blob.size:
        return None
    identity = stat_identity(status)
    if trusted is not None and trusted.trusted(blob.digest, identity):
        return identity
    if "sha256:" + sha256_file(path) != blob.digest or stat_identity(os.lstat(path)) != identity:
        return None
    return identity


def blob_status(root: Path, blobs: Sequence[Descriptor], *, rehash: bool, remember: bool) -> dict[str, Any]:
    """Which of ``blobs`` ``root`` holds verified; ``present_wrong``: under the final name
    with the wrong size or bytes (the receiver moves it aside before fetching it again).
    ``remember``: keep what was hashed in the store's record (never in a source layout)."""
    record = VerifiedRecord(root)
    held, wrong = [], []
    for blob in blobs:
        identity = held_identity(root, blob, None if rehash else record)
        if identity is not None:
            record.remember(blob.digest, identity)
            held.append(blob.digest)
        elif os.path.lexists(blob_path(root, blob.digest)):
            wrong.append(blob.digest)
    if remember:
        record.save()
    return {"held": held, "present_wrong": wrong}


def recorded_blobs(root: Path) -> list[str]:
    """The blobs ``root`` holds as its record says, unchanged since they were verified (a
    stat each, no hashing): what a rank can answer before it knows the image. A blob not
    listed is sent; its receiver still reuses a correct copy it finds under the name."""
    record = VerifiedRecord(root)
    held = []
    for hex_digest, identity in record.blobs.items():
        path = root / "blobs" / "sha256" / hex_digest
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(status.st_mode) and stat_identity(status) == identity:
            held.append(f"sha256:{hex_digest}")
    return held


def commit(root: Path, plan: LayoutPlan, received: dict[str, list[int]]) -> dict[str, Any]:
    """Write the manifest blob and then ``index.json`` once every blob the manifest names is
    present and verified: ``received`` maps a digest to the identity its receiver reported
    after verifying it in this run; the others must be held as ``held_identity`` says."""
    record = VerifiedRecord(root)
    missing = []
    for blob in plan.blobs:
        path = blob_path(root, blob.digest)
        reported = received.get(blob.digest)
        if reported is not None and os.path.isfile(path) and stat_identity(os.lstat(path)) == reported:
            identity: list[int] | None = reported
        else:
            identity = held_identity(root, blob, record)
        if identity is None:
            missing.append(blob.digest)
        else:
            record.remember(blob.digest, identity)
    if missing:
        record.save()
        raise CheckFailed(f"{root}: {len(missing)} blobs of manifest {plan.manifest_digest} are missing or "
                          f"wrong ({', '.join(missing)}); index.json not written", check_id="fanout.store-blobs")
    manifest = blob_path(root, plan.manifest_digest)
    if not (manifest.is_file() and manifest.read_bytes() == plan.manifest_bytes):
        write_bytes_atomic(manifest, plan.manifest_bytes)
    write_bytes_atomic(root / "oci-layout", OCI_LAYOUT_BYTES)
    write_bytes_atomic(root / "index.json", plan.index_bytes)
    record.save()
    return {"status": "ok", "store": str(root), "manifest_digest": plan.manifest_digest,
            "index_digest": "sha256:" + hashlib.sha256(plan.index_bytes).hexdigest()}
