"""`image build` with its layer cache on a full disk (a real tmpfs filled up): one line
naming where the blob could not be written, no traceback, nothing half-written left in the
store, the previous output untouched; with room again the same digests as a build elsewhere."""

from __future__ import annotations

import json
import os

from fixtures.full_disk import fill, small_disk

from sparkflake.cli import main


def _spec(root):
    (root / "tree" / "opt").mkdir(parents=True)
    (root / "tree" / "opt" / "payload.bin").write_bytes(os.urandom(1 << 20))
    spec = root / "spec.json"
    spec.write_text(json.dumps({"platform": "linux/arm64", "layers": [{"tree": "tree"}]}))
    return spec


def _files(root):
    return {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_a_layer_blob_onto_a_full_disk_names_the_store_and_leaves_no_partial_blob(tmp_path, capsys):
    spec = _spec(tmp_path)
    out = tmp_path / "out"
    with small_disk(tmp_path / "disk") as disk:
        cache = disk / "cache"
        assert main(["image", "build", str(spec), "-o", str(out), "--cache", str(cache)]) == 0
        previous = _files(out)
        (tmp_path / "tree" / "opt" / "second.bin").write_bytes(os.urandom(1 << 20))  # a layer the cache lacks
        elsewhere = tmp_path / "elsewhere"
        assert main(["image", "build", str(spec), "-o", str(elsewhere), "--cache", str(tmp_path / "cache")]) == 0
        capsys.readouterr()
        filler = fill(disk)
        assert main(["image", "build", str(spec), "-o", str(out), "--cache", str(cache)]) == 2
        err = capsys.readouterr().err
        assert err == (f"sparkflake: error: {cache / 'blobs' / 'sha256'}: cannot write layer blob: "
                       "No space left on device\n")
        assert _files(out) == previous
        assert not [name for name in os.listdir(cache / "blobs" / "sha256") if name.startswith(".")]
        filler.unlink()
        assert main(["image", "build", str(spec), "-o", str(out), "--cache", str(cache)]) == 0
        assert (out / "digests.json").read_bytes() == (elsewhere / "digests.json").read_bytes()
