"""Reusable fixtures for tests that need real container tools (importable by any test).

- ``free_port()``; ``RegistryServer`` (the CNCF distribution registry, ``docker-registry``,
  on 127.0.0.1) and the session fixture ``registry_server``;
- ``PodmanStore``: podman with ``--storage-driver=vfs`` and a private root/runroot, and
  the fixture ``podman_store``;
- ``run_tool(argv)``: run a tool, fail the test with its stderr if it fails;
- tree generators: ``tree_specs()`` (a hypothesis strategy of small random trees) and
  ``materialize_tree(root, spec, variant)``, which writes the same content with a chosen
  creation order, mtimes, permission noise (as a different umask gives) and owners.

Use: ``from oci_fixtures import registry_server, podman_store  # noqa: F401`` in a test
module (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import strategies as st


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_tool(argv: Sequence[str], *, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    if completed.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} exited {completed.returncode}\nstdout: {completed.stdout}\n"
            f"stderr: {completed.stderr}"
        )
    return completed


@dataclass
class RegistryServer:
    """A distribution registry storing in ``root``; ``host`` is 127.0.0.1:PORT."""

    root: Path
    host: str
    process: subprocess.Popen

    @classmethod
    def start(cls, root: Path) -> RegistryServer:
        root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{port}\n"
        )
        log = open(root / "registry.log", "wb")  # noqa: SIM115 - closed in stop()
        process = subprocess.Popen(
            ["/usr/bin/docker-registry", "serve", str(config)], stdout=log, stderr=log
        )
        server = cls(root, f"127.0.0.1:{port}", process)
        server._log = log
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {(root / 'registry.log').read_text()}")
            try:
                with urllib.request.urlopen(f"http://{server.host}/v2/", timeout=2) as response:
                    if response.status == 200:
                        return server
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        server.stop()
        raise RuntimeError("docker-registry did not answer on /v2/ within 30 s")

    def head_manifest(self, repository: str, reference: str) -> dict[str, str]:
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{reference}",
            method="HEAD",
            headers={
                "Accept": ", ".join(
                    [
                        "application/vnd.oci.image.manifest.v1+json",
                        "application/vnd.oci.image.index.v1+json",
                        "application/vnd.docker.distribution.manifest.v2+json",
                    ]
                )
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return dict(response.headers.items())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    server = RegistryServer.start(tmp_path_factory.mktemp("registry"))
    yield server
    server.stop()


@dataclass
class PodmanStore:
    """podman with its own vfs storage, so tests never touch the machine's images."""

    root: Path

    def __post_init__(self) -> None:
        # podman refuses a runroot path longer than 50 characters
        self.runroot = Path(tempfile.mkdtemp(prefix="podman-run-", dir="/tmp"))

    def argv(self, *args: str) -> list[str]:
        return [
            "podman",
            "--root",
            str(self.root / "root"),
            "--runroot",
            str(self.runroot),
            "--storage-driver=vfs",
            "--cgroup-manager=cgroupfs",
            "--events-backend=file",
            *args,
        ]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return run_tool(self.argv(*args))

    def load(self, archive: str | os.PathLike[str]) -> str:
        """Load an archive and return the loaded image's full ID (sha256:…)."""
        output = self.run("load", "-q", "-i", os.fspath(archive)).stdout
        name = output.strip().splitlines()[-1].split("Loaded image:")[-1].strip()
        return self.image_id(name.split(",")[0].strip())

    def image_id(self, reference: str) -> str:
        inspected = json.loads(self.run("image", "inspect", reference).stdout)
        image_id = inspected[0]["Id"]
        return image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"

    def cleanup(self) -> None:
        # not `system reset`: it would also remove root's network definitions
        subprocess.run(self.argv("rmi", "--all", "--force"), capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.runroot, ignore_errors=True)


@pytest.fixture
def podman_store(tmp_path: Path) -> Iterator[PodmanStore]:
    store = PodmanStore(tmp_path / "podman")
    yield store
    store.cleanup()


# --- random trees -----------------------------------------------------------------------

_NAME = st.text(alphabet=st.sampled_from("abcXYZ019-_.~é日 "), min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..") and not n.startswith(".wh.")
)


def _node(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.just("file"), st.binary(max_size=3000), st.booleans()),
        st.tuples(st.just("symlink"), st.sampled_from(["target", "../up", "/abs/path", "a b"])),
        st.tuples(st.just("dir"), children),
    )


def tree_specs(max_leaves: int = 25) -> st.SearchStrategy:
    """Nested dicts name -> ("file", bytes, executable) | ("symlink", target) |
    ("dir", {...}). A top-level "hardlinks" key lists (existing file path, new path)."""
    tree = st.recursive(
        st.dictionaries(_NAME, _node(st.just({})), max_size=4),
        lambda children: st.dictionaries(_NAME, _node(children), max_size=4),
        max_leaves=max_leaves,
    )
    return tree


@dataclass(frozen=True)
class TreeVariant:
    """How a copy differs on disk without differing in content."""

    seed: int
    reverse_order: bool
    group_other_bits: int  # e.g. 0o022 vs 0o002: what a different umask leaves
    owner: int


def materialize_tree(root: Path, spec: dict, variant: TreeVariant) -> list[Path]:
    """Write ``spec`` under ``root``; returns the regular files written."""
    rng = random.Random(variant.seed)
    root.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    _write_level(root, spec, variant, rng, files)
    # mtimes last (creating children changes a directory's mtime)
    for path in sorted(root.rglob("*"), reverse=variant.reverse_order):
        stamp = rng.randrange(1, 2_000_000_000)
        os.utime(path, (stamp, stamp), follow_symlinks=False)
    return files


def _write_level(
    directory: Path, spec: dict, variant: TreeVariant, rng: random.Random, files: list[Path]
) -> None:
    for name in sorted(spec, reverse=variant.reverse_order):
        node = spec[name]
        path = directory / name
        if node[0] == "file":
            path.write_bytes(node[1])
            exec_bits = 0o111 if node[2] else 0
            path.chmod(0o666 & ~variant.group_other_bits | exec_bits)
            files.append(path)
        elif node[0] == "symlink":
            path.symlink_to(node[1])
        else:
            path.mkdir()
            path.chmod(0o777 & ~variant.group_other_bits)
            _write_level(path, node[1], variant, rng, files)
        os.lchown(path, variant.owner, variant.owner)
