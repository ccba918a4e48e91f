"""A rank's import into podman's store that waits without end is ended, not waited for: real
skopeo into a real vfs containers-storage whose layer lock another process holds (as a
running ``podman pull`` would) waits on it silently; the import ends it after the silence
limit with a message that names the lock, leaves no skopeo behind, and succeeds once the
lock is free."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest
from fixtures.oci import PodmanStore, podman_store  # noqa: F401
from fixtures.one_layer_image import write_one_layer_image

from sparkflake.core.errors import CheckFailed
from sparkflake.distribute import engine
from sparkflake.distribute.engine import import_layout, silence_limit


def test_the_silence_limit_grows_with_the_largest_blob_past_its_floor():
    assert silence_limit(0) == engine.SILENCE_FLOOR_SECONDS == 600
    assert silence_limit(2_774_748_863) == 600  # glm53's largest layer: 277 s at 10 MB/s
    assert silence_limit(25_000_000_000) == 2500


def _skopeo_copies(layout: Path) -> list[str]:
    listed = subprocess.run(["pgrep", "-f", f"skopeo --debug copy oci:{layout}"], capture_output=True, text=True)
    return listed.stdout.split()


def test_an_import_waiting_on_a_held_store_lock_is_ended(tmp_path, podman_store: PodmanStore, monkeypatch):  # noqa: F811
    out, _ = write_one_layer_image(tmp_path / "image", {"etc/hello": b"hello\n"})
    layout = out / "oci"
    image_id = engine.open_image(str(layout)).config_ref.digest
    assert image_id is not None
    podman_store.run("images")  # the store and its lock files exist
    engine_args = ["--root", str(podman_store.root / "root"), "--runroot", str(podman_store.runroot),
                   "--storage-driver", "vfs"]
    layers_lock = podman_store.root / "root" / "vfs-layers" / "layers.lock"
    monkeypatch.setattr(engine, "SILENCE_FLOOR_SECONDS", 3.0)

    holder = os.open(layers_lock, os.O_RDWR)
    try:
        fcntl.lockf(holder, fcntl.LOCK_EX)  # containers/storage locks with fcntl, as lockf does
        began = time.monotonic()
        with pytest.raises(CheckFailed) as refused:
            import_layout("podman", engine_args, str(layout), image_id, "localhost/held:1")
        waited = time.monotonic() - began
    finally:
        os.close(holder)
    message = str(refused.value)
    assert refused.value.check_id == "fanout.import"
    assert "wrote nothing for 3s and was ended" in message and "lock" in message
    assert "Copying blob" in message  # what it said before it went silent
    assert 3 <= waited < 60
    assert _skopeo_copies(layout) == []

    imported = import_layout("podman", engine_args, str(layout), image_id, "localhost/held:1")
    assert imported.image_id == image_id == podman_store.image_id("localhost/held:1")
