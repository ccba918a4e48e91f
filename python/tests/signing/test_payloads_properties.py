"""The in-toto statement sparkflake attests (``signing.payloads``) and the tags cosign's
objects live under (``signing.cosign``, ``oci.artifact``): a receipt's provenance, made a
statement, reads back as a statement of the manifest digest with the receipt's predicate
unchanged, in canonical JSON; a receipt of another image is refused naming its subject; a
statement of an unknown type or without a subject list is refused at its JSON path."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.canonical_json import canonical_json_bytes
from sparkflake.core.errors import CheckFailed
from sparkflake.oci.artifact import fallback_tag
from sparkflake.signing import payloads
from sparkflake.signing.cosign import attestation_tag, signature_tag

pytestmark = pytest.mark.signing

HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 53), 1 << 53) | st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
_predicates = st.dictionaries(st.text(max_size=8), _json_values, max_size=4)
_names = st.from_regex(r"[a-z0-9.-]{1,12}(:[0-9]{2,5})?/[a-z0-9/-]{1,20}", fullmatch=True)


def _receipt(predicate, hexes: list[str]) -> dict:
    return {
        "_type": payloads.IN_TOTO_STATEMENT_TYPES[0],
        "subject": [{"name": f"image-{n}", "digest": {"sha256": h}} for n, h in enumerate(hexes)],
        "predicateType": payloads.SLSA_PROVENANCE_V1,
        "predicate": predicate,
    }


@given(_predicates, st.lists(HEX, min_size=1, max_size=3, unique=True), st.data(), _names)
def test_a_provenance_statement_reads_back_as_the_images(predicate, hexes, data, name) -> None:
    chosen = data.draw(st.sampled_from(hexes))
    content = payloads.provenance_statement(_receipt(predicate, hexes), name, f"sha256:{chosen}", "r.json")
    statement = payloads.parse_statement(content, "statement")
    assert content == canonical_json_bytes(statement)  # canonical: the bytes are a function of the value
    assert statement["predicate"] == json.loads(json.dumps(predicate))
    assert statement["predicateType"] == payloads.SLSA_PROVENANCE_V1
    assert statement["subject"] == [{"name": name, "digest": {"sha256": chosen}}]
    assert payloads.statement_subject_digests(statement, "statement") == {f"sha256:{chosen}"}


@given(_predicates, st.lists(HEX, max_size=3, unique=True), HEX)
def test_a_receipt_of_another_image_is_refused_naming_its_subjects(predicate, hexes, other) -> None:
    if other in hexes:
        return
    with pytest.raises(CheckFailed, match=r"^\[attestation\.subject\] r\.json: \$\.subject: the receipt is of ") as refused:
        payloads.provenance_statement(_receipt(predicate, hexes), "reg/repo", f"sha256:{other}", "r.json")
    assert refused.value.check_id == "attestation.subject"
    for known in hexes:
        assert f"sha256:{known}" in refused.value.message


@given(st.one_of(st.none(), st.text(max_size=20), st.integers()), st.lists(HEX, max_size=2))
def test_a_statement_of_an_unknown_type_is_refused_at_its_path(kind, hexes) -> None:
    statement = {**_receipt({}, hexes), "_type": kind}
    if kind in payloads.IN_TOTO_STATEMENT_TYPES:
        return
    with pytest.raises(CheckFailed, match=r"^\[attestation\.statement\] s: \$\._type: expected one of "):
        payloads.statement_subject_digests(statement, "s")


@given(st.one_of(st.none(), st.text(max_size=5), st.integers(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_a_statement_whose_subject_is_no_list_is_refused_at_its_path(subject) -> None:
    with pytest.raises(CheckFailed, match=r"^\[attestation\.statement\] s: \$\.subject: expected a list$"):
        payloads.statement_subject_digests({**_receipt({}, []), "subject": subject}, "s")


@given(st.binary(max_size=40).filter(lambda content: not content.strip().startswith(b"{")))
def test_a_statement_that_is_no_json_object_is_refused_as_a_check(content: bytes) -> None:
    with pytest.raises(CheckFailed, match=r"^\[attestation\.statement\] where: ") as refused:
        payloads.parse_statement(content, "where")
    assert refused.value.check_id == "attestation.statement"


@given(HEX)
def test_cosigns_tags_name_the_digest(hex_digits: str) -> None:
    digest = f"sha256:{hex_digits}"
    assert signature_tag(digest) == f"sha256-{hex_digits}.sig"
    assert attestation_tag(digest) == f"sha256-{hex_digits}.att"
    assert fallback_tag(digest) == f"sha256-{hex_digits}"
    # a tag is at most 128 characters of [A-Za-z0-9_.-] (the distribution spec's tag grammar)
    for tag in (signature_tag(digest), attestation_tag(digest), fallback_tag(digest)):
        assert len(tag) <= 128 and tag.replace("-", "").replace(".", "").isalnum()
