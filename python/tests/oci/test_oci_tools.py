"""Our images checked by independent implementations: skopeo, umoci, podman and the
distribution registry; and peers' images read by our reader (issue 3 acceptance)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from fixtures.oci import PodmanStore, RegistryServer, podman_store, registry_server, run_tool  # noqa: F401 - pytest fixtures

from sparkflake.cli import main as cli_main
from sparkflake.oci import open_image, verify_image

LONG_DIR = "deep/" + "/".join([f"segment-with-a-long-name-{i:02d}" for i in range(6)])
LONG_NAME = "n" * 120


def _write(path: Path, content: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)


def _make_trees(root: Path) -> tuple[Path, Path]:
    base = root / "base"
    _write(base / "bin" / "tool", b"#!/bin/sh\necho tool\n", 0o755)
    _write(base / "etc" / "config", b"base config\n")
    _write(base / "etc" / "removed-later", b"gone in layer 2\n")
    _write(base / "usr" / "share" / "doc" / "readme", b"docs\n")
    _write(base / LONG_DIR / "file.txt", b"long path\n")
    _write(base / "lib" / LONG_NAME, b"long name\n")
    _write(base / "lib" / "unicodé-名前", b"utf-8 name\n")
    (base / "lib" / "link-to-tool").symlink_to("../bin/tool")
    (base / "lib" / "dangling").symlink_to("/nowhere/at/all")
    os.link(base / "etc" / "config", base / "etc" / "config-hardlink")
    (base / "var" / "empty").mkdir(parents=True)
    overlay = root / "overlay"
    _write(overlay / "app" / "main.py", b"print('hello')\n", 0o755)
    _write(overlay / "app" / "data" / "blob.bin", os.urandom(200_000))
    return base, overlay


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("image")
    base, overlay = _make_trees(root)
    spec = {
        "platform": "linux/arm64",
        "compression": "gzip",
        "repository": "localhost/sparkflake-test",
        "tag": "latest",
        "layers": [
            {"tree": "base", "created_by": "base tree"},
            {
                "sources": [{"tree": "overlay/app", "target": "/opt/app"}],
                "files": [{"path": "/etc/generated.conf", "text": "generated=1\n", "mode": "0600"}],
                "delete": ["/etc/removed-later", "/usr/share/doc"],
            },
        ],
        "config": {
            "Entrypoint": ["/opt/app/main.py"],
            "Cmd": ["--serve"],
            "Env": ["PATH=/usr/bin:/bin", "MODE=test"],
            "WorkingDir": "/opt/app",
            "User": "0:0",
            "ExposedPorts": ["8000/tcp"],
            "Labels": {"org.opencontainers.image.title": "sparkflake-test", "tier": "test"},
            "StopSignal": "SIGINT",
        },
    }
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(spec))
    out = root / "out"
    code = cli_main(
        ["image", "build", str(spec_path), "-o", str(out), "--cache", str(root / "cache")]
    )
    assert code == 0
    digests = json.loads((out / "digests.json").read_text())
    return {"root": root, "out": out, "digests": digests, "base": base, "overlay": overlay}


def _skopeo_inspect(reference: str, *extra: str) -> dict:
    return json.loads(run_tool(["skopeo", "inspect", *extra, reference]).stdout)


def _raw_digest(reference: str, *extra: str) -> str:
    raw = run_tool(["skopeo", "inspect", "--raw", *extra, reference]).stdout.encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def test_skopeo_reads_layout_and_archives(built):
    out, digests = built["out"], built["digests"]
    layout = _skopeo_inspect(f"oci:{out}/oci:latest")
    assert layout["Digest"] == digests["manifest"]
    assert layout["Architecture"] == "arm64"
    assert layout["Os"] == "linux"
    assert layout["Labels"] == {"org.opencontainers.image.title": "sparkflake-test", "tier": "test"}
    assert layout["Layers"] == [layer["digest"] for layer in digests["layers"]]
    assert _raw_digest(f"oci:{out}/oci:latest", "--config") == digests["config"]

    archive = _skopeo_inspect(f"oci-archive:{out}/oci-archive.tar")
    assert archive["Digest"] == digests["manifest"]

    docker = _skopeo_inspect(f"docker-archive:{out}/docker-archive.tar")
    assert docker["Architecture"] == "arm64"
    assert docker["Labels"]["tier"] == "test"
    assert docker["Layers"] == [layer["diff_id"] for layer in digests["layers"]]
    assert _raw_digest(f"docker-archive:{out}/docker-archive.tar", "--config") == digests["config"]
    config = json.loads(
        run_tool(["skopeo", "inspect", "--config", "--raw", f"oci:{out}/oci:latest"]).stdout
    )
    assert config["variant"] == "v8"
    assert config["config"]["StopSignal"] == "SIGINT"
    assert config["config"]["ExposedPorts"] == {"8000/tcp": {}}


def test_registry_push_preserves_manifest_digest(built, registry_server: RegistryServer):  # noqa: F811
    out, digests = built["out"], built["digests"]
    target = f"docker://{registry_server.host}/sparkflake/test:latest"
    run_tool(
        [
            "skopeo",
            "copy",
            "--preserve-digests",
            "--dest-tls-verify=false",
            f"oci:{out}/oci:latest",
            target,
        ]
    )
    remote = _skopeo_inspect(target, "--tls-verify=false")
    assert remote["Digest"] == digests["manifest"]
    headers = registry_server.head_manifest("sparkflake/test", "latest")
    assert headers["Docker-Content-Digest"] == digests["manifest"]
    assert _raw_digest(target, "--tls-verify=false") == digests["manifest"]


def _expected_rootfs(base: Path, overlay: Path) -> dict[str, tuple]:
    expected: dict[str, tuple] = {}

    def add_tree(tree: Path, prefix: str) -> None:
        for path in sorted(tree.rglob("*")):
            name = prefix + os.fspath(path.relative_to(tree))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                expected[name] = ("symlink", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                expected[name] = ("dir", 0o755)
            else:
                mode = 0o755 if st.st_mode & 0o100 else 0o644
                expected[name] = ("file", mode, path.read_bytes())

    add_tree(base, "")
    for parent in ("opt", "opt/app"):
        expected[parent] = ("dir", 0o755)
    add_tree(overlay / "app", "opt/app/")
    expected["etc/generated.conf"] = ("file", 0o600, b"generated=1\n")
    for deleted in ("etc/removed-later", "usr/share/doc"):
        for name in [n for n in expected if n == deleted or n.startswith(deleted + "/")]:
            del expected[name]
    return expected


def _actual_rootfs(rootfs: Path) -> dict[str, tuple]:
    actual: dict[str, tuple] = {}
    for path in sorted(rootfs.rglob("*")):
        name = os.fspath(path.relative_to(rootfs))
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            actual[name] = ("symlink", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            actual[name] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            actual[name] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return actual


def test_umoci_unpack_gives_the_source_trees(built, tmp_path):
    bundle = tmp_path / "bundle"
    run_tool(["umoci", "unpack", "--image", f"{built['out']}/oci:latest", str(bundle)])
    rootfs = bundle / "rootfs"
    assert _actual_rootfs(rootfs) == _expected_rootfs(built["base"], built["overlay"])
    # the hardlink inside the base layer is still one inode
    assert (rootfs / "etc" / "config").stat().st_ino == (
        rootfs / "etc" / "config-hardlink"
    ).stat().st_ino


def test_podman_load_gives_our_image_id(built, podman_store: PodmanStore):  # noqa: F811
    out, digests = built["out"], built["digests"]
    assert podman_store.load(out / "docker-archive.tar") == digests["config"]
    assert podman_store.load(out / "oci-archive.tar") == digests["config"]


def _our_inspect(path: str, *extra: str) -> dict:
    report = verify_image(open_image(path, *extra))
    return report.as_record()


def test_peer_images_from_umoci_are_read(built, tmp_path):
    layout = tmp_path / "umoci-layout"
    run_tool(["umoci", "init", "--layout", str(layout)])
    run_tool(["umoci", "new", "--image", f"{layout}:peer"])
    run_tool(["umoci", "insert", "--image", f"{layout}:peer", str(built["overlay"]), "/srv"])
    bundle = tmp_path / "bundle"
    run_tool(["umoci", "unpack", "--image", f"{layout}:peer", str(bundle)])
    (bundle / "rootfs" / "srv" / "added-by-repack").write_text("repacked\n")
    run_tool(["umoci", "repack", "--image", f"{layout}:peer2", str(bundle)])
    run_tool(["umoci", "config", "--image", f"{layout}:peer2", "--config.label", "peer=umoci"])
    for tag in ("peer", "peer2"):
        ours = _our_inspect(str(layout), tag)
        reference = f"oci:{layout}:{tag}"
        assert ours["digests"]["manifest"] == _raw_digest(reference)
        assert ours["digests"]["config"] == _raw_digest(reference, "--config")
        raw_manifest = json.loads(run_tool(["skopeo", "inspect", "--raw", reference]).stdout)
        assert [layer["digest"] for layer in ours["layers"]] == [
            layer["digest"] for layer in raw_manifest["layers"]
        ]
        raw_config = json.loads(
            run_tool(["skopeo", "inspect", "--config", "--raw", reference]).stdout
        )
        assert [layer["diff_id"] for layer in ours["layers"]] == raw_config["rootfs"]["diff_ids"]
    assert _our_inspect(str(layout), "peer2")["labels"] == {"peer": "umoci"}


def test_peer_images_from_skopeo_conversions_are_read(built, tmp_path):
    out = built["out"]
    conversions = {
        "docker-archive": (
            f"docker-archive:{tmp_path}/peer-docker.tar:peer/image:v1",
            tmp_path / "peer-docker.tar",
        ),
        "oci-archive": (f"oci-archive:{tmp_path}/peer-oci.tar:v1", tmp_path / "peer-oci.tar"),
        "oci-layout": (f"oci:{tmp_path}/peer-layout:v1", tmp_path / "peer-layout"),
    }
    for source in (f"oci:{out}/oci:latest", f"docker-archive:{out}/docker-archive.tar"):
        for kind, (reference, path) in conversions.items():
            run_tool(["skopeo", "copy", source, reference])
            ours = _our_inspect(str(path), *(() if kind == "docker-archive" else ("v1",)))
            assert ours["format"] == kind
            raw = _raw_digest(reference)
            if kind == "docker-archive":
                assert ours["digests"]["docker_archive_manifest"] == raw
                assert ours["repo_tags"] == ["docker.io/peer/image:v1"]
            else:
                assert ours["digests"]["manifest"] == raw
            assert ours["digests"]["config"] == _raw_digest(reference, "--config")
            if source.startswith("oci:") or kind == "docker-archive":
                # skopeo keeps the config bytes unless it converts docker -> OCI, where it
                # re-serializes the config (a new image ID); the layers stay the same
                assert ours["digests"]["config"] == built["digests"]["config"]
            assert ours["digests"]["chain_id"] == built["digests"]["chain_id"]
            for name in ("peer-docker.tar", "peer-oci.tar"):
                (tmp_path / name).unlink(missing_ok=True)


def test_zstd_image_is_read_by_skopeo_and_podman(built, tmp_path, podman_store: PodmanStore):  # noqa: F811
    spec = json.loads((built["root"] / "spec.json").read_text())
    spec["compression"] = "zstd"
    spec_path = built["root"] / "spec-zstd.json"
    spec_path.write_text(json.dumps(spec))
    out = tmp_path / "zstd-out"
    cache = str(built["root"] / "cache")
    assert cli_main(["image", "build", str(spec_path), "-o", str(out), "--cache", cache]) == 0
    digests = json.loads((out / "digests.json").read_text())
    assert digests["layers"][0]["media_type"].endswith("tar+zstd")
    # the same trees give the same diffIDs and chain ID whatever the compression
    assert digests["chain_id"] == built["digests"]["chain_id"]
    layout = _skopeo_inspect(f"oci:{out}/oci:latest")
    assert layout["Digest"] == digests["manifest"]
    assert podman_store.load(out / "oci-archive.tar") == digests["config"]
    assert podman_store.load(out / "docker-archive.tar") == digests["config"]
    docker = _skopeo_inspect(f"docker-archive:{out}/docker-archive.tar")
    assert docker["Layers"] == [layer["diff_id"] for layer in digests["layers"]]
