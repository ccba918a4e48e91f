"""The audit's receipt checks: the receipt beside the image and the one inside it name this
image, its layers and the lock's inputs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .report import IN_IMAGE_RECEIPT_PATH, AuditReport, Expectations
from .target import ImageSource


def check_receipt(
    expectations: Expectations, report: AuditReport, captured: Mapping[str, bytes], source: ImageSource
) -> None:
    receipt = expectations.receipt
    where = expectations.receipt_where
    in_image = captured.get(IN_IMAGE_RECEIPT_PATH)
    if receipt is None and in_image is not None:
        # without a full receipt, the one inside the image still binds the lower layers
        try:
            statement = json.loads(in_image)
        except (ValueError, UnicodeDecodeError):
            report.add("receipt.in-image", "fail", f"/{IN_IMAGE_RECEIPT_PATH} is not valid JSON", report.config_digest)
            return
        _check_in_image_subjects(statement, report)
        _check_dependencies(statement, f"/{IN_IMAGE_RECEIPT_PATH}", expectations, report)
        return
    if receipt is None:
        if expectations.lock_digests is not None:
            report.add(
                "receipt.dependencies", "error",
                f"{expectations.lock_where}: a lock was given but the image has no /{IN_IMAGE_RECEIPT_PATH} "
                "and no --receipt was given to compare it with",
            )
        return
    subjects = receipt.get("subject") if isinstance(receipt, dict) else None
    subject_digests = [
        "sha256:" + str(s.get("digest", {}).get("sha256"))
        for s in subjects or []
        if isinstance(s, dict) and isinstance(s.get("digest"), dict)
    ]
    if report.manifest_digest is None:
        report.add("receipt.subject", "skip", f"{source.kind} has no manifest digest to compare")
    elif report.manifest_digest in subject_digests:
        report.add("receipt.subject", "pass", f"{where}: subject is the manifest digest", report.manifest_digest)
    else:
        report.add(
            "receipt.subject", "fail",
            f"{where}: subject {', '.join(subject_digests) or 'none'}, the image manifest is {report.manifest_digest}",
            report.manifest_digest,
        )
    byproducts = _byproducts(receipt)
    config_entry = byproducts.get("image-config")
    if config_entry is not None:
        want = "sha256:" + str(config_entry.get("digest", {}).get("sha256"))
        status = "pass" if want == report.config_digest else "fail"
        report.add(
            "receipt.byproducts", status,
            f"{where}: image-config {want}, image {report.config_digest}", want,
        )
    layer_entries = [v for k, v in sorted(byproducts.items(), key=lambda kv: _layer_index(kv[0])) if k.startswith("layer[")]
    if layer_entries:
        for position, entry in enumerate(layer_entries):
            want_digest = "sha256:" + str(entry.get("digest", {}).get("sha256"))
            want_diff = (entry.get("annotations") or {}).get("diff_id")
            got = report.layers[position] if position < len(report.layers) else None
            if got is None or got.digest != want_digest or (want_diff and got.diff_id != want_diff):
                report.add(
                    "receipt.byproducts", "fail",
                    f"{where}: layer[{position}] is {want_digest} (diffID {want_diff}), the image has "
                    f"{got.digest if got else 'no layer'} (diffID {got.diff_id if got else None})",
                    want_digest,
                )
                break
        else:
            if len(layer_entries) != len(report.layers):
                report.add("receipt.byproducts", "fail", f"{where}: {len(layer_entries)} layers, the image has {len(report.layers)}", report.manifest_digest)
            else:
                report.add("receipt.byproducts", "pass", f"{where}: {len(layer_entries)} layers equal")
    external = (receipt.get("predicate") or {}).get("buildDefinition", {}).get("externalParameters", {})
    receipt_labels = external.get("labels") if isinstance(external, dict) else None
    if isinstance(receipt_labels, dict):
        differing = sorted(k for k, v in receipt_labels.items() if report.labels.get(k) != v)
        missing = sorted(k for k in report.labels if k.startswith("org.sparkflake.") and k not in receipt_labels)
        if differing or missing:
            report.add(
                "labels.receipt", "fail",
                f"{where}: labels differ from the receipt: {', '.join(differing + missing)}",
                report.config_digest,
            )
        else:
            report.add("labels.receipt", "pass", f"{where}: {len(receipt_labels)} labels equal the receipt")
    _check_dependencies(receipt, where, expectations, report)


def _check_in_image_subjects(statement: Mapping[str, Any], report: AuditReport) -> None:
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    wanted = [
        "sha256:" + str(s.get("digest", {}).get("sha256"))
        for s in subjects or []
        if isinstance(s, dict) and isinstance(s.get("digest"), dict)
    ]
    below = [layer.diff_id for layer in report.layers[: len(wanted)]]
    if wanted == below:
        report.add("receipt.in-image", "pass", f"in-image receipt binds the {len(wanted)} lower layers' diffIDs")
    else:
        report.add(
            "receipt.in-image", "fail",
            f"in-image receipt binds diffIDs {wanted}, the image's lower layers are {below}",
            report.config_digest,
        )


def _check_dependencies(
    statement: Mapping[str, Any], where: str, expectations: Expectations, report: AuditReport
) -> None:
    if expectations.lock_digests is None:
        return
    dependencies = (statement.get("predicate") or {}).get("buildDefinition", {}).get("resolvedDependencies", [])
    recorded: dict[str, set[str]] = {}
    for dependency in dependencies if isinstance(dependencies, list) else []:
        if isinstance(dependency, dict) and isinstance(dependency.get("digest"), dict):
            recorded.setdefault(str(dependency.get("name")), set()).update(
                f"{algo}:{value}" for algo, value in dependency["digest"].items()
            )
    missing = []
    for name, digest in sorted(expectations.lock_digests.items()):
        if digest not in recorded.get(name, set()):
            missing.append(f"{name} ({digest}; receipt has {sorted(recorded.get(name, set())) or 'nothing'})")
    extra = sorted(
        name for name in recorded if name not in expectations.lock_digests and not name.startswith("patch-set:")
    )
    missing.extend(f"{name} (in the receipt, not in the lock)" for name in extra)
    if missing:
        report.add(
            "receipt.dependencies", "fail",
            f"{where}: resolvedDependencies differ from {expectations.lock_where}: " + "; ".join(missing[:5])
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            report.manifest_digest,
        )
    else:
        report.add(
            "receipt.dependencies", "pass",
            f"{where}: the {len(expectations.lock_digests)} locked inputs are exactly the resolved dependencies, digests equal",
        )


def _byproducts(statement: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    items = (statement.get("predicate") or {}).get("runDetails", {}).get("byproducts", [])
    return {str(item.get("name")): item for item in items if isinstance(item, dict)} if isinstance(items, list) else {}


def _layer_index(name: str) -> int:
    try:
        return int(name.removeprefix("layer[").removesuffix("]"))
    except ValueError:
        return -1
