"""Documents a registry served (``oci.remote.json_object``) and the manifest an index is
read for (``oci.reader.select_platform_manifest``): a served JSON object reads as
``json.loads`` reads it; anything else (another JSON value, bytes that are no JSON or no
UTF-8, a key twice, NaN, a byte-order mark, nesting past the parser) fails the check
(``CheckFailed``) naming where it came from, never a traceback. An index gives the first
entry for the platform named (``os``/``architecture`` as written), the only entry when
none is named, and a refusal naming the index and the platform when none fits."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci.reader import _layout_blob_name, select_platform_manifest
from sparkflake.oci.remote import json_object

pytestmark = pytest.mark.oci

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=10)
_WHERE = "registry.example:5000/glm53@sha256:ab manifest"


@given(st.dictionaries(st.text(max_size=8), _json, max_size=4), st.booleans())
def test_a_served_object_reads_as_json_loads_reads_it(document, ascii_only) -> None:
    raw = json.dumps(document, ensure_ascii=ascii_only).encode()
    assert json_object(raw, _WHERE) == json.loads(raw)


@given(st.one_of(
    _json.filter(lambda value: not isinstance(value, dict)).map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=60),
    st.sampled_from([b'{"a":1,"a":2}', b'{"a":NaN}', b'{"a":Infinity}', b"\xef\xbb\xbf{}", b'{"a":"\xff"}',
                     b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000]),
))
def test_anything_else_fails_the_check_naming_where(raw: bytes) -> None:
    try:
        expected = json.loads(raw)
    except (ValueError, RecursionError):
        expected = None
    try:
        document = json_object(raw, _WHERE)
    except CheckFailed as refused:
        assert str(refused).startswith(f"{_WHERE}: ")
        return
    # accepted: a JSON object json.loads agrees on (bytes without duplicate keys, NaN or BOM)
    assert isinstance(document, dict) and document == expected


_platforms = st.sampled_from([("linux", "arm64"), ("linux", "amd64"), ("linux", "s390x"), ("windows", "amd64")])


def _entry(number: int, platform: tuple[str, str] | None) -> dict:
    entry = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": "sha256:" + hashlib.sha256(str(number).encode()).hexdigest(), "size": 100 + number}
    if platform is not None:
        entry["platform"] = {"os": platform[0], "architecture": platform[1]}
    return entry


@given(st.lists(st.none() | _platforms, min_size=1, max_size=5), st.none() | _platforms)
def test_an_index_gives_the_first_entry_for_the_platform_named(platforms, wanted) -> None:
    manifests = [_entry(number, platform) for number, platform in enumerate(platforms)]
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
    named = None if wanted is None else "/".join(wanted)
    if wanted is None:
        fits = [0] if len(platforms) == 1 else [n for n, p in enumerate(platforms) if p == ("linux", "arm64")]
    else:
        fits = [n for n, p in enumerate(platforms) if p == wanted]
    try:
        ref, entry_platform = select_platform_manifest(index, "index.json", named, _layout_blob_name)
    except InputError as refused:
        assert not fits
        assert str(refused).startswith("[") and "index.json: " in str(refused)
        assert (named in str(refused)) if named else "name the platform" in str(refused)
        return
    assert fits, "an entry was chosen where none fits"
    chosen = manifests[fits[0]]
    assert (ref.digest, ref.size, ref.name) == (chosen["digest"], chosen["size"], f"blobs/sha256/{chosen['digest'][7:]}")
    assert entry_platform == chosen.get("platform")
