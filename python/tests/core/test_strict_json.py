"""JSON read as strictly as Go's encoding/json and RFC 8259: no byte-order mark, no key
twice in one object (named by its JSON path), no NaN or Infinity; everything else exactly
what json.loads gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.documents import parse_json
from sparkflake.core.errors import InputError

pytestmark = pytest.mark.nix_sandbox

_keys = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=6)
_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8)
documents = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=20,
)


@given(documents)
def test_a_strict_document_reads_as_json_loads_reads_it(document) -> None:
    raw = json.dumps(document).encode()
    assert parse_json(raw, "d.json") == json.loads(raw)


def _objects(node, path):
    """Every object of ``node`` with its JSON path, in document order."""
    if isinstance(node, dict):
        yield path, node
        for key, child in node.items():
            yield from _objects(child, f"{path}.{key}")
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _objects(child, f"{path}[{index}]")


@given(st.dictionaries(_keys, documents, min_size=1, max_size=4), st.data())
def test_a_key_given_twice_anywhere_is_refused_naming_its_path(document, data) -> None:
    objects = [(path, node) for path, node in _objects(document, "$") if node]
    path, chosen = data.draw(st.sampled_from(objects))
    key = data.draw(st.sampled_from(sorted(chosen)))
    marker = "\x00twice\x00"
    chosen[marker] = None  # serialized, then renamed to a second ``key``
    raw = json.dumps(document).replace(json.dumps(marker), json.dumps(key), 1).encode()
    del chosen[marker]
    with pytest.raises(InputError) as caught:
        parse_json(raw, "d.json")
    assert str(caught.value).startswith(f"d.json: {path}.{key}: the key is given twice in one object")


@given(documents)
def test_a_byte_order_mark_is_refused(document) -> None:
    raw = json.dumps(document).encode()
    for marked in (b"\xef\xbb\xbf" + raw, "\ufeff" + raw.decode()):
        with pytest.raises(InputError, match="d.json: starts with a UTF-8 byte-order mark"):
            parse_json(marked, "d.json")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    with pytest.raises(InputError, match=f"d.json: not valid JSON: {constant} is not JSON"):
        parse_json(f'{{"size": {constant}}}', "d.json")
