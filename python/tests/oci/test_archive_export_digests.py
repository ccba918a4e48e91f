"""OUT/digests.json as `sparkflake export` reads it (``recorded_digests``): any JSON document
gives the recorded digests and sizes or an InputError naming the file and the key, never
another exception; what a build writes reads back as written."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci.archive_export import recorded_digests
from sparkflake.oci.digests_file import RecordedDigests

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

DIGESTS = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda hex_: f"sha256:{hex_}")
SIZES = st.integers(min_value=0, max_value=1 << 40)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)


@given(DIGESTS, DIGESTS, st.lists(SIZES, max_size=4))
def test_what_a_build_writes_reads_back(tmp_path_factory, manifest, config, sizes):
    out = tmp_path_factory.mktemp("out")
    layers = [{"digest": manifest, "uncompressed_size": size} for size in sizes]
    (out / "digests.json").write_text(json.dumps({"manifest": manifest, "config": config, "layers": layers}))
    assert recorded_digests(out) == RecordedDigests(manifest, config, str(out / "digests.json"), tuple(sizes))


@given(st.one_of(JSON, st.fixed_dictionaries({"manifest": DIGESTS | JSON, "config": DIGESTS | JSON,
                                               "layers": JSON | st.lists(st.fixed_dictionaries(
                                                   {"uncompressed_size": SIZES | JSON}), max_size=3)})))
def test_any_document_is_read_or_refused_naming_the_file(tmp_path_factory, document):
    out = tmp_path_factory.mktemp("out")
    (out / "digests.json").write_text(json.dumps(document))
    try:
        recorded = recorded_digests(out)
    except InputError as refusal:
        assert refusal.message.startswith(f"{out / 'digests.json'}: ")
    else:
        assert recorded.manifest_digest == document["manifest"] and recorded.config_digest == document["config"]
        assert list(recorded.uncompressed_sizes) == [layer["uncompressed_size"] for layer in document["layers"]]


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path / "digests.json")):
        recorded_digests(tmp_path)
