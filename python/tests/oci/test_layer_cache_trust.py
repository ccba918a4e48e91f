"""The layer cache hands out only verified bytes: a cached blob flipped in place (mtime
put back), truncated or replaced by a symlink is evicted, named and made again, and the
image audits; an unchanged entry is trusted by its recorded identity without a read;
an output's layout shares the store's bytes (a clone, else a hard link to the read-only
blob) and an edit through it is seen by the store's record and never handed out;
a layout started early (``LayoutWriter``, the build's background copies) gives the bytes of
one written at once, and an aborted or failed one leaves the previous layout alone."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
from fixtures.file_systems import clones_here

from sparkflake import audit
from sparkflake.cli import main
from sparkflake.core.errors import InputError
from sparkflake.oci import ImageSpec, LayerSpec, blob_store, build_image
from sparkflake.oci.blob_store import DIRECT_COPY_MIN, BlobStore, copy_blob
from sparkflake.oci.layer_input import GeneratedFile, LayerInput, TreeSource
from sparkflake.oci.layout import LayoutWriter, StagedLayout, output_layout, write_oci_layout
from sparkflake.workflows.build import BuildRequest, build_profile

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def spec_dir(root: Path) -> Path:
    (root / "base" / "usr" / "lib").mkdir(parents=True)
    (root / "base" / "usr" / "lib" / "data.bin").write_bytes(os.urandom(1 << 16))
    (root / "top").mkdir()
    (root / "top" / "hello").write_text("hello\n")
    (root / "spec.json").write_text(json.dumps({"layers": [{"tree": "base"}, {"tree": "top"}]}))
    return root / "spec.json"


def image_build(spec: Path, out: Path, cache: Path) -> int:
    return main(["image", "build", str(spec), "-o", str(out), "--cache", str(cache)])


def layer_blobs(out: Path) -> list[str]:
    return [layer["digest"] for layer in json.loads((out / "digests.json").read_text())["layers"]]


def flip_in_place(path: Path, offset: int = -1) -> None:
    """Change one byte without a new inode, and put the mtime back (as a careless or a
    hostile editor might); only the ctime, which no program can set, tells."""
    before = os.stat(path)
    with open(path, "r+b") as handle:  # root writes the read-only blob regardless
        handle.seek(offset % before.st_size)
        byte = handle.read(1)
        handle.seek(offset % before.st_size)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def audits_clean(layout: Path) -> bool:
    source = audit.open_target(f"oci:{layout}")
    return audit.audit_image(source, audit.expectations_from()).exit_code == 0


@pytest.mark.parametrize("damage", ["flip", "truncate", "symlink"])
def test_damaged_cached_blob_is_evicted_named_and_rebuilt(tmp_path, capsys, damage):
    spec = spec_dir(tmp_path / "spec")
    cache = tmp_path / "cache"
    assert image_build(spec, tmp_path / "first", cache) == 0
    digest = layer_blobs(tmp_path / "first")[0]
    blob = BlobStore(cache).path(digest)
    if damage == "flip":
        flip_in_place(blob)
    elif damage == "truncate":
        os.truncate(blob, blob.stat().st_size - 1)
    else:
        moved = tmp_path / "moved"
        blob.rename(moved)
        blob.symlink_to(moved)
    capsys.readouterr()
    assert image_build(spec, tmp_path / "second", cache) == 0
    captured = capsys.readouterr()
    assert f"evicted {digest} from the blob store ({blob})" in captured.err
    assert {"flip": "its bytes hash to sha256:", "truncate": "bytes, expected", "symlink": "not a regular file"}[damage] \
        in captured.err
    assert "(built)" in captured.out.splitlines()[4]  # layer 0 was made again, not reused
    assert layer_blobs(tmp_path / "second") == layer_blobs(tmp_path / "first")
    assert audits_clean(tmp_path / "second" / "oci")
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest.split(":")[1] and not blob.is_symlink()


def test_unchanged_entry_is_trusted_without_reading_it(tmp_path, monkeypatch):
    spec = spec_dir(tmp_path / "spec")
    cache = tmp_path / "cache"
    assert image_build(spec, tmp_path / "first", cache) == 0
    reads: list[Path] = []
    original = blob_store._sha256_of
    monkeypatch.setattr(blob_store, "_sha256_of", lambda path: reads.append(path) or original(path))
    assert image_build(spec, tmp_path / "second", cache) == 0
    assert reads == []
    # a new inode with the same bytes (a copy put back) is hashed once, then trusted again
    blob = BlobStore(cache).path(layer_blobs(tmp_path / "first")[0])
    content = blob.read_bytes()
    blob.unlink()
    blob.write_bytes(content)
    assert image_build(spec, tmp_path / "third", cache) == 0
    assert reads == [blob]
    assert image_build(spec, tmp_path / "fourth", cache) == 0
    assert reads == [blob]


def test_a_layout_holds_no_second_copy_and_an_edit_through_it_never_corrupts_the_cache(tmp_path, capsys):
    spec = spec_dir(tmp_path / "spec")
    cache = tmp_path / "cache"
    assert image_build(spec, tmp_path / "first", cache) == 0
    assert image_build(spec, tmp_path / "second", cache) == 0
    digest = layer_blobs(tmp_path / "first")[0]
    name = digest.split(":")[1]
    store_blob = BlobStore(cache).path(digest)
    first_blob, second_blob = (tmp_path / out / "oci" / "blobs" / "sha256" / name for out in ("first", "second"))
    inodes = {os.stat(p).st_ino for p in (store_blob, first_blob, second_blob)}
    # a clone has its own inode; without clones (ext4) the layout links the store's one
    assert len(inodes) == (3 if clones_here(tmp_path) else 1)
    assert store_blob.stat().st_mode & 0o222 == 0  # read-only: a stray write by a non-root user fails
    flip_in_place(second_blob, 100)  # root writes it regardless, and puts the mtime back
    capsys.readouterr()
    assert image_build(spec, tmp_path / "third", cache) == 0
    captured = capsys.readouterr()
    if len(inodes) == 1:  # the store saw the edit (its ctime) and made the layer again
        assert f"evicted {digest} from the blob store ({store_blob}): its bytes hash to" in captured.err
        assert "(built)" in captured.out.splitlines()[4]
        assert not audits_clean(tmp_path / "first" / "oci")  # the other name of the edited file
    else:
        assert "evicted" not in captured.err and audits_clean(tmp_path / "first" / "oci")
    assert hashlib.sha256(store_blob.read_bytes()).hexdigest() == name
    assert layer_blobs(tmp_path / "third") == layer_blobs(tmp_path / "first")
    assert audits_clean(tmp_path / "third" / "oci")
    assert not audits_clean(tmp_path / "second" / "oci")


def test_a_removed_or_replaced_output_costs_one_hash_never_a_wrong_blob(tmp_path, monkeypatch):
    spec = spec_dir(tmp_path / "spec")
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    assert image_build(spec, out, cache) == 0
    reads: list[Path] = []
    original = blob_store._sha256_of
    monkeypatch.setattr(blob_store, "_sha256_of", lambda path: reads.append(path) or original(path))
    # the build replacing its own output removes the old layout's links: recorded again, no read
    assert image_build(spec, out, cache) == 0
    assert reads == []
    blob = BlobStore(cache).path(layer_blobs(out)[0])
    (out / "oci" / "blobs" / "sha256" / blob.name).unlink()  # an operator's rm: the link count changed
    assert image_build(spec, tmp_path / "other", cache) == 0
    assert reads == ([] if clones_here(tmp_path) else [blob])  # hashed once, found intact, kept
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert audits_clean(tmp_path / "other" / "oci")


def test_stale_blobs_are_hashed_again_at_once_largest_first_and_answered_in_order(tmp_path, monkeypatch):
    """A rebuild whose lower blobs all went stale (an operator removed the hard-linked
    outputs) pays about its largest blob, not their sum: the re-hashes run side by side.
    The answers keep the caller's order; a wrong blob among them is still evicted."""
    store = BlobStore(tmp_path / "store")
    sizes = (1000, 300_000, 5000)
    paths = []
    for size in sizes:
        content = os.urandom(size)
        with store.new_blob() as (handle, staged):
            handle.write(content)
        paths.append(store.commit(staged, "sha256:" + hashlib.sha256(content).hexdigest()))
    for path in paths[:2]:  # stale: the mtime moved (so did the ctime), the bytes did not
        status = os.stat(path)
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1))
    flip_in_place(paths[2])
    together = threading.Barrier(2, timeout=30)  # the first two hashes must overlap
    hashed: list[int] = []
    original = blob_store._sha256_of

    def hash_side_by_side(path: Path) -> str | None:
        hashed.append(path.stat().st_size)
        if len(hashed) <= 2:
            together.wait()
        return original(path)

    monkeypatch.setattr(blob_store, "_sha256_of", hash_side_by_side)
    monkeypatch.setattr(blob_store.os, "cpu_count", lambda: 2)
    digests = ["sha256:" + path.name for path in paths]
    answers = store.verified_all([(digest, size) for digest, size in zip(digests, sizes, strict=True)])
    assert answers == [paths[0], paths[1], None]
    assert sorted(hashed[:2]) == [5000, 300_000] and hashed[2] == 1000
    assert [eviction.digest for eviction in store.evicted] == [digests[2]] and not paths[2].exists()
    assert store.verified_all([(digest, size) for digest, size in zip(digests[:2], sizes, strict=False)]) == paths[:2]
    assert len(hashed) == 3  # recorded again after the first check: trusted without a read


@pytest.mark.slow
def test_profile_build_rebuilds_a_flipped_lower_layer(tmp_path):
    cache = tmp_path / "cache"
    first = build_profile(BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "a", cache_root=cache, offline=True))
    victim = first.image.layers[1]
    flip_in_place(BlobStore(cache / "oci").path(victim.digest), 12345)
    second = build_profile(BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "b", cache_root=cache, offline=True))
    assert second.layers_from_cache[1] is False and all(second.layers_from_cache[i] for i in (0, 2, 3, 4))
    assert [e for e in second.extra["evicted"] if victim.digest in e and "its bytes hash to" in e]
    assert second.image.manifest_digest == first.image.manifest_digest
    assert audits_clean(tmp_path / "b" / "oci")


def layout_files(layout: Path) -> dict[str, bytes]:
    return {os.fspath(p.relative_to(layout)): p.read_bytes() for p in sorted(layout.rglob("*")) if p.is_file()}


def two_images(root: Path) -> tuple:
    """Two images over one store: the first with a layer larger than ``DIRECT_COPY_MIN``
    (random, so it stays large compressed: the copy past the page cache), the second
    sharing none of its layers."""
    (root / "big").mkdir(parents=True)
    (root / "big" / "random.bin").write_bytes(os.urandom(3 * DIRECT_COPY_MIN + 12345))
    store = BlobStore(root / "store")

    def image(tree: Path | None, content: bytes, tag: str):
        layers = [LayerSpec(LayerInput(files=(GeneratedFile("/etc/a.conf", content, 0o644),)), "file")]
        if tree is not None:
            layers.insert(0, LayerSpec(LayerInput(sources=(TreeSource(str(tree)),)), "tree"))
        return build_image(ImageSpec(layers=tuple(layers), repository="localhost/layout-test", tag=tag), store)

    return image(root / "big", b"first\n", "one"), image(None, b"second\n", "two")


def test_layout_started_early_gives_the_layout_written_at_once(tmp_path):
    image, other = two_images(tmp_path)
    assert image.layers[0].size > DIRECT_COPY_MIN
    write_oci_layout(image, tmp_path / "at-once")
    writer = LayoutWriter(tmp_path / "early")
    writer.add_layer(image.layers[0])
    writer.add_layer(other.layers[0])  # handed over, but not the image's: not in the layout
    writer.add_layer(image.layers[0])  # twice: copied once
    assert writer.finish(image) == tmp_path / "early"
    assert layout_files(tmp_path / "early") == layout_files(tmp_path / "at-once")
    assert not (tmp_path / "early" / "blobs" / "sha256" / other.layers[0].digest.split(":")[1]).exists()
    assert audits_clean(tmp_path / "early")
    for layer in image.layers:
        copied = tmp_path / "early" / "blobs" / "sha256" / layer.digest.split(":")[1]
        assert os.stat(copied).st_ino != os.stat(layer.blob_path).st_ino
    assert sorted(os.listdir(tmp_path)) == ["at-once", "big", "early", "store"]  # no staging left


@pytest.mark.parametrize("ending", ["abort", "source-gone"])
def test_a_layout_that_does_not_finish_leaves_the_previous_one(tmp_path, ending):
    image, other = two_images(tmp_path)
    write_oci_layout(other, tmp_path / "out")
    before = layout_files(tmp_path / "out")
    writer = LayoutWriter(tmp_path / "out")
    writer.add_layer(image.layers[0])
    if ending == "abort":  # the build refused after the copies started
        writer.abort()
        writer.abort()  # the build's error path may abort again
    else:
        os.unlink(image.layers[-1].blob_path)  # a store blob gone before it is copied
        with pytest.raises(InputError, match=rf"{image.layers[-1].blob_path}: cannot copy layer .* into {tmp_path / 'out'}"):
            writer.finish(image)
        writer.abort()
    assert layout_files(tmp_path / "out") == before
    assert sorted(os.listdir(tmp_path)) == ["big", "out", "store"]


def test_a_staged_layout_not_committed_leaves_the_previous_one(tmp_path):
    """The writer a registry pull fills: an error inside the block, or leaving it without
    ``commit``, removes the staging directory and keeps the previous layout."""
    image, other = two_images(tmp_path)
    write_oci_layout(other, tmp_path / "out")
    before = layout_files(tmp_path / "out")
    with pytest.raises(RuntimeError, match="a blob did not verify"), StagedLayout(tmp_path / "out") as staged:
        staged.write_blob(image.manifest_digest, image.manifest_bytes)
        raise RuntimeError("a blob did not verify")
    with StagedLayout(tmp_path / "out") as staged:
        staged.write_blob(image.config_digest, image.config_bytes)
    assert layout_files(tmp_path / "out") == before
    assert sorted(os.listdir(tmp_path)) == ["big", "out", "store"]
    with StagedLayout(tmp_path / "out") as staged:
        staged.write_blob(image.config_digest, image.config_bytes)
        staged.write_blob(image.manifest_digest, image.manifest_bytes)
        for layer in image.layers:
            copy_blob(layer.blob_path, staged.blob_path(layer.digest))
        staged.commit(image.index_bytes)
    write_oci_layout(image, tmp_path / "at-once")
    assert layout_files(tmp_path / "out") == layout_files(tmp_path / "at-once")


def test_output_layout_is_a_build_outputs_oci_or_the_path_itself(tmp_path):
    image, _ = two_images(tmp_path)
    write_oci_layout(image, tmp_path / "build" / "oci")
    assert output_layout(tmp_path / "build") == tmp_path / "build" / "oci"
    assert output_layout(tmp_path / "build" / "oci") == tmp_path / "build" / "oci"
    assert output_layout(tmp_path / "image.tar") == tmp_path / "image.tar"


@pytest.mark.parametrize("size", [0, 1, DIRECT_COPY_MIN - 1, DIRECT_COPY_MIN, 2 * DIRECT_COPY_MIN + 4097])
def test_copy_blob_gives_the_same_bytes_in_a_file_of_its_own(tmp_path, size):
    source = tmp_path / "source"
    content = os.urandom(size)
    source.write_bytes(content)
    source.chmod(0o444)
    target = tmp_path / "out" / "copy"
    copy_blob(source, target)
    assert target.read_bytes() == content
    assert os.stat(target).st_ino != os.stat(source).st_ino
    copy_blob(source, target)  # over an earlier copy
    assert target.read_bytes() == content
