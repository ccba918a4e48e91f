"""The one JSON serializer (core.canonical_json): the bytes every hashed document is made of.
Its forms are pinned to the exact ``json.dumps`` calls the digests were defined with (the
restructure merged five serializers into it; a digest must not move)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.canonical_json import (
    canonical_json_bytes,
    go_struct_json_bytes,
    readable_json_bytes,
)

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(documents)
def test_canonical_bytes_are_the_compact_sorted_utf8_form(document) -> None:
    expected = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert canonical_json_bytes(document) == expected
    assert json.loads(canonical_json_bytes(document)) == document


@given(documents)
def test_ascii_only_bytes_are_the_escaped_form_of_the_identity_hashes(document) -> None:
    expected = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    assert canonical_json_bytes(document, ascii_only=True) == expected


@given(documents)
def test_readable_bytes_are_the_receipt_form(document) -> None:
    expected = (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    assert readable_json_bytes(document) == expected
    assert canonical_json_bytes(json.loads(readable_json_bytes(document))) == canonical_json_bytes(document)


@given(st.dictionaries(st.text(), st.integers(), min_size=2, max_size=6))
def test_key_order_of_the_input_does_not_matter(mapping) -> None:
    reversed_mapping = dict(reversed(list(mapping.items())))
    assert canonical_json_bytes(mapping) == canonical_json_bytes(reversed_mapping)
    assert readable_json_bytes(mapping) == readable_json_bytes(reversed_mapping)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(value: float) -> None:
    for serialize in (canonical_json_bytes, readable_json_bytes):
        with pytest.raises(ValueError):
            serialize({"value": value})


def test_non_ascii_text_is_utf8_unless_asked_otherwise() -> None:
    assert canonical_json_bytes({"name": "ü"}) == '{"name":"ü"}'.encode()
    assert canonical_json_bytes({"name": "ü"}, ascii_only=True) == b'{"name":"\\u00fc"}'


@given(documents)
def test_go_struct_bytes_keep_the_documents_key_order_with_gos_escapes(document) -> None:
    """cosign's payloads and the docker-archive manifest containers/image derives: compact,
    the document's own key order (a Go struct's), UTF-8, and <, >, &, U+2028/9 escaped as
    Go's encoding/json escapes them; nothing else differs from the plain compact form."""
    written = go_struct_json_bytes(document)
    expected = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    for char, escape in GO_ESCAPES:
        expected = expected.replace(char, escape)
    assert written == expected.encode("utf-8")
    parsed = json.loads(written)
    assert parsed == document
    if isinstance(document, dict):
        assert list(parsed) == list(document)


GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def test_go_struct_bytes_write_text_that_was_no_utf8_as_the_replacement_character() -> None:
    # a surrogate-escaped argv byte, as Go writes an invalid UTF-8 byte: U+FFFD, escaped
    assert go_struct_json_bytes({"r": "a\udcff<"}) == b'{"r":"a\\ufffd\\u003c"}'


def test_go_struct_bytes_are_cosigns_simple_signing_payload() -> None:
    """The exact bytes `cosign sign` writes for this image (field order critical, optional;
    inside, identity, image, type), checked against cosign 2.5.0's output in the signing
    tests; here the order alone."""
    document = {"critical": {"identity": {"docker-reference": "r/x"}, "image": {"docker-manifest-digest": "sha256:0"},
                             "type": "cosign container image signature"}, "optional": None}
    assert go_struct_json_bytes(document) == (
        b'{"critical":{"identity":{"docker-reference":"r/x"},"image":{"docker-manifest-digest":"sha256:0"},'
        b'"type":"cosign container image signature"},"optional":null}'
    )
