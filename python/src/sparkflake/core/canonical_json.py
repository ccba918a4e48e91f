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
  reads that are still hashed: receipts, the in-image ``/etc/sparkflake/*.json``, SBOMs;
  and every other JSON file sparkflake writes.

One more form is not ours to choose: ``go_struct_json_bytes`` writes a document in its own
key order, compact, as Go's encoding/json writes a struct, for the bytes another tool made
first and signs or hashes (cosign's payloads and keys, the docker-archive manifest
containers/image derives).
"""

from __future__ import annotations

import json
import re
from typing import Any


def canonical_json_bytes(document: Any, *, ascii_only: bool = False) -> bytes:
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=False
    ).encode("utf-8")


def readable_json_bytes(document: Any) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def go_struct_json_bytes(document: Any) -> bytes:
    """Compact, keys in the document's order (the Go struct's field order), UTF-8, with the
    escapes Go's encoding/json adds (encode.go, HTMLEscape on by default): ``<``, ``>``,
    ``&``, U+2028 and U+2029 as ``\\u`` escapes, and a lone surrogate (text that was no
    valid UTF-8) as the escaped replacement character, as Go writes invalid UTF-8. Numbers
    in these documents are integers, which both languages write alike."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return _GO_ESCAPED.sub(lambda match: _GO_ESCAPES.get(match.group(), "\\ufffd"), text).encode("utf-8")


_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_GO_ESCAPED = re.compile("[<>&\u2028\u2029\ud800-\udfff]")
