"""Receipts: in-toto Statement v1 / SLSA provenance v1 shape and the in-image/full pair."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sparkflake.compose import receipt
from sparkflake.compose.verification import ChainFailed, Link, run_chain
from sparkflake.core.canonical_json import readable_json_bytes
from sparkflake.core.errors import CheckFailed

_hex = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=12)


def _dependency(name: str, digest: str) -> receipt.ResolvedDependency:
    return receipt.ResolvedDependency(name=name, uri=f"https://example.invalid/{name}", digest={"sha256": digest}, annotations={"kind": "wheel"})


@given(
    deps=st.dictionaries(st.text(alphabet="abcxyz-", min_size=1, max_size=8), _hex, min_size=1, max_size=5),
    lower=st.lists(_hex, min_size=1, max_size=5),
    top=_hex,
    labels=st.dictionaries(st.text(alphabet="abc.", min_size=1, max_size=8), _text, max_size=4),
    manifest=_hex,
    config=_hex,
)
def test_full_and_in_image_round_trip(deps, lower, top, labels, manifest, config) -> None:
    predicate = receipt.provenance_predicate(
        external_parameters={"profile": "p"},
        internal_parameters={"labels": labels},
        resolved_dependencies=[_dependency(name, digest) for name, digest in sorted(deps.items())],
        byproducts=[{"name": receipt.OVERLAY, "digest": {"sha256": manifest}}],
        builder_version="0.1.0",
    )
    in_image = receipt.in_image_statement(lower_diff_ids=[f"sha256:{d}" for d in lower], predicate=predicate)
    layers = [
        {"digest": f"sha256:{d}", "diff_id": f"sha256:{d}", "size": 1, "media_type": "application/vnd.oci.image.layer.v1.tar+gzip"}
        for d in [*lower, top]
    ]
    full = receipt.full_statement(
        in_image, image_name="localhost/x:p", manifest_digest=f"sha256:{manifest}", config_digest=f"sha256:{config}", layers=layers
    )
    assert full["_type"] == receipt.STATEMENT_TYPE and full["predicateType"] == receipt.PREDICATE_TYPE
    assert full["subject"] == [{"name": "localhost/x:p", "digest": {"sha256": manifest}}]
    assert readable_json_bytes(receipt.in_image_from_full(full)) == readable_json_bytes(in_image)
    in_image_item = receipt.byproduct(full, receipt.IN_IMAGE_RECEIPT)
    assert in_image_item["digest"]["sha256"] == receipt.sha256_hex(readable_json_bytes(in_image))
    layer_items = [item for item in full["predicate"]["runDetails"]["byproducts"] if item["name"].startswith("layer[")]
    assert len(layer_items) == len(lower) + 1
    # canonical bytes are stable through a JSON round trip
    assert readable_json_bytes(json.loads(readable_json_bytes(full))) == readable_json_bytes(full)


def test_predicate_shape() -> None:
    predicate = receipt.provenance_predicate(
        external_parameters={},
        internal_parameters={},
        resolved_dependencies=[_dependency("vllm", "a" * 64)],
        byproducts=[],
        builder_version="0.1.0",
    )
    definition = predicate["buildDefinition"]
    assert definition["buildType"] == receipt.BUILD_TYPE
    assert definition["resolvedDependencies"] == [
        {"name": "vllm", "uri": "https://example.invalid/vllm", "digest": {"sha256": "a" * 64}, "annotations": {"kind": "wheel"}}
    ]
    assert predicate["runDetails"]["builder"]["id"] == receipt.BUILDER_ID


def test_chain_runs_every_link_and_names_first_failure() -> None:
    seen = []

    def ok() -> str:
        seen.append("ok")
        return "fine"

    def bad(name: str):
        def check() -> str:
            seen.append(name)
            raise CheckFailed(f"{name} broke")
        return check

    try:
        run_chain([Link("a", "", ok), Link("b", "", bad("b")), Link("c", "", bad("c"))])
    except ChainFailed as failure:
        assert failure.check_id == "b"
        assert "b: b broke" in str(failure) and "c: c broke" in str(failure)
        assert [r.status for r in failure.results] == ["passed", "failed", "failed"]
    else:
        raise AssertionError("chain did not refuse")
    assert seen == ["ok", "b", "c"]
    assert [r.link for r in run_chain([Link("a", "", ok)])] == ["a"]
