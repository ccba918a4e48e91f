"""The canonical TOML writer (sparkflake.core.canonical_toml) against tomllib."""

from __future__ import annotations

import math
import tomllib

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.core import canonical_toml

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

any_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
scalars = st.one_of(
    any_text,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False),
)
plain_arrays = st.one_of(
    st.lists(any_text, max_size=5),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5),
)


def _tables(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.dictionaries(any_text, children, max_size=5)


documents = st.recursive(
    _tables(st.one_of(scalars, plain_arrays)),
    lambda inner: _tables(
        st.one_of(scalars, plain_arrays, inner, st.lists(inner, min_size=1, max_size=3))
    ),
    max_leaves=30,
)


@given(documents)
@example({"0\n": 1, "sub": {"key\n": {"x": [{"y\n": "z\n"}]}}})
def test_tomllib_reads_back_what_was_written(document: dict) -> None:
    text = canonical_toml.dumps(document)
    assert tomllib.loads(text) == document


@given(documents)
def test_rewriting_the_parsed_document_gives_the_same_bytes(document: dict) -> None:
    text = canonical_toml.dumps(document)
    assert canonical_toml.dumps(tomllib.loads(text)) == text


@given(any_text)
def test_every_string_round_trips_as_value_and_as_key(text: str) -> None:
    written = canonical_toml.dumps({"k": text, text: 1})
    assert tomllib.loads(written) == {"k": text, text: 1}
    # written form is one line per key: no raw control character survives
    assert all(ord(char) >= 0x20 and char != "\x7f" for char in written.replace("\n", ""))


def test_escapes_are_the_short_forms_where_toml_has_them() -> None:
    assert canonical_toml.quote_string('a"b\\c\b\t\n\f\r\x00\x1f\x7fé☃') == (
        '"a\\"b\\\\c\\b\\t\\n\\f\\r\\u0000\\u001F\\u007Fé☃"'
    )


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(ValueError, match="lone surrogate U\\+D800"):
        canonical_toml.quote_string("\ud800")


def test_layout_rules() -> None:
    document = {
        "b": 1,
        "sub": {"x": True, "deeper": {}},
        "a": "text",
        "rows": [{"n": 1}, {"n": 2, "inner": {"y": -0.5}}],
        "empty": [],
        "weird key": ["s" * 60, "t" * 60],
        "nums": [1, 2],
        "f": math.inf,
    }
    assert canonical_toml.dumps(document) == (
        'b = 1\n'
        'a = "text"\n'
        'empty = []\n'
        '"weird key" = [\n'
        f'  "{"s" * 60}",\n'
        f'  "{"t" * 60}",\n'
        ']\n'
        'nums = [1, 2]\n'
        'f = inf\n'
        '\n'
        '[sub]\n'
        'x = true\n'
        '\n'
        '[sub.deeper]\n'
        '\n'
        '[[rows]]\n'
        'n = 1\n'
        '\n'
        '[[rows]]\n'
        'n = 2\n'
        '\n'
        '[rows.inner]\n'
        'y = -0.5\n'
    )


def test_floats_keep_their_value_and_type() -> None:
    for value in (0.1, 1e300, -2.5e-10, 1e16, 3.0, -0.0, -math.inf):
        parsed = tomllib.loads(canonical_toml.dumps({"v": value}))["v"]
        assert isinstance(parsed, float) and parsed == value


def test_nan_is_written_as_toml_nan() -> None:
    assert math.isnan(tomllib.loads(canonical_toml.dumps({"v": math.nan}))["v"])


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"k": None}, "key 'k': None has no TOML form"),
        ({"k": object()}, "unsupported TOML value of type object"),
        ({"k": [1, {"a": 1}]}, "arrays mixing tables and values"),
    ],
)
def test_values_outside_the_subset_are_refused(document: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        canonical_toml.dumps(document)
