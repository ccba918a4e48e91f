"""The audit: re-derive every digest of an image from its bytes and compare each with
what the documents, the lock, the receipt, the profile or the operator expect.

Every check has a stable id and ends as ``pass``, ``fail`` (a mismatch: exit 1) or
``error`` (could not be read: exit 2); checks that do not apply to a source are ``skip``.
The audit goes on after a failure where it can, so one run names every failing check and
the digest involved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.check_result import ERROR, FAIL, PASS, SKIP
from ..core.digest import chain_id, is_digest, sha256_digest
from ..core.elf_machines import MACHINE_BY_ARCHITECTURE, MACHINE_TITLES
from ..core.errors import InputError
from ..core.progress import BytesProgress, ProgressCallback
from ..oci import media_types
from ..oci.entry_safety import EntrySafety
from ..oci.layer_scan import ElfMember
from ..oci.stored_blob import StoredBlob, stored_document
from ..oci.types import Platform, platform_text
from ..oci.verify import config_diff_ids, docker_view_difference, read_layer
from .receipt_checks import check_receipt
from .report import IN_IMAGE_RECEIPT_PATH, AuditReport, Expectations, LayerFinding
from .target import ImageSource


def audit_image(
    source: ImageSource, expectations: Expectations, progress: ProgressCallback | None = None
) -> AuditReport:
    report = AuditReport(target=source.location, source_kind=source.kind)
    report.engine_image_id = source.engine_image_id
    reader = source.reader
    _check_documents(source, report)
    _check_docker_view(source, report)
    _check_digest_forms(source, report)
    if report.exit_code == 2:
        return report
    config = _config_or_error(source, report)
    if config is None:
        return report
    diff_ids = _config_diff_ids(config, report)
    _check_media_types(source, report)
    total = sum(d.size or 0 for d in reader.layer_refs)
    done = 0
    captured: dict[str, bytes] = {}
    elf_files: list[ElfMember] = []
    computed_diff_ids: list[str | None] = []
    safety = EntrySafety()  # one per image: a symlink of layer 0 makes a write in layer 3 unsafe
    for position, descriptor in enumerate(reader.layer_refs):
        label = descriptor.digest or descriptor.name
        tick = BytesProgress(progress, done, total, "auditing layers")
        try:
            stored = read_layer(
                reader, descriptor, safety=safety, on_bytes=tick,
                max_uncompressed_bytes=expectations.max_uncompressed_bytes,
                capture_paths=frozenset({IN_IMAGE_RECEIPT_PATH}),
            )
        except InputError as exc:  # a blob that leaves the layout, or cannot be read
            status = FAIL if exc.check_id == "layout.inside" else ERROR
            report.add(exc.check_id or "layer.present", status, f"layer {position} {label}: {exc.message}", descriptor.digest)
            computed_diff_ids.append(None)
            continue
        scan = stored.scan
        if stored.blob.size is None:
            report.add("layer.present", FAIL, f"layer {position} {label} is missing from {source.location}", descriptor.digest)
            computed_diff_ids.append(None)
            continue
        if scan is None:  # its stored size differs: not hashed
            report.add(
                "layer.size", FAIL,
                f"layer {position} {label}: stored size {stored.blob.size} bytes, descriptor says {descriptor.size} (not hashed)",
                descriptor.digest,
            )
            computed_diff_ids.append(None)
            done += descriptor.size or 0
            continue
        done += stored.blob.size
        if descriptor.digest is not None:
            if stored.blob.digest_differs:
                report.add(
                    "layer.digest", FAIL,
                    f"layer {position}: blob hashes to {scan.blob_digest}, the manifest says {descriptor.digest}",
                    descriptor.digest,
                )
            else:
                report.add("layer.digest", PASS, f"layer {position} hashes to its digest", descriptor.digest)
        if scan.error is not None:
            check = "layer.decompressed-bound" if "bound" in scan.error else "layer.decompress"
            report.add(check, FAIL, f"layer {position} {label}: {scan.error}", descriptor.digest)
        expected_compression = media_types.COMPRESSION_OF_LAYER_TYPE.get(descriptor.media_type)
        if expected_compression is not None and scan.size and scan.compression != expected_compression and scan.error is None:
            report.add(
                "media-type.consistent", FAIL,
                f"layer {position} {label}: media type {descriptor.media_type} but the blob is {scan.compression}",
                descriptor.digest,
            )
        if scan.unsafe_entry is not None:
            report.add("layer.entries-safe", FAIL, f"layer {position} {label}: unsafe entry: {scan.unsafe_entry}", descriptor.digest)
        elif scan.error is None:
            report.add("layer.entries-safe", PASS, f"layer {position}: every entry stays inside the image root", descriptor.digest)
        computed_diff_ids.append(scan.diff_id)
        captured.update(scan.captured_files)
        elf_files.extend(scan.elf_files)
        machines: dict[str, int] = {}
        for elf in scan.elf_files:
            name = MACHINE_TITLES.get(elf.machine, f"e_machine {elf.machine}")
            machines[name] = machines.get(name, 0) + 1
        report.layers.append(
            LayerFinding(
                descriptor.digest or scan.blob_digest, scan.diff_id, scan.size,
                scan.uncompressed_size, descriptor.media_type, machines,
            )
        )
    _check_diff_ids(diff_ids, computed_diff_ids, source, report)
    _check_platform(source, config, elf_files, expectations, report)
    report.labels = _labels(config)
    _check_expectations(expectations, report)
    check_receipt(expectations, report, captured, source)
    return report


def _check_docker_view(source: ImageSource, report: AuditReport) -> None:
    """A combined archive must describe one image twice: docker/podman load what its
    manifest.json names, OCI tools what index.json leads to."""
    view = source.reader.docker_view
    if view is None:
        return
    difference = docker_view_difference(source.reader)
    if difference is None:
        report.add(
            "archive.docker-view", PASS,
            f"manifest.json (docker, podman) names the same config and {len(view.layer_names)} layers as the OCI manifest",
        )
    elif difference.layer_position is None:
        report.add(
            "archive.docker-view", FAIL,
            f"{source.location}: manifest.json names config {view.config_name}, the OCI manifest {difference.oci_config}",
            source.reader.config_ref.digest,
        )
    else:
        report.add(
            "archive.docker-view", FAIL,
            f"{source.location}: manifest.json names layers {list(view.layer_names)}, "
            f"the OCI manifest {list(difference.oci_layers)}",
        )


def _check_digest_forms(source: ImageSource, report: AuditReport) -> None:
    found: list[tuple[str, str]] = []
    if source.reader.manifest_ref is not None and source.reader.manifest_ref.digest is not None:
        found.append(("manifest descriptor", source.reader.manifest_ref.digest))
    if source.reader.config_ref.digest is not None:
        found.append(("config descriptor", source.reader.config_ref.digest))
    for position, layer in enumerate(source.reader.layer_refs):
        if layer.digest is not None:
            found.append((f"layers[{position}]", layer.digest))
    config_trusted = not any(c.id == "config.digest" and c.status == FAIL for c in report.checks)
    try:
        # a config that fails its own digest is reported as such; its contents are not graded
        config = source.reader.config if config_trusted else {}
    except InputError:
        config = {}  # reported as document.parse when the config is read for the checks
    diff_ids = config_diff_ids(config) or []
    found.extend((f"rootfs.diff_ids[{i}]", d) for i, d in enumerate(diff_ids))
    bad = [(where, digest) for where, digest in found if not is_digest(digest)]
    if bad:
        where, digest = bad[0]
        report.add(
            "digest.well-formed", ERROR,
            f"{source.location}: {where}: expected sha256:<64 lowercase hex digits>, got {digest!r}"
            + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
            digest,
        )
    else:
        report.add("digest.well-formed", PASS, f"{len(found)} digests are sha256 with 64 lowercase hex digits")


def _check_documents(source: ImageSource, report: AuditReport) -> None:
    reader = source.reader
    if reader.index_bytes is not None:
        report.index_digest = sha256_digest(reader.index_bytes)
    if reader.manifest_bytes is not None and reader.manifest_ref is not None:
        manifest = stored_document(reader.manifest_ref, reader.manifest_bytes, source.location)
        report.manifest_digest = manifest.digest
        _add_document_check(report, "manifest", manifest, "the reference says")
    else:
        report.add("manifest.digest", SKIP, f"{source.kind} stores no manifest")
    config = stored_document(reader.config_ref, reader.config_bytes, source.location)
    report.config_digest = config.digest
    _add_document_check(report, "config", config, "the manifest says")
    if source.engine_image_id is not None:
        report.judge(
            "engine.image-id", source.engine_image_id == report.config_digest,
            passed_detail=f"{source.kind} image ID equals the config digest",
            failed_detail=f"{source.kind} reports image ID {source.engine_image_id}, "
                          f"the stored config hashes to {report.config_digest}",
            digest=source.engine_image_id,
        )


def _add_document_check(report: AuditReport, role: str, stored: StoredBlob, referrer_says: str) -> None:
    reference = stored.ref
    if stored.size_differs:
        report.add(
            f"{role}.digest", FAIL, f"{role} is {stored.size} bytes, its descriptor says {reference.size}", reference.digest
        )
    elif stored.digest_differs:
        report.add(
            f"{role}.digest", FAIL, f"{role} bytes hash to {stored.digest}, {referrer_says} {reference.digest}", reference.digest
        )
    else:
        report.add(f"{role}.digest", PASS, f"{role} bytes hash to the referenced digest", stored.digest)


def _config_or_error(source: ImageSource, report: AuditReport) -> dict[str, Any] | None:
    try:
        return source.reader.config
    except InputError as exc:  # malformed: bad input the audit cannot judge (exit 2), not a mismatch
        report.add("document.parse", ERROR, exc.message, report.config_digest)
        return None


def _config_diff_ids(config: dict[str, Any], report: AuditReport) -> list[str]:
    diff_ids = config_diff_ids(config)
    if diff_ids is None:
        report.add("layer.diff-id", FAIL, "config rootfs.diff_ids is not a list of digests", report.config_digest)
        return []
    report.chain_id = chain_id(diff_ids) if diff_ids else None
    return list(diff_ids)


def _check_media_types(source: ImageSource, report: AuditReport) -> None:
    manifest = source.reader.manifest
    if manifest is None:
        report.add("media-type.consistent", SKIP, "docker-archive has no media types")
        return
    problems = []
    manifest_type = manifest.get("mediaType")
    if source.reader.manifest_ref is not None and manifest_type and source.reader.manifest_ref.media_type:
        if manifest_type != source.reader.manifest_ref.media_type:
            problems.append(f"manifest says {manifest_type}, its descriptor {source.reader.manifest_ref.media_type}")
    if manifest_type is None and source.reader.manifest_ref is not None:
        manifest_type = source.reader.manifest_ref.media_type
    docker = manifest_type == media_types.DOCKER_MANIFEST
    if manifest_type not in media_types.MANIFEST_MEDIA_TYPES:
        problems.append(f"unknown manifest media type {manifest_type!r}")
    config_type = source.reader.config_ref.media_type
    wanted_config = media_types.DOCKER_CONFIG if docker else media_types.OCI_CONFIG
    if config_type != wanted_config:
        problems.append(f"config media type {config_type!r}, expected {wanted_config!r} in a {manifest_type}")
    allowed_layers = media_types.DOCKER_LAYER_TYPES if docker else media_types.OCI_LAYER_TYPES
    for position, layer in enumerate(source.reader.layer_refs):
        if layer.media_type not in allowed_layers:
            problems.append(f"layers[{position}] media type {layer.media_type!r} is not a layer type of {manifest_type}")
    if problems:
        report.add("media-type.consistent", FAIL, "; ".join(problems), report.manifest_digest)
    else:
        report.add("media-type.consistent", PASS, f"{manifest_type} with matching config and layer types")


def _check_diff_ids(
    declared: Sequence[str], computed: Sequence[str | None], source: ImageSource, report: AuditReport
) -> None:
    if len(declared) != len(source.reader.layer_refs):
        report.add(
            "layer.diff-id", FAIL,
            f"config rootfs.diff_ids lists {len(declared)} layers, the manifest {len(source.reader.layer_refs)}",
            report.config_digest,
        )
        return
    mismatches = []
    for position, (want, got) in enumerate(zip(declared, computed, strict=True)):
        if got is not None and got != want:
            mismatches.append((position, want, got))
    if mismatches:
        position, want, got = mismatches[0]
        report.add(
            "layer.diff-id", FAIL,
            f"layer {position} decompresses to {got}, the config lists {want} at that position"
            + (f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""),
            want,
        )
    elif any(c is None for c in computed):
        report.add("layer.diff-id", SKIP, "some layers could not be decompressed (see above)")
    else:
        report.add("layer.diff-id", PASS, f"{len(declared)} layers decompress to the config's diffIDs in order")
    if report.chain_id is not None:
        report.add("chain-id", PASS, "chainID derived from the config's diffIDs", report.chain_id)


def _check_platform(
    source: ImageSource,
    config: Mapping[str, Any],
    elf_files: Sequence[ElfMember],
    expectations: Expectations,
    report: AuditReport,
) -> None:
    config_platform = platform_text(config)
    report.platform = config_platform
    if source.reader.index_platform is not None:
        index_platform = platform_text(source.reader.index_platform)
        index_says = Platform.of_record(source.reader.index_platform)
        # one platform by oci.types' rule (linux/arm64 is linux/arm64/v8), else by what both spell
        if index_platform == config_platform or (index_says is not None and index_says.matches(Platform.of_record(config))):
            report.add("platform.index", PASS, f"config and index both say {config_platform}")
        else:
            report.add(
                "platform.index", FAIL,
                f"config says {config_platform}, the index says {index_platform}", report.config_digest,
            )
    else:
        report.add("platform.index", SKIP, "no index platform to compare")
    if expectations.platform is not None:
        if _platform_matches(config_platform, expectations.platform):
            report.add("platform.expected", PASS, f"platform {config_platform}")
        else:
            report.add(
                "platform.expected", FAIL,
                f"config says {config_platform}, expected {expectations.platform}", report.config_digest,
            )
    expected_machine = MACHINE_BY_ARCHITECTURE.get(str(config.get("architecture")))
    if expected_machine is None:
        report.add("platform.elf", FAIL, f"unknown architecture {config.get('architecture')!r} in the config", report.config_digest)
        return
    wrong = [elf for elf in elf_files if elf.machine != expected_machine]
    if wrong:
        shown = ", ".join(
            f"{elf.path} ({MACHINE_TITLES.get(elf.machine, elf.machine)})" for elf in wrong[:5]
        )
        report.add(
            "platform.elf", FAIL,
            f"{len(wrong)} of {len(elf_files)} ELF files are not {MACHINE_TITLES[expected_machine]}: {shown}",
            report.config_digest,
        )
    else:
        report.add(
            "platform.elf", PASS,
            f"{len(elf_files)} ELF files, all {MACHINE_TITLES[expected_machine]}",
        )


def _platform_matches(actual: str, expected: str) -> bool:
    try:
        return Platform.parse_any(actual).matches(Platform.parse_any(expected))
    except InputError:
        return actual == expected


def _labels(config: Mapping[str, Any]) -> dict[str, str]:
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


# An engine's store (podman, docker) keeps no manifest and its layers uncompressed: the
# audit reads the image as the engine saves it, so only the config digest (the image ID),
# the chain ID and the diffIDs are what the build's digests mean there.
ENGINE_STORES = ("podman", "docker")


def _check_expectations(expectations: Expectations, report: AuditReport) -> None:
    store = report.source_kind if report.source_kind in ENGINE_STORES else None
    actual = {
        "manifest": report.manifest_digest,
        "config": report.config_digest,
        "index": report.index_digest,
        "chain-id": report.chain_id,
    }
    for kind, want in expectations.digests:
        if store is not None and kind in ("manifest", "layer"):
            report.add(f"expect.{kind}", SKIP, f"{store}'s store keeps no manifest and its layers uncompressed: "
                       f"the {kind} digest {want} is not comparable there (config, chain ID and diffIDs are)", want)
            continue
        if kind in ("layer", "diff-id"):
            field_name = "digest" if kind == "layer" else "diff_id"
            present = [getattr(layer, field_name) for layer in report.layers]
            report.judge(f"expect.{kind}", want in present, passed_detail=f"a layer has {kind} {want}",
                         failed_detail=f"no layer has {kind} {want}", digest=want)
            continue
        got = actual.get(kind)
        report.judge(f"expect.{kind}", got == want, passed_detail=f"{kind} digest is {want}",
                     failed_detail=f"{kind} digest is {got}, expected {want}", digest=want)
    if expectations.index_if_present is not None:
        want = expectations.index_if_present
        if report.index_digest is None:
            report.add("expect.index", SKIP, f"{report.source_kind} has no index.json to compare with {want}", want)
        else:
            report.judge("expect.index", report.index_digest == want, passed_detail=f"index digest is {want}",
                         failed_detail=f"index digest is {report.index_digest}, expected {want}", digest=want)
    if expectations.expected_layers is not None:
        # compare the fields the expectation names (an expected-digests file may omit sizes)
        comparable = ("diff_id",) if store is not None else ("digest", "diff_id", "size")
        compared = [
            [key for key in comparable if key in layer]
            for layer in expectations.expected_layers
        ]
        want_layers = [
            {key: layer[key] for key in keys}
            for layer, keys in zip(expectations.expected_layers, compared, strict=True)
        ]
        got_layers = [
            {key: getattr(layer, key) for key in (compared[i] if i < len(compared) else comparable)}
            for i, layer in enumerate(report.layers)
        ]
        if got_layers == want_layers:
            how = f" (by diffID: {store}'s store keeps layers uncompressed)" if store is not None else ""
            report.add("expect.layers", PASS, f"{len(got_layers)} layers as expected{how}")
        else:
            first = next(
                (i for i, (g, w) in enumerate(zip(got_layers, want_layers, strict=False)) if g != w),
                min(len(got_layers), len(want_layers)),
            )
            report.add(
                "expect.layers", FAIL,
                f"layers differ from the expected list at position {first}: "
                f"got {got_layers[first] if first < len(got_layers) else 'none'}, "
                f"expected {want_layers[first] if first < len(want_layers) else 'none'}",
                report.manifest_digest,
            )
    if expectations.labels:
        differing = [
            f"{key}={report.labels.get(key)!r} (expected {value!r})"
            for key, value in sorted(expectations.labels.items())
            if report.labels.get(key) != value
        ]
        if differing:
            report.add("labels.expected", FAIL, "labels differ: " + "; ".join(differing), report.config_digest)
        else:
            report.add("labels.expected", PASS, f"{len(expectations.labels)} expected labels present and equal")


