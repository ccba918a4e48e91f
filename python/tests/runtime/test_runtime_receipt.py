"""The runtime check recorded in the build's receipt (runtime.receipt_record): one
``runtime-capabilities`` byproduct with the manifest's sha256, only in the receipt of the
image the capabilities are bound to; the other byproducts untouched."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from fixtures.launch import PROFILES
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.compose.receipt import byproduct, in_image_from_full
from sparkflake.core.canonical_json import readable_json_bytes
from sparkflake.core.errors import InputError
from sparkflake.runtime import capabilities as capability_file
from sparkflake.runtime.receipt_record import BYPRODUCT, record_in_receipt

CAPS = capability_file.load(PROFILES / "glm53-dflash7" / capability_file.FILE_NAME)


def _receipt(path, manifest_digest: str, byproducts: list[dict]) -> None:
    path.write_bytes(readable_json_bytes({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "glm53-dflash7", "digest": {"sha256": manifest_digest.removeprefix("sha256:")}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {"buildDefinition": {}, "runDetails": {"byproducts": byproducts}},
    }))


@settings(max_examples=30, deadline=None)
@given(others=st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8).filter(lambda n: n != BYPRODUCT),
                                              "digest": st.fixed_dictionaries({"sha256": st.text(max_size=4)})}),
                       max_size=4),
       contents=st.lists(st.binary(max_size=64), min_size=1, max_size=3))
def test_recorded_once_with_the_file_s_digest_others_untouched(tmp_path_factory, others, contents):
    path = tmp_path_factory.mktemp("receipt") / "receipt.json"
    _receipt(path, CAPS.manifest_digest, others)
    for content in contents:  # a second check replaces the first one's record
        record_in_receipt(path, content, CAPS, {"ok": True, "checks": 3})
    statement = json.loads(path.read_bytes())
    byproducts = statement["predicate"]["runDetails"]["byproducts"]
    assert byproducts[:-1] == others and [b["name"] for b in byproducts].count(BYPRODUCT) == 1
    entry = byproduct(statement, BYPRODUCT)
    assert entry["digest"] == {"sha256": hashlib.sha256(contents[-1]).hexdigest()}
    assert entry["annotations"] == {"checks": 3, "ok": True} and entry["uri"] == "file:runtime-capabilities.json"
    assert path.read_bytes() == readable_json_bytes(statement)


def test_a_receipt_of_another_image_is_refused(tmp_path):
    path = tmp_path / "receipt.json"
    _receipt(path, "sha256:" + "1" * 64, [])
    before = path.read_bytes()
    # the capabilities name the image they describe; a receipt of another one is refused
    with pytest.raises(InputError, match=rf"receipt\.json: subject: the receipt is not of image {CAPS.manifest_digest}"):
        record_in_receipt(path, b"{}", CAPS, {})
    assert path.read_bytes() == before
    unbound = dataclasses.replace(CAPS, manifest_digest=None)
    _receipt(path, CAPS.manifest_digest, [])
    with pytest.raises(InputError, match="subject"):
        record_in_receipt(path, b"{}", unbound, {})


def test_a_receipt_without_byproducts_is_named(tmp_path):
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps({"subject": [{"digest": {"sha256": CAPS.manifest_digest[7:]}}], "predicate": {}}))
    with pytest.raises(InputError, match=r"predicate\.runDetails\.byproducts: expected a list"):
        record_in_receipt(path, b"{}", CAPS, {})


def test_the_in_image_statement_derived_from_the_receipt_is_unchanged(tmp_path):
    # receipt verification compares /etc/sparkflake/receipt.json with the statement the full
    # receipt derives: recording the check must not change what it derives
    path = tmp_path / "receipt.json"
    layer = {"name": "layer[0]", "digest": {"sha256": "2" * 64}, "annotations": {"diff_id": "sha256:" + "3" * 64}}
    _receipt(path, CAPS.manifest_digest, [{"name": "locked-input", "digest": {"sha256": "4" * 64}}, layer])
    before = in_image_from_full(json.loads(path.read_bytes()))
    record_in_receipt(path, b"{}", CAPS, {"ok": True})
    after = json.loads(path.read_bytes())
    assert byproduct(after, BYPRODUCT) is not None and in_image_from_full(after) == before
