"""What a build leaves on disk (issue 31): the OCI layout in OUT holds the layer-store's
bytes, not a second copy of them (a clone, else a hard link to the store's read-only
blob); a rebuild into the same OUT reads no store blob again; an OUT removed by the
operator costs the store one hash of each blob, never a wrong one; the output still
audits against its digests.json and loads into podman (vfs) with image ID = config digest."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from fixtures.file_systems import clones_here
from fixtures.podman import Podman

from sparkflake.cli import main
from sparkflake.oci import blob_store
from sparkflake.oci.blob_store import BlobStore

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def build(out: Path, cache: Path) -> dict:
    assert main(["build", str(FIXTURE), "--offline", "--cache", str(cache), "-o", str(out)]) == 0
    return json.loads((out / "digests.json").read_text())


def layer_files(out: Path, digests: dict) -> list[Path]:
    return [out / "oci" / "blobs" / "sha256" / layer["digest"].split(":")[1] for layer in digests["layers"]]


def test_the_layout_shares_the_store_s_bytes_and_the_output_still_audits_and_loads(tmp_path, monkeypatch, capsys):
    out, cache = tmp_path / "out", tmp_path / "cache"
    digests = build(out, cache)
    store = BlobStore(cache / "oci")
    linked = not clones_here(tmp_path)
    for path, layer in zip(layer_files(out, digests), digests["layers"], strict=True):
        stored = os.stat(store.path(layer["digest"]))
        # linked: the layout's layer blob is the store's inode, no byte of it written twice
        assert ((os.stat(path).st_dev, os.stat(path).st_ino) == (stored.st_dev, stored.st_ino)) is linked

    reads: list[Path] = []
    original = blob_store._sha256_of
    monkeypatch.setattr(blob_store, "_sha256_of", lambda path: reads.append(path) or original(path))
    assert build(out, cache)["manifest"] == digests["manifest"]  # replaces its own output
    assert reads == []  # the old layout's links went, the store's records were taken anew

    assert main(["audit", str(out / "oci"), "--expect-file", str(out / "digests.json")]) == 0
    capsys.readouterr()
    podman = Podman(tmp_path / "podman")
    try:
        engine_args = [f"--engine-arg={argument}" for argument in podman.global_args]
        assert main(["load", str(out), *engine_args, "--json", "--progress"]) == 0
        said = capsys.readouterr()
        loaded = json.loads(said.out)
        assert loaded["image_id"] == digests["config"]
        # a load of minutes (4.5 GB: 4 min here) shows the check, then each layer podman starts
        layers = len(digests["layers"])
        progress = said.err.splitlines()
        assert progress[progress.index("load: podman load") - 1].startswith("load: 100% ")
        assert [line for line in progress if line.startswith("load: podman load: layer ")] == [
            f"load: podman load: layer {position} of {layers} ({layer['digest'][:19]}…)"
            for position, layer in enumerate(digests["layers"], 1)]
    finally:
        podman.cleanup()

    shutil.rmtree(out)  # the operator removes the output: the blobs' link counts changed
    reads.clear()
    again = build(out, cache)
    assert again["manifest"] == digests["manifest"]
    assert sorted(reads) == (sorted(store.path(layer["digest"]) for layer in digests["layers"]) if linked else [])
    assert not [line for line in capsys.readouterr().err.splitlines() if "evicted" in line]


def test_an_output_of_the_layout_alone_holds_no_image_bytes_and_still_loads(tmp_path, capsys):
    """`build --formats oci` (the default): OUT holds documents only beside the store's
    bytes; podman loads its layout (image ID = config digest); docker, which loads archives
    only, is refused naming the export that writes one; an archive is there when asked for."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "--cache", str(cache), "-o", str(out), "--formats", "oci"]) == 0
    digests = json.loads((out / "digests.json").read_text())
    assert not [path for path in out.iterdir() if path.name.endswith(".tar")]
    podman = Podman(tmp_path / "podman")
    try:
        capsys.readouterr()
        engine_args = [f"--engine-arg={argument}" for argument in podman.global_args]
        assert main(["load", str(out), *engine_args, "--json"]) == 0
        loaded = json.loads(capsys.readouterr().out)
        assert loaded["archive"] == str(out / "oci") and loaded["image_id"] == digests["config"]
    finally:
        podman.cleanup()
    assert main(["load", str(out), "--engine", "docker"]) == 2
    assert f"docker loads archives only, and this output has the OCI layout alone; write its archive first: " \
           f"sparkflake export {out} --format docker-archive" in capsys.readouterr().err
    assert main(["build", str(FIXTURE), "--offline", "--cache", str(cache), "-o", str(out),
                 "--formats", "oci,docker-archive"]) == 0
    assert json.loads((out / "digests.json").read_text())["manifest"] == digests["manifest"]
    assert main(["audit", f"docker-archive:{out / 'docker-archive.tar'}", "--expect-file", str(out / "digests.json")]) == 0
