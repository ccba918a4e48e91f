"""The layer cache hands out only verified bytes: a cached blob flipped in place (mtime
put back), truncated or replaced by a symlink is evicted, named and made again, and the
image audits; an unchanged entry is trusted by its recorded identity without a read;
outputs are copies, so editing one in place changes neither the store nor another output."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from sparkflake import audit
from sparkflake.cli import main
from sparkflake.oci import blob_store
from sparkflake.oci.blob_store import BlobStore
from sparkflake.pipeline import BuildRequest, build_profile

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


def test_editing_an_output_in_place_changes_neither_the_store_nor_another_output(tmp_path):
    spec = spec_dir(tmp_path / "spec")
    cache = tmp_path / "cache"
    assert image_build(spec, tmp_path / "first", cache) == 0
    assert image_build(spec, tmp_path / "second", cache) == 0
    digest = layer_blobs(tmp_path / "first")[0]
    name = digest.split(":")[1]
    store_blob = BlobStore(cache).path(digest)
    first_blob = tmp_path / "first" / "oci" / "blobs" / "sha256" / name
    second_blob = tmp_path / "second" / "oci" / "blobs" / "sha256" / name
    inodes = {os.stat(p).st_ino for p in (store_blob, first_blob, second_blob)}
    assert len(inodes) == 3  # three files, not three names of one
    assert store_blob.stat().st_mode & 0o222 == 0  # the store's copy is read-only
    flip_in_place(second_blob, 100)
    for intact in (store_blob, first_blob):
        assert hashlib.sha256(intact.read_bytes()).hexdigest() == name
    assert audits_clean(tmp_path / "first" / "oci")
    assert not audits_clean(tmp_path / "second" / "oci")


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
