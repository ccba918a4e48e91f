"""Canonical JSON, chain IDs and the config/manifest/index documents."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.canonical_json import canonical_json_bytes
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci import Platform, RuntimeConfig, chain_id
from sparkflake.oci.config import ImageConfig
from sparkflake.oci.reader import open_image
from sparkflake.oci.verify import verify_image

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
_DIGEST = st.binary(min_size=1, max_size=8).map(lambda b: "sha256:" + hashlib.sha256(b).hexdigest())


@given(document=_JSON)
def test_canonical_json_round_trips_and_is_a_fixed_point(document):
    encoded = canonical_json_bytes(document)
    assert json.loads(encoded) == document
    assert canonical_json_bytes(json.loads(encoded)) == encoded
    assert b"\n" not in encoded.replace(b"\\n", b"")


@given(document=st.dictionaries(st.text(max_size=6), st.integers(), max_size=6))
def test_key_order_does_not_matter(document):
    reordered = dict(reversed(list(document.items())))
    assert canonical_json_bytes(document) == canonical_json_bytes(reordered)


@given(diff_ids=st.lists(_DIGEST, min_size=1, max_size=6))
def test_chain_id_definition(diff_ids):
    expected = diff_ids[0]
    for diff_id in diff_ids[1:]:
        expected = "sha256:" + hashlib.sha256(f"{expected} {diff_id}".encode()).hexdigest()
    assert chain_id(diff_ids) == expected
    assert chain_id(diff_ids[:1]) == diff_ids[0]


def test_chain_id_of_nothing_is_refused():
    with pytest.raises(InputError):
        chain_id([])


@given(
    env=st.lists(st.text(min_size=1, max_size=5).map(lambda s: f"K={s}"), max_size=3),
    labels=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    epoch=st.integers(0, 2**33),
)
def test_config_document_shape(env, labels, epoch):
    document = ImageConfig(
        Platform.parse("linux/arm64"),
        RuntimeConfig(env=tuple(env), labels=labels, entrypoint=("/x",)),
        ["sha256:" + "0" * 64],
        ["layer"],
        epoch,
    ).as_record()
    assert document["architecture"] == "arm64" and document["variant"] == "v8"
    assert document["os"] == "linux"
    assert document["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}
    assert document["created"] == document["history"][0]["created"]
    assert document["created"].endswith("Z")
    assert ("Env" in document["config"]) == bool(env)


def test_platforms():
    assert Platform.parse("linux/amd64").as_record() == {"architecture": "amd64", "os": "linux"}
    assert str(Platform.parse("linux/arm64/v8")) == "linux/arm64/v8"
    for bad in ("linux/arm64/v7", "windows/amd64", "arm64", ""):
        with pytest.raises(InputError):
            Platform.parse(bad)


@given(index=_JSON, layout_version=st.sampled_from(["1.0.0", "0.9", None]))
def test_fuzzed_layouts_give_clean_errors(tmp_path_factory, index, layout_version):
    layout = tmp_path_factory.mktemp("fuzz")
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": layout_version}))
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises((InputError, CheckFailed)):
        verify_image(open_image(layout))
