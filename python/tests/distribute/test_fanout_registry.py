"""Registry mode end to end: publish to the CNCF distribution registry (HTTPS with a private
CA, on the management bridge), then every rank pulls by digest, verifies every byte, loads
into its own podman store and checks the image ID before tagging. An image whose digests
are all right but whose layer writes through a symlink (pushed by skopeo, which does not
look inside layers) is refused on every rank by the layer-entry check before podman loads
anything."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from fixtures.hostile_layers import ACROSS, hostile_layout
from fixtures.netns_ranks import NetnsRanks
from fixtures.oci import free_port
from fixtures.registry import build_image, start_registry


def registry_certificate(directory: Path, address: str) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for a registry at ``address``."""
    certificate, key = directory / "registry.crt", directory / "registry.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(certificate), "-days", "1", "-subj", "/CN=sparkflake-test-registry",
         "-addext", f"subjectAltName=IP:{address}"],
        check=True, capture_output=True,
    )
    return certificate, key


def test_publish_then_every_rank_pulls_by_digest(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    gateway = netns_ranks.mgmt_gateway
    certificate, key = registry_certificate(tmp_path, gateway)
    port = free_port()
    registry = start_registry(tmp_path, gateway, port, tls=(certificate, key))
    try:
        digests = build_image(tmp_path / "image", seed=21)
        published = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "publish", str(tmp_path / "image" / "out"),
             f"{gateway}:{port}/sparkflake/glm53:r8", "--ca-file", str(certificate), "--json"],
            capture_output=True, text=True, cwd=tmp_path,  # publish.json goes to the working directory
        )
        assert published.returncode == 0, published.stderr
        pinned = json.loads(published.stdout)["pinned"]
        assert pinned == f"{gateway}:{port}/sparkflake/glm53@{digests['manifest']}"

        site = netns_ranks.write_site(tmp_path / "site.toml")
        done = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "fanout", "--from-registry", pinned, "--site", str(site),
             "--platform", "linux/amd64", "--ca-file", str(certificate), "--image-id", digests["image_id"],
             "--import", "podman", "--tag", "localhost/glm53:registry", "--json"],
            capture_output=True, text=True,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        for index, record in enumerate(report["ranks"]):
            assert record["manifest_digest"] == digests["manifest"]
            assert record["image_id"] == digests["image_id"] and record["imported"]
            engine_args = netns_ranks.site().ranks[index].engine_args
            found = subprocess.run(
                ["ip", "netns", "exec", netns_ranks.namespace(index), "podman", *engine_args, "image", "inspect",
                 "--format", "{{.Id}}", "localhost/glm53:registry"], capture_output=True, text=True,
            )
            assert "sha256:" + found.stdout.strip() == digests["image_id"]

        # A wrong expected image ID is caught after the verified pull and nothing is tagged.
        wrong_id = "sha256:" + "e" * 64
        refused = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "fanout", "--from-registry", pinned, "--site", str(site),
             "--platform", "linux/amd64", "--ca-file", str(certificate), "--image-id", wrong_id,
             "--import", "podman", "--tag", "localhost/glm53:wrong"],
            capture_output=True, text=True,
        )
        assert refused.returncode == 1 and "expected " + wrong_id in refused.stderr
        untagged = subprocess.run(
            ["ip", "netns", "exec", netns_ranks.namespace(1), "podman", *netns_ranks.site().ranks[1].engine_args,
             "image", "exists", "localhost/glm53:wrong"],
        )
        assert untagged.returncode == 1

        # Plain HTTP to a registry off loopback is refused before any rank is contacted.
        insecure = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "fanout", "--from-registry", pinned, "--site", str(site),
             "--insecure-registry"], capture_output=True, text=True,
        )
        assert insecure.returncode == 2 and "loopback" in insecure.stderr
    finally:
        registry.terminate()
        registry.wait(timeout=10)


def test_a_hostile_layer_pulled_from_the_registry_is_refused_before_podman_loads(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    gateway = netns_ranks.mgmt_gateway
    certificate, key = registry_certificate(tmp_path, gateway)
    port = free_port()
    registry = start_registry(tmp_path, gateway, port, tls=(certificate, key))
    try:
        layout = hostile_layout(tmp_path / "hostile", ACROSS)  # layer 1 writes etc/cron/job through etc/cron -> /etc/cron.d
        manifest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
        config = json.loads((layout / "blobs" / "sha256" / manifest.split(":")[1]).read_text())["config"]["digest"]
        certs = tmp_path / "certs.d"
        certs.mkdir()
        (certs / "ca.crt").write_bytes(certificate.read_bytes())
        repository = f"{gateway}:{port}/sparkflake/hostile"
        subprocess.run(["skopeo", "copy", "--preserve-digests", "--dest-cert-dir", str(certs),
                        f"oci:{layout}", f"docker://{repository}:r1"], check=True, capture_output=True)

        site = netns_ranks.write_site(tmp_path / "site.toml")
        tag = "localhost/hostile:registry"
        done = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "fanout", "--from-registry", f"{repository}@{manifest}",
             "--site", str(site), "--platform", "linux/arm64", "--ca-file", str(certificate), "--image-id", config,
             "--import", "podman", "--tag", tag, "--json"],
            capture_output=True, text=True,
        )
        assert done.returncode == 1, done.stderr
        report = json.loads(done.stdout)
        assert not report["complete"] and report["ranks"]
        for index, record in enumerate(report["ranks"]):
            # every byte was pulled and verified (the digests are right); the import refused
            assert record["manifest_digest"] == manifest and record["config_digest"] == config
            assert record["status"] == "failed" and not record["imported"], record
            assert "import failed: [oci.layer-entries] layer 1" in record["error"], record["error"]
            assert "'etc/cron/job' is below the symlink etc/cron -> /etc/cron.d" in record["error"]
            engine_args = netns_ranks.site().ranks[index].engine_args
            for reference in (tag, config):  # nothing loaded, nothing tagged
                exists = subprocess.run(["ip", "netns", "exec", netns_ranks.namespace(index), "podman", *engine_args,
                                         "image", "exists", reference], capture_output=True)
                assert exists.returncode == 1, reference
    finally:
        registry.terminate()
        registry.wait(timeout=10)


def test_an_interrupt_while_ranks_pull_ends_every_pull_and_imports_nothing(netns_ranks: NetnsRanks,
                                                                           tmp_path: Path) -> None:
    # before: the controller waited for every rank's pull, then imported on each, then exited 130
    gateway = netns_ranks.mgmt_gateway
    certificate, key = registry_certificate(tmp_path, gateway)
    port = free_port()
    registry = start_registry(tmp_path, gateway, port, tls=(certificate, key))
    tree = tmp_path / "image" / "tree" / "opt"
    tree.mkdir(parents=True)
    (tree / "payload.bin").write_bytes(random.Random(31).randbytes(24 << 20))
    spec = tmp_path / "image" / "spec.json"
    spec.write_text(json.dumps({"platform": "linux/amd64", "compression": "none", "tag": "v1",
                                "layers": [{"tree": "tree"}], "config": {"Entrypoint": ["/bin/true"]}}))
    out = tmp_path / "image" / "out"
    try:
        built = subprocess.run([sys.executable, "-m", "sparkflake.cli", "image", "build", str(spec), "-o", str(out),
                                "--no-cache", "--cache", str(tmp_path / "blob-store")], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
        image_id = json.loads((out / "digests.json").read_text())["image_id"]
        published = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "publish", str(out), f"{gateway}:{port}/sparkflake/big:v1",
             "--ca-file", str(certificate), "--json"], capture_output=True, text=True, cwd=tmp_path)
        assert published.returncode == 0, published.stderr
        pinned = json.loads(published.stdout)["pinned"]
        site = netns_ranks.write_site(tmp_path / "site.toml")
        tag = "localhost/big:interrupted"
        # the ranks pull through the management bridge: 24 MiB each at 40 Mbit/s shared takes ~20 s
        subprocess.run(["tc", "qdisc", "replace", "dev", netns_ranks.bridge, "root", "tbf", "rate", "40mbit",
                        "burst", "512kb", "latency", "100ms"], check=True)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "sparkflake.cli", "fanout", "--from-registry", pinned, "--site", str(site),
                 "--platform", "linux/amd64", "--ca-file", str(certificate), "--image-id", image_id,
                 "--import", "podman", "--tag", tag, "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(4)  # every rank's pull under way
            assert process.poll() is None
            process.send_signal(signal.SIGINT)
            began = time.monotonic()
            _, stderr = process.communicate(timeout=60)
            exited_after = time.monotonic() - began
            time.sleep(3)
            left = netns_ranks.agents_running()
        finally:
            subprocess.run(["tc", "qdisc", "del", "dev", netns_ranks.bridge, "root"], check=False)
        assert process.returncode == 130 and "Traceback" not in stderr, stderr
        assert exited_after < 10 and left == []
        for index in range(4):
            engine_args = netns_ranks.site().ranks[index].engine_args
            exists = subprocess.run(["ip", "netns", "exec", netns_ranks.namespace(index), "podman", *engine_args,
                                     "image", "exists", tag])
            assert exists.returncode == 1
    finally:
        registry.terminate()
        registry.wait(timeout=10)
