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
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..compose import generated, receipt
from ..compose.verification import FAILED, PASSED, LinkResult
from ..core.canonical_json import readable_json_bytes
from ..core.documents import objects_of_array, parse_json_object
from ..core.errors import CheckFailed, InputError, SparkflakeError
from ..oci.layer_stream import LayerStream
from ..oci.reader import ImageReader, open_image
from ..oci.verify import config_diff_ids, verify_image
from .receipt_checks import label_problems, layer_problems

READ_CHUNK = 1 << 20
ABSENT = ""


def merged_files(
    reader: ImageReader, wanted: Iterable[str], contents_of: Iterable[str] = ()
) -> tuple[dict[str, tuple[str, int]], dict[str, bytes]]:
    """sha256 and size of ``wanted`` image paths (no leading '/') in the merged filesystem,
    and the bytes of the (small) files in ``contents_of``, in one pass over the layers.

    Layers are applied bottom to top; a whiteout ``.wh.NAME`` removes a path, an opaque
    ``.wh..wh..opq`` removes a directory's lower contents. Paths absent at the end are
    left out of the results.
    """
    content_set = {path.lstrip("/") for path in contents_of}
    wanted_set = {path.lstrip("/") for path in wanted} | content_set
    state: dict[str, tuple[str, int]] = {}
    contents: dict[str, bytes] = {}

    def remove(prefix_test: Callable[..., bool]) -> None:  # called with a path; the lambdas bind their loop values
        for path in [p for p in state if prefix_test(p)]:
            del state[path]
            contents.pop(path, None)

    diff_ids = config_diff_ids(reader.config) or []
    for position, ref in enumerate(reader.layer_refs):
        with reader.open_blob(ref) as handle, LayerStream(handle) as stream:
            try:
                with tarfile.open(fileobj=stream, mode="r|") as archive:  # type: ignore[call-overload]  # typeshed has no overload for a stream mode over a fileobj
                    for member in archive:
                        name = posixpath.normpath(member.name.lstrip("./") or ".")
                        base = posixpath.basename(name)
                        parent = posixpath.dirname(name)
                        if base == ".wh..wh..opq":
                            prefix = f"{parent}/" if parent else ""
                            remove(lambda p, prefix=prefix: p.startswith(prefix))
                            continue
                        if base.startswith(".wh."):
                            removed = posixpath.join(parent, base[len(".wh."):])
                            remove(lambda p, removed=removed: p == removed or p.startswith(removed + "/"))
                            continue
                        if name not in wanted_set:
                            continue
                        if not member.isfile():
                            remove(lambda p, name=name: p == name)
                            continue
                        extracted = archive.extractfile(member)
                        assert extracted is not None
                        hasher = hashlib.sha256()
                        kept: list[bytes] | None = [] if name in content_set else None
                        while chunk := extracted.read(READ_CHUNK):
                            hasher.update(chunk)
                            if kept is not None:
                                kept.append(chunk)
                        state[name] = (hasher.hexdigest(), member.size)
                        if kept is not None:
                            contents[name] = b"".join(kept)
                stream.drain()  # a stream cut after the tar archive's end is refused too
            except (tarfile.TarError, ValueError) as exc:
                raise InputError(f"layer {ref.digest or ref.name}: cannot read tar stream: {exc}") from exc
            digests = stream.digests()
        # the files found are in the bytes verify_image checked, not in a blob changed since
        digests.refuse_difference(ref, reader.files.describe(ref.name),
                                  diff_ids[position] if position < len(diff_ids) else None)
    return state, contents


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
    reader = open_image(image_path)
    report = verify_image(reader)  # digests of every blob re-derived from bytes
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

    wanted_manifests = {
        generated.RECEIPT_PATH: receipt.IN_IMAGE_RECEIPT,
        generated.RETAINED_NATIVE_PATH: receipt.RETAINED_NATIVE,
        generated.OVERLAY_PATH: receipt.OVERLAY,
    }
    # The manifests say which files to hash, so the small documents are read first (a pass
    # over the layers that hashes nothing else), then every listed file in a second pass.
    _, found = merged_files(reader, (), wanted_manifests)
    documents: dict[str, bytes | None] = {path: found.get(path.lstrip("/")) for path in wanted_manifests}

    def embedded() -> str:
        problems = []
        for path, name in wanted_manifests.items():
            item = full.byproduct(name)
            content = documents[path]
            if item is None:
                problems.append(f"receipt has no {name} byproduct")
            elif content is None:
                problems.append(f"{path}: absent from the image")
            elif hashlib.sha256(content).hexdigest() != item.sha256:
                problems.append(f"{path}: sha256 {hashlib.sha256(content).hexdigest()}, receipt {item.sha256}")
        derived = readable_json_bytes(receipt.in_image_from_full(full.statement))
        if documents[generated.RECEIPT_PATH] is not None and documents[generated.RECEIPT_PATH] != derived:
            problems.append(f"{generated.RECEIPT_PATH}: differs from the in-image statement the full receipt derives")
        if problems:
            raise CheckFailed("; ".join(problems))
        return "in-image receipt and both manifests equal their byproduct digests"

    def _entries(path: str, key: str, fields: Mapping[str, type]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A manifest the image holds (untrusted as the rest of it), and its ``key`` array
        of objects with ``fields`` of those types; a bad one fails the link, naming the path."""
        content = documents[path]
        if content is None:
            raise CheckFailed(f"{path}: absent from the image")
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
        merged, _ = merged_files(reader, wanted)
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

