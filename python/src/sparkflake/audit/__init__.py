"""Image digest audit: is this image exactly what the lock, the receipt and the profile say?

``open_target`` turns a target string into an ``ImageSource``; ``audit_image`` runs the
checks; ``expectations_from`` gathers what the image must be from a profile, a lock, a
receipt, an expected-digests file and ``--expect`` digests.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.check_result import CheckResult
from ..core.documents import objects_of_array, read_json_file
from ..core.errors import InputError
from ..core.records import InvalidField, describe, require_oci_digest, require_size
from ..lock.lock_file import load_lock
from ..lock.pins import GitPin, OciPin
from .checks import audit_image
from .report import DEFAULT_MAX_UNCOMPRESSED, AuditReport, Expectations, parse_expectation
from .target import ImageSource, open_target

__all__ = [
    "AuditReport",
    "CheckResult",
    "Expectations",
    "ImageSource",
    "audit_image",
    "expectations_from",
    "open_target",
    "parse_expectation",
    "write_record",
]


def _lock_digests(path: str | os.PathLike[str]) -> dict[str, str]:
    lock = load_lock(path)
    digests: dict[str, str] = {}
    for pin in lock.inputs:
        if isinstance(pin, GitPin):
            digests[pin.name] = f"gitCommit:{pin.rev}"
        elif isinstance(pin, OciPin):
            if pin.manifest_digest:
                digests[pin.name] = pin.manifest_digest
        else:
            digests[pin.name] = f"sha256:{pin.sha256}"
    return digests


def _read_json(path: str | os.PathLike[str], what: str) -> Any:
    """An expected-digests file or a receipt: a bounded regular file, parsed as JSON."""
    try:
        return read_json_file(path, what)
    except InputError as exc:
        raise InputError(exc.message, check_id="document.parse") from None


def expectations_from(
    *,
    expect: Sequence[str] = (),
    expect_file: str | None = None,
    profile_name: str | None = None,
    lock_file: str | None = None,
    receipt_file: str | None = None,
    max_uncompressed_bytes: int | None = None,
) -> Expectations:
    digests = [parse_expectation(text) for text in expect]
    file_index, expected_layers = None, None
    if expect_file is not None:
        file_digests, file_index, expected_layers = _expected_digests_file(expect_file)
        digests += file_digests
    labels: dict[str, str]
    platform, labels, lock_path = None, {}, lock_file
    if profile_name is not None:
        platform, labels, profile_lock = _profile_expectations(profile_name)
        lock_path = lock_path or profile_lock
    receipt = None
    if receipt_file is not None:
        receipt = _read_json(receipt_file, "receipt")
        if not isinstance(receipt, dict):
            raise InputError(f"{receipt_file}: $: expected an in-toto Statement object")
    return Expectations(
        digests=tuple(digests),
        expected_layers=expected_layers,
        index_if_present=file_index,
        platform=platform,
        labels=labels,
        receipt=receipt,
        receipt_where=receipt_file or "",
        lock_digests=_lock_digests(lock_path) if lock_path else None,
        lock_where=lock_path or "",
        max_uncompressed_bytes=DEFAULT_MAX_UNCOMPRESSED if max_uncompressed_bytes is None else max_uncompressed_bytes,
    )


def _expected_digests_file(path: str) -> tuple[list[tuple[str, str]], str | None, list[Any] | None]:
    """A build's ``digests.json``: the digests it names, its index (checked where the
    source has an index.json: a layout, an oci-archive) and its layers."""
    document = _read_json(path, "expected digests")
    if not isinstance(document, dict):
        raise InputError(f"{path}: $: expected an object like digests.json")
    # each value is checked where it stands: made into an ``--expect`` text, a non-string
    # (true, 1) was reported as the operator's --expect, naming neither file nor key
    try:
        digests = [
            (kind, _expected_digest(f"$.{key}", document[key]))
            for key, kind in (("manifest", "manifest"), ("config", "config"), ("chain_id", "chain-id"))
            if key in document
        ]
        index = _expected_digest("$.index", document["index"]) if "index" in document else None
        if "layers" not in document:
            return digests, index, None
        # each layer an object of the fields it names (digest, diff_id, size), each of its
        # form: a malformed one is bad input, not a layer that differs from the image's
        layers = [_expected_layer(at, layer) for at, layer in
                  objects_of_array(document["layers"], path, "$.layers", "a layer object")]
    except InvalidField as exc:
        raise InputError(f"{path}: {exc.message}", check_id="document.parse") from None
    except InputError as exc:
        raise InputError(exc.message, check_id="document.parse") from None
    return digests, index, layers


def _expected_digest(at: str, value: object) -> str:
    if not isinstance(value, str):  # named with the form it must have, not only "a string"
        shown = "null" if value is None else describe(value)
        raise InvalidField(at, f'expected a string "sha256:" and 64 lowercase hex digits, got {shown}')
    return require_oci_digest(at, value)


def _expected_layer(at: str, layer: dict[str, Any]) -> dict[str, Any]:
    for key in ("digest", "diff_id"):
        if key in layer:
            _expected_digest(f"{at}.{key}", layer[key])
    if "size" in layer:
        require_size(f"{at}.size", layer["size"])
    return layer


def _profile_expectations(name: str) -> tuple[str, dict[str, str], str | None]:
    """A profile's platform, its labels (with its name) and its first lock, if present."""
    from ..lock.profile_locks import load_profile

    profile = load_profile(name, check_locks=False)
    labels = {**profile.labels, "org.sparkflake.profile": profile.name}
    first_lock = profile.lock_paths()[0] if profile.locks else None
    return profile.platform, labels, str(first_lock) if first_lock is not None and first_lock.is_file() else None


def write_record(path: str | os.PathLike[str], report: AuditReport, profile: str | None = None) -> None:
    record = report.as_record()
    record["kind"] = "sparkflake.digest-verification"
    record["profile"] = profile
    write_bytes_atomic(path, readable_json_bytes(record))
