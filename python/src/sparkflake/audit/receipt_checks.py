"""The audit's receipt checks: the receipt beside the image and the one inside it name this
image, its layers and the lock's inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..compose import receipt as receipt_names
from ..compose.generated import missing_labels
from ..core.check_result import ERROR, FAIL, PASS, SKIP
from ..core.documents import parse_json
from ..core.errors import InputError
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
            statement = parse_json(in_image, f"/{IN_IMAGE_RECEIPT_PATH}")
        except InputError as exc:
            report.add("receipt.in-image", FAIL, exc.message, report.config_digest)
            return
        _check_in_image_subjects(statement, report)
        _check_dependencies(statement, f"/{IN_IMAGE_RECEIPT_PATH}", expectations, report)
        return
    if receipt is None:
        if expectations.lock_digests is not None:
            report.add(
                "receipt.dependencies", ERROR,
                f"{expectations.lock_where}: a lock was given but the image has no /{IN_IMAGE_RECEIPT_PATH} "
                "and no --receipt was given to compare it with",
            )
        return
    subject_digests = subjects_of(receipt)
    if report.manifest_digest is None:
        report.add("receipt.subject", SKIP, f"{source.kind} has no manifest digest to compare")
    else:
        report.judge(
            "receipt.subject", report.manifest_digest in subject_digests,
            passed_detail=f"{where}: subject is the manifest digest",
            failed_detail=f"{where}: subject {', '.join(subject_digests) or 'none'}, "
                          f"the image manifest is {report.manifest_digest}",
            digest=report.manifest_digest,
        )
    config_digest = byproduct_digest(receipt, receipt_names.CONFIG)
    if config_digest is not None:
        status = PASS if config_digest == report.config_digest else FAIL
        report.add(
            "receipt.byproducts", status,
            f"{where}: image-config {config_digest}, image {report.config_digest}", config_digest,
        )
    recorded_layers = layer_byproducts(receipt)
    if recorded_layers:
        problems = layer_problems(recorded_layers, report.layers, blob_digests=report.manifest_digest is not None)
        if problems:
            report.add("receipt.byproducts", FAIL, f"{where}: " + "; ".join(problems), report.manifest_digest)
        else:
            report.add("receipt.byproducts", PASS, f"{where}: {len(recorded_layers)} layers equal")
    recorded_labels = labels_of(receipt)
    if recorded_labels is not None:
        problems = label_problems(recorded_labels, report.labels)
        if problems:
            report.add(
                "labels.receipt", FAIL, f"{where}: labels differ from the receipt: " + "; ".join(problems[:10]),
                report.config_digest,
            )
        else:
            report.add("labels.receipt", PASS, f"{where}: {len(recorded_labels)} labels equal the receipt")
    _check_dependencies(receipt, where, expectations, report)


def _check_in_image_subjects(statement: Mapping[str, Any], report: AuditReport) -> None:
    wanted = subjects_of(statement)
    below = [layer.diff_id for layer in report.layers[: len(wanted)]]
    if wanted == below:
        report.add("receipt.in-image", PASS, f"in-image receipt binds the {len(wanted)} lower layers' diffIDs")
    else:
        report.add(
            "receipt.in-image", FAIL,
            f"in-image receipt binds diffIDs {wanted}, the image's lower layers are {below}",
            report.config_digest,
        )


def _check_dependencies(
    statement: Mapping[str, Any], where: str, expectations: Expectations, report: AuditReport
) -> None:
    if expectations.lock_digests is None:
        return
    dependencies = _field(statement, "predicate", "buildDefinition", "resolvedDependencies")
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
            "receipt.dependencies", FAIL,
            f"{where}: resolvedDependencies differ from {expectations.lock_where}: " + "; ".join(missing[:5])
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            report.manifest_digest,
        )
    else:
        report.add(
            "receipt.dependencies", PASS,
            f"{where}: the {len(expectations.lock_digests)} locked inputs are exactly the resolved dependencies, digests equal",
        )


# What a receipt (full, or the one in the image) records, read defensively: the audit reads
# whatever file it is given; ``receipt verify`` uses the same readings and comparisons.
def subjects_of(statement: Mapping[str, Any]) -> list[str]:
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    return [
        "sha256:" + str(s.get("digest", {}).get("sha256"))
        for s in subjects if isinstance(s, dict) and isinstance(s.get("digest"), dict)
    ] if isinstance(subjects, list) else []


def _field(document: object, *keys: str) -> Any:
    """``document[k1][k2]…``, or None where a level is missing or not an object."""
    for key in keys:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def _byproducts(statement: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    items = _field(statement, "predicate", "runDetails", "byproducts")
    return {str(item.get("name")): item for item in items if isinstance(item, dict)} if isinstance(items, list) else {}


def byproduct_digest(statement: Mapping[str, Any], name: str) -> str | None:
    item = _byproducts(statement).get(name)
    digest = item.get("digest") if item is not None else None
    return f"sha256:{digest.get('sha256')}" if isinstance(digest, dict) else None


def layer_byproducts(statement: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``layer[N]`` byproducts, in layer order."""
    named = sorted((_layer_index(name), item) for name, item in _byproducts(statement).items() if name.startswith("layer["))
    return [item for _, item in named]


def labels_of(statement: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The image labels a build records (``buildDefinition.internalParameters.labels``,
    where compose's top layer writes them), or None where there are none."""
    labels = _field(statement, "predicate", "buildDefinition", "internalParameters", "labels")
    return labels if isinstance(labels, dict) else None


def layer_problems(recorded: Sequence[Mapping[str, Any]], layers: Sequence[Any], *, blob_digests: bool) -> list[str]:
    """How the image's layers (``digest``, ``diff_id``) differ from the recorded ones. A
    docker-archive stores layers uncompressed (``blob_digests`` False): only diffIDs compare."""
    if len(recorded) != len(layers):
        return [f"image has {len(layers)} layers, receipt {len(recorded)}"]
    problems = []
    for index, (item, layer) in enumerate(zip(recorded, layers, strict=True)):
        diff_id = _field(item, "annotations", "diff_id")
        if diff_id and layer.diff_id != diff_id:
            problems.append(f"layer[{index}] diffID {layer.diff_id}, receipt {diff_id}")
        blob = f"sha256:{_field(item, 'digest', 'sha256')}"
        if blob_digests and layer.digest != blob:
            problems.append(f"layer[{index}] digest {layer.digest}, receipt {blob}")
    return problems


def label_problems(recorded: Mapping[str, Any], current: Mapping[str, str]) -> list[str]:
    """Labels must equal the recorded ones, and every label a build writes be there."""
    problems = [
        f"{key}: image {current.get(key)!r}, receipt {recorded.get(key)!r}"
        for key in sorted(set(current) | set(recorded))
        if current.get(key) != recorded.get(key)
    ]
    return problems + [f"{key}: missing" for key in missing_labels(current)]


def _layer_index(name: str) -> int:
    try:
        return int(name.removeprefix("layer[").removesuffix("]"))
    except ValueError:
        return -1
