"""A rank's agent whose controller goes away mid-import ends, and leaves nothing behind: the
controller's end of the agent's stdout closes (sshd closes the session's pipes and signals
nothing), the agent sends SIGTERM to its process group (``end_with_the_session``), and the
SIGTERM is raised in the agent, so every ``finally`` on the way out runs. Before, Python's
default for SIGTERM ended the agent where it stood, and the directory podman had unpacked the
archive into stayed in /var/tmp for good (a 4.5 GB image at every interrupted fan-out)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fixtures.oci import PodmanStore, podman_store  # noqa: F401
from fixtures.one_layer_image import write_one_layer_image

from sparkflake.distribute.agent_protocol import EXIT_TERMINATED
from sparkflake.oci.reader import open_image


def _podman_of(store_root: Path) -> list[str]:
    listed = subprocess.run(["pgrep", "-f", f"podman --root {store_root}"], capture_output=True, text=True)
    return listed.stdout.split()


def test_an_agent_whose_controller_went_mid_import_removes_what_podman_unpacked(
    tmp_path: Path, podman_store: PodmanStore,  # noqa: F811
) -> None:
    out, _ = write_one_layer_image(tmp_path / "image", {"etc/hello": b"hello\n" * 1000})
    archive = out / "oci-archive.tar"
    image_id = open_image(str(archive)).config_ref.digest
    assert image_id is not None
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    podman_store.run("images")  # the store and its lock files exist
    holder = os.open(podman_store.root / "root" / "vfs-layers" / "layers.lock", os.O_RDWR)
    try:
        # podman unpacks the archive, then waits for the store's layer lock: an import under way
        fcntl.lockf(holder, fcntl.LOCK_EX)
        agent = subprocess.Popen(
            [sys.executable, "-m", "sparkflake.distribute.agent", "import", "--engine", "podman",
             "--image-id", image_id, "--engine-args-json", json.dumps(podman_store.argv()[1:]),
             "--archive", str(archive), "--tag", "localhost/session-end:1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "TMPDIR": str(temporary)},
            start_new_session=True,  # it leads its process group, as under sshd
        )
        assert agent.stdout is not None and agent.stderr is not None
        deadline = time.monotonic() + 120
        while not any(path.name.startswith("oci") for path in temporary.glob("*/*")):
            assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()
            time.sleep(0.02)
        assert _podman_of(podman_store.root)  # podman is at work, under the agent
        agent.stdout.close()  # the controller is gone
        try:
            agent.wait(timeout=60)
        finally:
            agent.kill()
        stderr = agent.stderr.read().decode()
    finally:
        os.close(holder)
    assert agent.returncode == EXIT_TERMINATED, stderr
    assert "Traceback" not in stderr
    assert list(temporary.iterdir()) == []  # what podman unpacked went with the agent
    assert _podman_of(podman_store.root) == []
    exists = subprocess.run(podman_store.argv("image", "exists", "localhost/session-end:1"), check=False)
    assert exists.returncode == 1
