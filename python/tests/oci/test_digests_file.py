"""``digests.json`` has one model (``oci/digests_file.py``): what both builds write reads back
as the image's digests and layer sizes, and any other document is read or refused with an
InputError naming the file and the JSON path, never another exception. Export, load, the
launch, the service and status all read it through ``read_digests_file``."""

from __future__ import annotations

import json

import pytest
from fixtures.one_layer_image import one_layer_image, write_one_layer_image
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.cli import main
from sparkflake.core.canonical_json import readable_json_bytes
from sparkflake.core.errors import InputError
from sparkflake.launch.evidence import load_built_image
from sparkflake.oci.digests_file import (
    DIGESTS_FILE,
    RecordedDigests,
    digests_record,
    read_digests_file,
)

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

DIGESTS = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda hex_: f"sha256:{hex_}")
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
LAYERS = st.lists(st.fixed_dictionaries({"uncompressed_size": st.integers(min_value=0) | JSON}), max_size=3)


def test_what_image_build_writes_reads_back_as_the_image(tmp_path):
    out, manifest_digest = write_one_layer_image(tmp_path, {"a": b"alpha", "dir/b": b"beta"})
    recorded = read_digests_file(out / DIGESTS_FILE)
    assert recorded.manifest_digest == manifest_digest
    document = json.loads((out / DIGESTS_FILE).read_bytes())
    assert recorded.image_id == recorded.config_digest == document["config"] == document["image_id"]
    assert recorded.layer_sizes() == tuple(layer["uncompressed_size"] for layer in document["layers"])
    assert recorded.where == str(out / DIGESTS_FILE)
    assert "profile" not in document  # `image build` names no profile


def test_a_profiles_build_adds_its_name_and_layer_names(tmp_path):
    image = one_layer_image(tmp_path, {"f": b"x"})
    record = digests_record(image, profile="glm53-dflash7", layer_names=("base",))
    assert record["profile"] == "glm53-dflash7" and record["layer_names"] == ["base"]
    assert {key: value for key, value in record.items() if key not in ("profile", "layer_names")} == digests_record(image)
    (tmp_path / DIGESTS_FILE).write_bytes(readable_json_bytes(record))
    recorded = read_digests_file(tmp_path / DIGESTS_FILE)
    assert (recorded.manifest_digest, recorded.config_digest) == (image.manifest_digest, image.config_digest)
    assert recorded.layer_sizes() == tuple(layer.uncompressed_size for layer in image.layers)


@given(st.one_of(JSON, st.fixed_dictionaries({"manifest": DIGESTS | JSON, "config": DIGESTS | JSON},
                                              optional={"layers": JSON | LAYERS})))
@example({"manifest": "sha256:" + "a" * 64, "config": "sha256:" + "b" * 64})
@example({"manifest": "sha256:" + "a" * 64, "config": "sha256:" + "b" * 64, "layers": [{"uncompressed_size": True}]})
def test_any_document_is_read_or_refused_naming_the_file_and_path(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("out") / DIGESTS_FILE
    path.write_text(json.dumps(document))
    try:
        recorded = read_digests_file(path)
    except InputError as refusal:
        assert refusal.message.startswith(f"{path}: ")
        return
    assert (recorded.manifest_digest, recorded.config_digest) == (document["manifest"], document["config"])
    layers = document.get("layers")
    if layers is None:
        assert recorded.uncompressed_sizes is None
        with pytest.raises(InputError, match=r"\$\.layers: expected the build's layers"):
            recorded.layer_sizes()
    else:
        assert recorded.layer_sizes() == tuple(layer["uncompressed_size"] for layer in layers)
        assert all(type(size) is int and size >= 0 for size in recorded.layer_sizes())


def test_the_launch_reads_the_same_model_and_no_build_is_none(tmp_path):
    assert load_built_image(tmp_path / DIGESTS_FILE) is None
    (tmp_path / DIGESTS_FILE).write_text(json.dumps({"manifest": "sha256:" + "1" * 64, "config": "sha256:" + "2" * 64}))
    assert load_built_image(tmp_path / DIGESTS_FILE) == RecordedDigests(
        "sha256:" + "1" * 64, "sha256:" + "2" * 64, str(tmp_path / DIGESTS_FILE))
    # load needs the image ID alone; a launch names the image by its manifest too
    (tmp_path / DIGESTS_FILE).write_text(json.dumps({"config": "sha256:" + "2" * 64}))
    assert read_digests_file(tmp_path / DIGESTS_FILE).image_id == "sha256:" + "2" * 64
    with pytest.raises(InputError, match=r"\$\.manifest: expected sha256:<64 lowercase hex digits>, got None"):
        load_built_image(tmp_path / DIGESTS_FILE)
    (tmp_path / DIGESTS_FILE).write_text(json.dumps({"manifest": "sha256:" + "1" * 64, "config": 7}))
    with pytest.raises(InputError, match=r"\$\.config: expected sha256:<64 lowercase hex digits>, got 7"):
        load_built_image(tmp_path / DIGESTS_FILE)


def test_load_refuses_a_config_that_is_no_digest_before_it_runs_an_engine(tmp_path, capsys):
    """`sparkflake load` took any value of "config" (a number, a list) and handed it to the
    engine's image-ID check; it is now read as every reader reads it."""
    (tmp_path / DIGESTS_FILE).write_text(json.dumps({"manifest": "sha256:" + "1" * 64, "config": [1]}))
    assert main(["load", str(tmp_path)]) == 2
    assert f"{tmp_path / DIGESTS_FILE}: $.config: expected sha256:<64 lowercase hex digits>, got [1]" \
        in capsys.readouterr().err
