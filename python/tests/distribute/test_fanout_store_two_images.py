"""Two blob-route fan-outs of different images to one rank's image store at once: the
store's ``index.json`` names one image, which the rank's import then copies into podman.
Seen with four netns ranks (2 runs in 4): one fan-out replaced index.json between the
other's commit and import, each imported the other's image, the image-ID check refused
it ("podman holds image ID … under TAG after the copy"), and both failed. Here the agent's
``commit-layout`` runs as the rank's agent does, its real skopeo held at the copy by a
gate on PATH (the moment the race needs, reached on every run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.locks import flock_waiters
from fixtures.podman import Podman

from sparkflake.distribute.store import read_layout

GATE = """#!/bin/sh
: > "$SFK_GATE/at-copy-$SFK_AGENT"
while [ ! -e "$SFK_GATE/go-$SFK_AGENT" ]; do sleep 0.02; done
exec {skopeo} "$@"
"""


def _image(base: Path, name: str) -> tuple[Path, str]:
    tree = base / name / "tree" / "opt"
    tree.mkdir(parents=True)
    (tree / "payload").write_bytes(name.encode() * 1000)
    spec = base / name / "spec.json"
    spec.write_text(json.dumps({"platform": "linux/amd64", "compression": "none", "repository": "localhost/sfk-two",
                                "tag": name, "layers": [{"tree": "tree"}], "config": {"Labels": {"name": name}}}))
    out = base / name / "out"
    built = subprocess.run([sys.executable, "-m", "sparkflake.cli", "image", "build", str(spec), "-o", str(out),
                            "--no-cache", "--cache", str(base / "layer-cache")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return out / "oci", json.loads((out / "digests.json").read_text())["config"]


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


@pytest.fixture
def podman(tmp_path: Path):
    store = Podman(tmp_path / "podman")
    yield store
    store.cleanup()


def test_two_images_committed_to_one_store_at_once_each_import_their_own(tmp_path: Path, podman: Podman) -> None:
    layouts = {name: _image(tmp_path, name) for name in ("a", "b")}
    store = tmp_path / "image-store"
    (store / "blobs" / "sha256").mkdir(parents=True)
    for layout, _ in layouts.values():  # every blob received already: the commit finds them held
        for blob in (layout / "blobs" / "sha256").iterdir():
            shutil.copyfile(blob, store / "blobs" / "sha256" / blob.name)
    gate = tmp_path / "gate"
    gate.mkdir()
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "skopeo").write_text(GATE.format(skopeo=shutil.which("skopeo")))
    (shim / "skopeo").chmod(0o755)

    def commit(name: str) -> subprocess.Popen[str]:
        layout, _ = layouts[name]
        env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "SFK_GATE": str(gate), "SFK_AGENT": name}
        request = tmp_path / f"commit-{name}.json"
        request.write_text(json.dumps({"plan": read_layout(layout).as_record(), "received": {}}))
        with open(request, "rb") as stdin:
            return subprocess.Popen(
                [sys.executable, "-m", "sparkflake.distribute.agent", "commit-layout", "--store", str(store),
                 "--engine", "podman", "--engine-args-json", json.dumps(podman.global_args),
                 "--tag", f"localhost/sfk-two:{name}"],
                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    first = commit("a")
    _until(lambda: (gate / "at-copy-a").exists(), "a's import reached its copy")
    second = commit("b")
    # b either committed and reached its own copy (nothing kept it off a's index.json), or
    # waits for a's commit and import to end
    _until(lambda: (gate / "at-copy-b").exists() or flock_waiters(store / ".index.json.sparkflake-lock") > 0,
           "b's commit ran or waits")
    (gate / "go-a").touch()
    first_out, first_err = first.communicate(timeout=300)
    (gate / "go-b").touch()
    second_out, second_err = second.communicate(timeout=300)
    for name, agent, out, err in (("a", first, first_out, first_err), ("b", second, second_out, second_err)):
        reply = json.loads(out.strip().splitlines()[-1])
        assert agent.returncode == 0 and reply["status"] == "ok", (name, reply, err[-2000:])
        assert reply["import"]["image_id"] == layouts[name][1]
        inspected = podman("image", "inspect", "--format", "{{.Id}}", f"localhost/sfk-two:{name}")
        assert "sha256:" + inspected.stdout.strip() == layouts[name][1], inspected.stderr
