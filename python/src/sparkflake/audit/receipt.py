"""Re-check a full receipt against an image (OCI layout, oci-archive or docker-archive).

Everything is re-derived from the image's bytes: the manifest, config and layer digests
(``oci.verify``), then the receipt's claims about them: subject = manifest digest, config
and layer byproducts, labels = the receipt's labels, the in-image receipt equal to the one
the full receipt derives from, both manifests in ``/etc/sparkflake/`` equal to their
byproduct digests, every retained ELF file and every overlay target at its recorded
sha256 in the merged image filesystem (whiteouts applied).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compose import generated, receipt
from ..compose.verification import FAILED, PASSED, LinkResult
from ..core.canonical_json import readable_json_bytes
from ..core.documents import objects_of_array, parse_json_object
from ..core.errors import CheckFailed, InputError, SparkflakeError
from ..oci.entry_safety import OPAQUE_WHITEOUT, WHITEOUT_PREFIX
from ..oci.layer_scan import CAPTURE_LIMIT, TarMember
from ..oci.layout import output_layout
from ..oci.reader import open_image
from ..oci.verify import verify_image
from .receipt_checks import label_problems, layer_problems

ABSENT = ""


def merged_files(layers: Iterable[Sequence[TarMember]], wanted: Iterable[str]) -> dict[str, tuple[str, int]]:
    """sha256 and size of the ``wanted`` image paths (no leading '/') that are regular
    files in the merged filesystem of ``layers`` (each layer's members in stream order, as
    ``scan_layer`` records them; the bottom layer first).

    Layers are applied bottom to top, each member in order: a regular file sets its path,
    any other member removes it; a whiteout ``.wh.NAME`` removes a path and everything
    below it, an opaque ``.wh..wh..opq`` everything below its directory that lower layers
    put there (what its own layer unpacked before it stays, as in containers/storage's and
    moby's UnpackLayer, pkg/archive/diff.go). Paths absent at the end are left out.
    """
    wanted_set = {path.lstrip("/") for path in wanted}
    state: dict[str, tuple[str, int]] = {}
    for members in layers:
        unpacked: set[str] = set()  # wanted paths this layer has set so far: an opaque marker keeps them
        for member in members:
            parent, base = posixpath.split(member.path)
            if base == OPAQUE_WHITEOUT:
                below = f"{parent}/" if parent else ""
                for path in [p for p in state if p.startswith(below) and p not in unpacked]:
                    del state[path]
            elif base.startswith(WHITEOUT_PREFIX):
                removed = posixpath.join(parent, base[len(WHITEOUT_PREFIX):])
                for path in [p for p in state if p == removed or p.startswith(f"{removed}/")]:
                    del state[path]
            elif member.path in wanted_set:
                unpacked.add(member.path)
                if member.sha256 is None:
                    state.pop(member.path, None)
                else:
                    state[member.path] = (member.sha256, member.size)
    return state


@dataclass(frozen=True)
class ReceiptReport:
    image_format: str
    manifest_digest: str | None
    config_digest: str
    links: tuple[LinkResult, ...]

    @property
    def ok(self) -> bool:
        return all(link.status == PASSED for link in self.links)

    def as_record(self) -> dict[str, Any]:
        return {
            "format": self.image_format,
            "manifest": self.manifest_digest,
            "config": self.config_digest,
            "ok": self.ok,
            "links": [link.as_record() for link in self.links],
        }


def verify_receipt(receipt_path: str | os.PathLike[str], image_path: str | os.PathLike[str]) -> ReceiptReport:
    """Every link is checked; a ``CheckFailed`` names the first failing one."""
    full = receipt.read_build_receipt(receipt_path)
    wanted_manifests = {
        generated.RECEIPT_PATH: receipt.IN_IMAGE_RECEIPT,
        generated.RETAINED_NATIVE_PATH: receipt.RETAINED_NATIVE,
        generated.OVERLAY_PATH: receipt.OVERLAY,
    }
    # The manifests say which files to hash and sit in the top layer: the one pass that
    # re-derives every digest also hashes every file and keeps the manifests' bytes.
    report = verify_image(
        open_image(output_layout(Path(image_path))),  # a build's OUT: its layout OUT/oci
        capture_paths=frozenset(path.lstrip("/") for path in wanted_manifests),
        record_members=True,
    )
    layer_members = [scan.members for scan in report.layer_scans]
    documents = merged_files(layer_members, wanted_manifests)
    links: list[LinkResult] = []

    def link(link_id: str, check: Callable[[], str]) -> None:
        try:
            detail = check()
        except SparkflakeError as exc:
            links.append(LinkResult(link_id, FAILED, exc.message))
        else:
            links.append(LinkResult(link_id, PASSED, detail))

    def subject() -> str:
        expected = full.subject_digests[0]
        if report.manifest_digest is None:
            return f"{report.format} carries no OCI manifest; subject {expected} checked through config and layers"
        if report.manifest_digest != expected:
            raise CheckFailed(f"image manifest digest {report.manifest_digest}, receipt subject {expected}")
        return f"subject = manifest {expected}"

    def config() -> str:
        recorded = full.byproduct(receipt.CONFIG)
        expected = f"sha256:{recorded.sha256}" if recorded is not None else None
        if report.config_digest != expected:
            raise CheckFailed(f"image config digest {report.config_digest}, receipt says {expected}")
        return f"config {expected}"

    def layers() -> str:
        recorded = [layer.item for layer in full.layers()]
        problems = layer_problems(recorded, report.layers, blob_digests=report.manifest_digest is not None)
        if problems:
            raise CheckFailed("; ".join(problems))
        return f"{len(recorded)} layers: digests and diffIDs equal"

    def labels() -> str:
        problems = label_problems(full.labels, report.labels)
        if problems:
            raise CheckFailed("; ".join(problems[:10]))
        return f"{len(report.labels)} labels equal to the receipt"

    def embedded() -> str:
        problems = []
        for path, name in wanted_manifests.items():
            item = full.byproduct(name)
            found = documents.get(path.lstrip("/"))
            if item is None:
                problems.append(f"receipt has no {name} byproduct")
            elif found is None:
                problems.append(f"{path}: absent from the image")
            elif found[0] != item.sha256:
                problems.append(f"{path}: sha256 {found[0]}, receipt {item.sha256}")
        derived = readable_json_bytes(receipt.in_image_from_full(full.statement))
        in_image = documents.get(generated.RECEIPT_PATH.lstrip("/"))
        if in_image is not None and in_image[0] != hashlib.sha256(derived).hexdigest():
            problems.append(f"{generated.RECEIPT_PATH}: differs from the in-image statement the full receipt derives")
        if problems:
            raise CheckFailed("; ".join(problems))
        return "in-image receipt and both manifests equal their byproduct digests"

    def content_of(path: str) -> bytes:
        """A manifest's bytes in the merged filesystem. Each layer's scan kept the copies it
        holds of no more than ``CAPTURE_LIMIT`` bytes; the merged file's digest names the one."""
        found = documents.get(path.lstrip("/"))
        if found is None:
            raise CheckFailed(f"{path}: absent from the image")
        for scan in report.layer_scans:
            content = scan.captured_files.get(path.lstrip("/"))
            if content is not None and hashlib.sha256(content).hexdigest() == found[0]:
                return content
        raise CheckFailed(f"{path}: {found[1]} bytes, more than the {CAPTURE_LIMIT} a manifest is read to")

    def _entries(path: str, key: str, fields: Mapping[str, type]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A manifest the image holds (untrusted as the rest of it), and its ``key`` array
        of objects with ``fields`` of those types; a bad one fails the link, naming the path."""
        content = content_of(path)
        try:
            document = parse_json_object(content, path)
            entries = [entry for _, entry in objects_of_array(document.get(key), path, f"$.{key}")]
        except InputError as exc:
            raise CheckFailed(exc.message) from None
        for index, entry in enumerate(entries):
            for name, kind in fields.items():
                if type(entry.get(name)) is not kind:
                    raise CheckFailed(f"{path}: $.{key}[{index}].{name}: expected a {kind.__name__}, got {entry.get(name)!r}")
        return document, entries

    def files() -> tuple[str, str]:
        _, retained = _entries(generated.RETAINED_NATIVE_PATH, "files", {"path": str, "sha256": str, "size": int})
        overlay, overlay_entries = _entries(generated.OVERLAY_PATH, "entries", {"path": str, "target_sha256": str})
        if not isinstance(overlay.get("install_prefix"), str):
            raise CheckFailed(f"{generated.OVERLAY_PATH}: $.install_prefix: expected a string, "
                              f"got {overlay.get('install_prefix')!r}")
        prefix = overlay["install_prefix"].strip("/")
        wanted = {f"{prefix}/{e['path']}" for e in retained} | {f"{prefix}/{e['path']}" for e in overlay_entries}
        merged = merged_files(layer_members, wanted)
        native_problems = []
        for entry in retained:
            found = merged.get(f"{prefix}/{entry['path']}")
            if found != (entry["sha256"], entry["size"]):
                native_problems.append(f"{entry['path']}: image {found}, manifest ({entry['sha256']}, {entry['size']})")
        overlay_problems = []
        for entry in overlay_entries:
            found = merged.get(f"{prefix}/{entry['path']}")
            actual = found[0] if found else ABSENT
            if actual != entry["target_sha256"]:
                overlay_problems.append(f"{entry['path']}: image {actual or 'absent'}, manifest {entry['target_sha256'] or 'absent'}")
        return "; ".join(native_problems), "; ".join(overlay_problems)

    link("subject", subject)
    link("config", config)
    link("layers", layers)
    link("labels", labels)
    link("embedded", embedded)
    try:
        native_problems, overlay_problems = files()
    except SparkflakeError as exc:
        links.append(LinkResult("retained-native", FAILED, exc.message))
    else:
        links.append(LinkResult("retained-native", FAILED, native_problems) if native_problems
                     else LinkResult("retained-native", PASSED, "every retained ELF file at its recorded sha256"))
        links.append(LinkResult("overlay", FAILED, overlay_problems) if overlay_problems
                     else LinkResult("overlay", PASSED, "every overlay target at its recorded sha256"))
    result = ReceiptReport(report.format, report.manifest_digest, report.config_digest, tuple(links))
    failures = [item for item in links if item.status == FAILED]
    if failures:
        raise ReceiptCheckFailed(
            "receipt does not match the image: " + "; ".join(f"{f.link}: {f.detail}" for f in failures),
            check_id=f"receipt.{failures[0].link}",
            report=result,
        )
    return result


class ReceiptCheckFailed(CheckFailed):
    def __init__(self, message: str, *, check_id: str, report: ReceiptReport) -> None:
        super().__init__(message, check_id=check_id)
        self.report = report

