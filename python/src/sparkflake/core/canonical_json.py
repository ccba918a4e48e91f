"""The one JSON serializer of every document whose bytes are hashed or compared. Keys are
sorted, ``NaN`` and infinities are refused, and a document's bytes are made once: the same
bytes object is written into every output (layout, oci-archive, docker-archive), nothing
re-serializes a document after its digest is known.

Two forms, both byte-stable:

- ``canonical_json_bytes``: no insignificant whitespace, UTF-8. OCI configs, manifests and
  indexes, the patch-set and overlay identities, in-toto statements. With
  ``ascii_only`` non-ASCII characters are ``\\u`` escapes of four hex digits: the form the runtime
  identity, the qualification hash and the tree cache's keys were defined over (the
  identity files on the ranks hold those bytes).
- ``readable_json_bytes``: two-space indent and a final newline, UTF-8. The files a person
  reads that are still hashed: receipts, the in-image ``/etc/sparkflake/*.json``, SBOMs.
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json_bytes(document: Any, *, ascii_only: bool = False) -> bytes:
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=False
    ).encode("utf-8")


def readable_json_bytes(document: Any) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
