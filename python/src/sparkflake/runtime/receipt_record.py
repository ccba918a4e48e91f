"""The runtime check recorded in the build's receipt (``OUT/receipt.json``).

The capability manifest is a byproduct of the image in the SLSA provenance sense: made
from it, not an input of it. The check adds (or replaces) one byproduct, named
``runtime-capabilities``, carrying the sha256 of the manifest's bytes and what the check
found, to the full receipt beside the image, and only to a receipt whose subject is the
manifest digest the capabilities are bound to. Receipt verification looks byproducts up by
name, so the others are untouched; the in-image receipt is not changed (it is in a layer),
and the in-image statement re-derived from the full one leaves this byproduct out
(compose.receipt.in_image_from_full).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from ..compose.receipt import RUNTIME_CAPABILITIES, byproduct, load_receipt
from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.errors import InputError
from .capabilities import FILE_NAME, Capabilities

BYPRODUCT = RUNTIME_CAPABILITIES


def record_in_receipt(receipt_path: Path, manifest_bytes: bytes, capabilities: Capabilities,
                      summary: Mapping[str, object]) -> None:
    """Add the ``runtime-capabilities`` byproduct; InputError if the receipt is not the
    image's (another subject) or not an in-toto statement of a build."""
    statement = load_receipt(receipt_path)
    wanted = (capabilities.manifest_digest or "").removeprefix("sha256:")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not any(
            isinstance(item, Mapping) and isinstance(item.get("digest"), Mapping)
            and item["digest"].get("sha256") == wanted for item in subjects):
        raise InputError(f"{receipt_path}: subject: the receipt is not of image {capabilities.manifest_digest}")
    try:
        byproducts = statement["predicate"]["runDetails"]["byproducts"]
        if not isinstance(byproducts, list):
            raise TypeError
    except (KeyError, TypeError):
        raise InputError(f"{receipt_path}: predicate.runDetails.byproducts: expected a list") from None
    entry = {
        "name": BYPRODUCT,
        "uri": f"file:{FILE_NAME}",
        "digest": {"sha256": hashlib.sha256(manifest_bytes).hexdigest()},
        "annotations": dict(sorted(summary.items())),
    }
    previous = byproduct(statement, BYPRODUCT)
    if previous is not None:
        byproducts.remove(previous)
    byproducts.append(entry)
    write_bytes_atomic(receipt_path, readable_json_bytes(statement))
