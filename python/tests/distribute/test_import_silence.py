"""A rank's import into podman's store that waits without end is ended, not waited for: real
skopeo into a real vfs containers-storage whose layer lock another process holds (as a
running ``podman pull`` would) waits on it silently; the import ends it after the silence
limit with a message that names the lock, leaves no skopeo behind, and succeeds once the
lock is free. The temporary files skopeo and podman write as they copy (containers/image's
storage<N>/ and oci<N>/) go to a directory sparkflake made, which it removes when it ends the
tool: they were left in /var/tmp for good."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fixtures.oci import PodmanStore, podman_store  # noqa: F401
from fixtures.one_layer_image import write_one_layer_image

from sparkflake.core.errors import CheckFailed
from sparkflake.distribute import engine
from sparkflake.distribute.engine import import_archive, import_layout, silence_limit


def test_the_silence_limit_grows_with_the_largest_blob_past_its_floor():
    assert silence_limit(0) == engine.SILENCE_FLOOR_SECONDS == 600
    assert silence_limit(2_774_748_863) == 600  # glm53's largest layer: 277 s at 10 MB/s
    assert silence_limit(25_000_000_000) == 2500


def _skopeo_copies(layout: Path) -> list[str]:
    listed = subprocess.run(["pgrep", "-f", f"skopeo --debug copy oci:{layout}"], capture_output=True, text=True)
    return listed.stdout.split()


@contextmanager
def _layers_lock_held(podman_store: PodmanStore) -> Iterator[None]:  # noqa: F811
    podman_store.run("images")  # the store and its lock files exist
    holder = os.open(podman_store.root / "root" / "vfs-layers" / "layers.lock", os.O_RDWR)
    try:
        fcntl.lockf(holder, fcntl.LOCK_EX)  # containers/storage locks with fcntl, as lockf does
        yield
    finally:
        os.close(holder)


@contextmanager
def _watched(directory: Path) -> Iterator[set[str]]:
    """The paths (relative to ``directory``) seen below it while the block runs, polled."""
    seen: set[str] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.01):
            seen.update(str(path.relative_to(directory)) for path in directory.rglob("*"))

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


def _tool_scratch(seen: set[str], tool_dir: str) -> list[str]:
    """The tool's own temporary directories (``storage<N>``, ``oci<N>``) seen directly in a
    directory sparkflake made for the run."""
    return sorted(path for path in seen
                  if path.count("/") == 1 and path.startswith("sparkflake-engine-")
                  and path.split("/")[1].startswith(tool_dir))


def test_an_import_waiting_on_a_held_store_lock_is_ended(tmp_path, podman_store: PodmanStore, monkeypatch):  # noqa: F811
    out, _ = write_one_layer_image(tmp_path / "image", {"etc/hello": b"hello\n"})
    layout = out / "oci"
    image_id = engine.open_image(str(layout)).config_ref.digest
    assert image_id is not None
    engine_args = ["--root", str(podman_store.root / "root"), "--runroot", str(podman_store.runroot),
                   "--storage-driver", "vfs"]
    monkeypatch.setattr(engine, "SILENCE_FLOOR_SECONDS", 3.0)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # skopeo reads only --tmpdir; sparkflake puts it here

    with _layers_lock_held(podman_store), _watched(temporary) as seen:
        began = time.monotonic()
        with pytest.raises(CheckFailed) as refused:
            import_layout("podman", engine_args, str(layout), image_id, "localhost/held:1")
        waited = time.monotonic() - began
    assert _tool_scratch(seen, "storage")  # skopeo staged the layer where sparkflake said
    assert list(temporary.iterdir()) == []  # and that went with the ended copy
    message = str(refused.value)
    assert refused.value.check_id == "fanout.import"
    assert "wrote nothing for 3s and was ended" in message and "lock" in message
    assert "Copying blob" in message  # what it said before it went silent
    assert 3 <= waited < 60
    assert _skopeo_copies(layout) == []

    imported = import_layout("podman", engine_args, str(layout), image_id, "localhost/held:1")
    assert imported.image_id == image_id == podman_store.image_id("localhost/held:1")


def test_a_podman_load_ended_leaves_no_temporary_files(tmp_path, podman_store: PodmanStore, monkeypatch):  # noqa: F811
    # podman load of an oci-archive unpacks it to oci<N>/ and stages its layer in storage<N>/
    # under TMPDIR (else /var/tmp), and removes them only when it ends by itself
    out, _ = write_one_layer_image(tmp_path / "image", {"etc/hello": b"hello\n"})
    archive = out / "oci-archive.tar"
    image_id = engine.open_image(str(archive)).config_ref.digest
    assert image_id is not None
    monkeypatch.setattr(engine, "SILENCE_FLOOR_SECONDS", 3.0)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    engine_args = podman_store.argv()[1:]

    with _layers_lock_held(podman_store), _watched(temporary) as seen:
        with pytest.raises(CheckFailed, match="wrote nothing for 3s and was ended"):
            import_archive("podman", engine_args, str(archive), image_id, "localhost/held:2")
    assert _tool_scratch(seen, "oci") and _tool_scratch(seen, "storage")
    assert list(temporary.iterdir()) == []

    imported = import_archive("podman", engine_args, str(archive), image_id, "localhost/held:2")
    assert imported.image_id == image_id == podman_store.image_id("localhost/held:2")
    assert list(temporary.iterdir()) == []
