"""A rank's image store for the blob route, without the network: what it holds verified, what
a changed blob does to that, the commit that writes manifest and index last, the plan that
travels from rank 0, and the containers-storage reference skopeo gets."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest
from fixtures.one_layer_image import write_one_layer_image
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.core.file_hashes import stat_identity
from sparkflake.distribute.engine import import_layout, open_image, storage_specifier
from sparkflake.distribute.store import (
    RECORD_NAME,
    LayoutPlan,
    blob_path,
    blob_status,
    commit,
    find_layout,
    parse_blobs,
    plan_from_document,
    read_layout,
    recorded_blobs,
)
from sparkflake.oci import (
    BlobStore,
    ImageSpec,
    LayerInput,
    LayerSpec,
    Platform,
    TreeSource,
    build_image,
    write_oci_layout,
)
from sparkflake.oci.types import Descriptor

digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda hex_part: "sha256:" + hex_part)
descriptors = st.builds(Descriptor, digest=digests, size=st.integers(0, 1 << 50),
                        media_type=st.text(max_size=40))


def put(root: Path, content: bytes) -> Descriptor:
    descriptor = Descriptor("application/x", "sha256:" + hashlib.sha256(content).hexdigest(), len(content))
    path = blob_path(root, descriptor.digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return descriptor


def plan_of(blobs: list[Descriptor], index: bytes = b'{"index":1}') -> LayoutPlan:
    manifest = json.dumps({"layers": [blob.digest for blob in blobs[:-1]], "config": blobs[-1].digest}).encode()
    return LayoutPlan(index, "sha256:" + hashlib.sha256(manifest).hexdigest(), manifest, blobs[-1],
                      tuple(blobs[:-1]), None)


@given(st.lists(descriptors, max_size=6))
def test_blob_lists_round_trip(blobs: list[Descriptor]) -> None:
    assert parse_blobs([blob.as_record() for blob in blobs], "list") == blobs


@pytest.mark.parametrize(("document", "message"), [
    ({}, "list: expected a list"),
    ([{"digest": "sha256:" + "0" * 64, "size": 1}], "list[0]: expected exactly digest, size, mediaType"),
    ([{"digest": "md5:00", "size": 1, "mediaType": ""}], "list[0].digest: expected sha256:"),
    ([{"digest": "sha256:" + "A" * 64, "size": 1, "mediaType": ""}], "list[0].digest"),
    ([{"digest": "sha256:" + "0" * 64, "size": -1, "mediaType": ""}], "list[0].size: expected a non-negative"),
    ([{"digest": "sha256:" + "0" * 64, "size": False, "mediaType": ""}], "list[0].size"),
    ([{"digest": "sha256:" + "0" * 64, "size": 1, "mediaType": 3}], "list[0].mediaType: expected a string"),
])
def test_malformed_blob_lists_name_the_position(document: object, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_blobs(document, "list")


@given(st.binary(max_size=200), st.binary(max_size=300), descriptors, st.lists(descriptors, max_size=4),
       st.one_of(st.none(), st.text(max_size=10)))
def test_plans_round_trip_and_a_changed_manifest_is_refused(index: bytes, manifest: bytes, config: Descriptor,
                                                            layers: list[Descriptor], ref: str | None) -> None:
    plan = LayoutPlan(index, "sha256:" + hashlib.sha256(manifest).hexdigest(), manifest, config, tuple(layers), ref)
    document = json.loads(json.dumps(plan.as_record()))
    assert plan_from_document(document, "plan") == plan
    document["manifest"] = base64.b64encode(manifest + b" ").decode()
    with pytest.raises(CheckFailed, match="manifest bytes do not have digest"):
        plan_from_document(document, "plan")


def test_a_blob_changed_in_place_is_hashed_again_even_with_its_mtime_restored(tmp_path: Path) -> None:
    good = put(tmp_path, os.urandom(100_000))
    other = put(tmp_path, b"config")
    assert blob_status(tmp_path, [good, other], rehash=False, remember=True) == {
        "held": [good.digest, other.digest], "present_wrong": []}
    assert (tmp_path / RECORD_NAME).exists()
    assert sorted(recorded_blobs(tmp_path)) == sorted([good.digest, other.digest])
    path = blob_path(tmp_path, good.digest)
    before = os.stat(path)
    time.sleep(0.02)  # past the kernel's timestamp tick (a jiffy): a write now gets a new ctime
    with open(path, "r+b") as handle:
        handle.seek(5000)
        byte = handle.read(1)
        handle.seek(5000)
        handle.write(bytes([byte[0] ^ 0x80]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only ctime tells
    assert recorded_blobs(tmp_path) == [other.digest]
    assert blob_status(tmp_path, [good, other], rehash=False, remember=False) == {
        "held": [other.digest], "present_wrong": [good.digest]}
    # a symlink under a blob name is not a blob the store holds
    path.unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"config")
    path.symlink_to(target)
    assert blob_status(tmp_path, [good], rehash=True, remember=False)["held"] == []


def test_the_source_record_is_never_written(tmp_path: Path) -> None:
    blob = put(tmp_path, b"layer")
    assert blob_status(tmp_path, [blob], rehash=True, remember=False)["held"] == [blob.digest]
    assert not (tmp_path / RECORD_NAME).exists()


def test_commit_writes_manifest_and_index_only_when_every_blob_is_there(tmp_path: Path) -> None:
    layer, config = put(tmp_path, os.urandom(1000)), put(tmp_path, b'{"config":1}')
    absent = Descriptor("application/x", "sha256:" + "1" * 64, 10)
    (tmp_path / "index.json").write_bytes(b"previous index")
    plan = plan_of([layer, absent, config])
    with pytest.raises(CheckFailed, match=f"1 blobs of manifest {plan.manifest_digest} are missing or wrong "
                                          rf"\({absent.digest}\); index.json not written"):
        commit(tmp_path, plan, {})
    assert (tmp_path / "index.json").read_bytes() == b"previous index"
    assert not blob_path(tmp_path, plan.manifest_digest).exists()

    plan = plan_of([layer, config])
    identity = stat_identity(os.stat(blob_path(tmp_path, layer.digest)))
    result = commit(tmp_path, plan, {layer.digest: identity})
    assert result["manifest_digest"] == plan.manifest_digest
    assert blob_path(tmp_path, plan.manifest_digest).read_bytes() == plan.manifest_bytes
    assert (tmp_path / "index.json").read_bytes() == plan.index_bytes
    assert json.loads((tmp_path / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert sorted(recorded_blobs(tmp_path)) == sorted([layer.digest, config.digest])


def test_commit_does_not_take_a_reported_identity_for_a_blob_that_changed_since(tmp_path: Path) -> None:
    layer, config = put(tmp_path, os.urandom(1000)), put(tmp_path, b"{}")
    reported = stat_identity(os.stat(blob_path(tmp_path, layer.digest)))
    blob_path(tmp_path, layer.digest).write_bytes(os.urandom(1000))
    with pytest.raises(CheckFailed, match=layer.digest):
        commit(tmp_path, plan_of([layer, config]), {layer.digest: reported})


def test_a_layout_built_by_our_engine_reads_as_its_plan(tmp_path: Path) -> None:
    tree = tmp_path / "tree" / "opt"
    tree.mkdir(parents=True)
    (tree / "a").write_bytes(b"payload")
    layer = LayerSpec(LayerInput(sources=(TreeSource(str(tmp_path / "tree")),)), created_by="test")
    spec = ImageSpec(layers=(layer,), platform=Platform.parse("linux/arm64"), repository="localhost/x", tag="t")
    image = build_image(spec, BlobStore(tmp_path / "store"), None)
    write_oci_layout(image, tmp_path / "out" / "oci")
    assert find_layout(tmp_path / "out") == tmp_path / "out" / "oci"
    plan = read_layout(tmp_path / "out" / "oci")
    assert plan.manifest_digest == image.manifest_digest and plan.config.digest == image.config_digest
    assert [layer.digest for layer in plan.layers] == [layer.digest for layer in image.layers]
    assert plan.index_bytes == image.index_bytes
    with pytest.raises(InputError, match="neither an OCI layout"):
        find_layout(tmp_path)


@pytest.mark.parametrize(("engine_args", "expected"), [
    ([], ""),
    (["--root", "/r"], "[/r]"),
    (["--root", "/r", "--runroot", "/run/x", "--storage-driver", "vfs"], "[vfs@/r+/run/x]"),
    (["--storage-driver=overlay", "--root=/r", "--cgroup-manager", "cgroupfs"], "[overlay@/r]"),
])
def test_the_storage_specifier_names_podmans_store(engine_args: list[str], expected: str) -> None:
    assert storage_specifier(engine_args) == expected


@pytest.mark.parametrize("engine_args", [["--root"], ["--runroot", "/run/x"]])
def test_an_incomplete_store_option_is_refused(engine_args: list[str]) -> None:
    with pytest.raises(InputError, match="engine_args"):
        storage_specifier(engine_args)


@pytest.mark.parametrize(("engine_args", "name"), [
    (["--root", "/var/lib/store+b"], "root"),  # skopeo: root /var/lib/store, runroot b
    (["--root", "/srv/a@b"], "root"),  # skopeo: driver /srv/a, root b
    (["--root", "/r", "--runroot", "/run/x:y"], "runroot"),  # skopeo: options y
    (["--root", "/r]x"], "root"),
])
def test_a_store_path_skopeo_would_split_is_refused(engine_args: list[str], name: str) -> None:
    with pytest.raises(InputError, match=rf"^engine_args: the store's {name} '.*' cannot be named to skopeo"):
        storage_specifier(engine_args)


def test_a_layout_path_with_a_colon_is_refused_before_skopeo_reads_another_directory(tmp_path: Path) -> None:
    """skopeo reads oci:/X/c:d/oci as the layout /X/c (reference "d/oci"): not the layout
    sparkflake verified, whose layer entries were checked; it is refused before skopeo runs."""
    out, _ = write_one_layer_image(tmp_path / "c:d", {"etc/hello": b"hello\n"})
    layout = out / "oci"
    image_id = open_image(str(layout)).config_ref.digest
    assert image_id is not None
    with pytest.raises(InputError, match=rf"^{re.escape(str(layout))}: a layout whose path holds ':' cannot be named"):
        import_layout("podman", ["--root", str(tmp_path / "store"), "--storage-driver", "vfs"], str(layout), image_id,
                      "localhost/x:1")
    assert not (tmp_path / "store").exists()  # nothing ran
