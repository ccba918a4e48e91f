"""Canonical JSON bytes: sorted keys, no insignificant whitespace, UTF-8.

A blob's digest is the digest of these exact bytes, so they are made once per document
and the same bytes object is written into every output format (layout, oci-archive,
docker-archive); nothing re-serializes a document after its digest is known.
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json_bytes(document: Any) -> bytes:
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
