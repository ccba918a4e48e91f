"""A private podman store (vfs, its own root) and a small image built by our OCI engine whose
entrypoint prints its argv and environment: what the launch tests start instead of vLLM."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

ECHO_C = r"""
#include <stdio.h>
extern char **environ;
int main(int argc, char **argv) {
  for (int i = 0; i < argc; i++) printf("ARG %s\n", argv[i]);
  for (char **e = environ; *e; e++) printf("ENV %s\n", *e);
  return 0;
}
"""
# ulimits this sandbox allows (the profile's memlock=-1 is refused without CAP_SYS_RESOURCE)
SANDBOX_ULIMITS = "nofile=1024:1024,nproc=1024:1024,stack=67108864"


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, **kwargs)


class Podman:
    def __init__(self, base: Path) -> None:
        self.root = base / "root"
        # podman refuses a runroot path longer than 50 characters
        self.runroot = Path(tempfile.mkdtemp(prefix="pm-run-", dir="/tmp"))
        # its own libpod tmpdir too: the default /run/libpod is shared with every other
        # podman on the machine, and `system reset` of one store removes it for all
        self.global_args = [
            "--root", str(self.root), "--runroot", str(self.runroot), "--tmpdir", str(self.runroot / "libpod"),
            "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
            "--runtime", "runc",
        ]

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        return run(["podman", *self.global_args, *args])

    def cleanup(self) -> None:
        self("rm", "--all", "--force")
        self("system", "reset", "--force")
        shutil.rmtree(self.runroot, ignore_errors=True)


def build_echo_image(base: Path, out: Path, podman: Podman, labels: Mapping[str, str]) -> str:
    """Build the argv-echo image into ``out`` (`sparkflake image build`), load it into
    ``podman`` and return its image ID, which is the build's config digest."""
    tree = base / "tree"
    tree.mkdir()
    (base / "echo.c").write_text(ECHO_C)
    compiled = run(["gcc", "-static", "-O2", "-o", str(tree / "argv-echo"), str(base / "echo.c")])
    assert compiled.returncode == 0, compiled.stderr
    spec = {
        "platform": "linux/amd64",
        "compression": "gzip",
        "repository": "localhost/sparkflake-launch-test",
        "tag": "latest",
        "layers": [{"tree": "tree"}],
        "config": {"Entrypoint": ["/argv-echo"], "Labels": dict(labels)},
    }
    (base / "spec.json").write_text(json.dumps(spec))
    # its own layer cache: never the user's (~/.cache/sparkflake/oci), which other runs share
    built = run([sys.executable, "-m", "sparkflake.cli", "image", "build", str(base / "spec.json"), "-o", str(out),
                 "--cache", str(base / "layer-cache")])
    assert built.returncode == 0, built.stderr
    digests = json.loads((out / "digests.json").read_text())
    loaded = podman("load", "-q", "-i", str(out / "docker-archive.tar"))
    assert loaded.returncode == 0, loaded.stderr
    # the docker-archive is the combined oci+docker archive: podman loads its OCI view,
    # named from the index's ref.name, so the image ID itself is tagged
    loaded_name = loaded.stdout.strip().splitlines()[-1].split("Loaded image:")[-1].split(",")[0].strip()
    inspected = json.loads(podman("image", "inspect", loaded_name).stdout)
    image_id = "sha256:" + inspected[0]["Id"].removeprefix("sha256:")
    assert image_id == digests["config"]
    assert podman("tag", image_id, "localhost/sparkflake-launch-test:latest").returncode == 0
    return image_id
