"""The OCI distribution client against the real CNCF distribution registry on 127.0.0.1,
cross-checked with skopeo and podman; the bearer-token flow against a small registry
emulator served by http.server (the real registry's token auth needs a certificate
infrastructure)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fixtures.oci import free_port
from fixtures.registry import build_image, start_registry
from hypothesis import assume, given
from hypothesis import strategies as st

from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci.media_types import OCI_INDEX, OCI_MANIFEST
from sparkflake.oci.registry_auth import Credentials, load_credentials, tls_context
from sparkflake.oci.registry_transfer import pull_to_layout, push_layout
from sparkflake.oci.remote import RegistryClient, parse_reference, select_platform
from sparkflake.oci.types import Platform


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    process = start_registry(root, "127.0.0.1", port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_push_is_digest_preserving_and_pull_verifies_every_byte(registry: str, tmp_path: Path) -> None:
    digests = build_image(tmp_path, seed=11)
    client = RegistryClient(registry, insecure=True)
    target = parse_reference(f"{registry}/sparkflake/glm53:v1")
    pushed = push_layout(client, tmp_path / "out" / "oci", target)
    assert pushed.manifest_digest == digests["manifest"]
    assert pushed.pinned == f"{registry}/sparkflake/glm53@{digests['manifest']}"
    assert len(pushed.blobs_pushed) == 2 and not pushed.blobs_present

    # The registry serves our exact manifest bytes (checked by an independent client).
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry}/sparkflake/glm53:v1"],
        capture_output=True, check=True,
    ).stdout
    ours = (tmp_path / "out" / "oci" / "blobs" / "sha256" / digests["manifest"].split(":")[1]).read_bytes()
    assert raw == ours
    assert client.head_manifest("sparkflake/glm53", "v1")[0] == digests["manifest"]
    assert client.blob_size("sparkflake/glm53", digests["config"]) == digests["config_size"]

    # A second push finds every blob already there (HEAD first) and changes nothing.
    again = push_layout(client, tmp_path / "out" / "oci", target)
    assert again.manifest_digest == digests["manifest"] and not again.blobs_pushed

    # Pull by digest into a fresh layout; podman loads it with the expected image ID.
    source = parse_reference(pushed.pinned)
    pulled = pull_to_layout(client, source, tmp_path / "pulled", Platform("linux", "amd64"))
    assert pulled.manifest_digest == digests["manifest"] and pulled.config_digest == digests["config"]
    for layer in digests["layers"]:
        blob = tmp_path / "pulled" / "blobs" / "sha256" / layer["digest"].split(":")[1]
        assert "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() == layer["digest"]
    store = tmp_path / "podman"
    runroot = tempfile.mkdtemp(prefix="sfk-reg-", dir="/tmp")  # podman wants a short runroot
    podman = ["podman", "--root", str(store / "root"), "--runroot", runroot, "--storage-driver", "vfs"]
    try:
        loaded = subprocess.run([*podman, "load", "-i", str(tmp_path / "pulled")], capture_output=True, text=True)
        assert loaded.returncode == 0, loaded.stderr
        image_id = subprocess.run([*podman, "images", "--no-trunc", "--format", "{{.ID}}"],
                                  capture_output=True, text=True, check=True).stdout.split()
    finally:
        shutil.rmtree(runroot, ignore_errors=True)
    assert digests["config"].split(":")[1] in [i.removeprefix("sha256:") for i in image_id]


def test_publish_cli_records_the_registry_digest(registry: str, tmp_path: Path) -> None:
    digests = build_image(tmp_path, seed=12)
    record = tmp_path / "published.json"
    done = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "publish", str(tmp_path / "out"),
         f"{registry}/sparkflake/published:v2", "--insecure", "--record", str(record), "--json"],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    recorded = json.loads(record.read_text())
    assert recorded["manifest_digest"] == digests["manifest"] == json.loads(done.stdout)["manifest_digest"]
    assert recorded["pinned"].endswith("@" + digests["manifest"])


def test_clear_errors_unreachable_not_found_insecure_remote(registry: str, tmp_path: Path) -> None:
    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(InputError, match=f"cannot reach registry {closed}"):
        RegistryClient(closed, insecure=True).get_manifest("a/b", "v1")
    client = RegistryClient(registry, insecure=True)
    with pytest.raises(CheckFailed, match="not found .*404.*MANIFEST_UNKNOWN"):
        client.get_manifest("sparkflake/absent", "v1")
    with pytest.raises(CheckFailed, match="404"):
        client.read_blob("sparkflake/absent", "sha256:" + "0" * 64)
    with pytest.raises(InputError, match="plain HTTP is allowed only to a loopback registry"):
        RegistryClient("10.231.200.1:5000", insecure=True)
    assert client.head_manifest("sparkflake/absent", "v1") is None
    assert client.blob_size("sparkflake/absent", "sha256:" + "1" * 64) is None
    publish = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "publish", str(tmp_path), f"{closed}/x/y:z", "--insecure"],
        capture_output=True, text=True,
    )
    assert publish.returncode == 2 and "Traceback" not in publish.stderr


# ---- bearer-token auth, index resolution, limits: a small registry emulator ----------------
class Emulator:
    """Serves manifests and blobs only with a bearer token that its token endpoint issues for
    the right Basic credentials, like a registry behind a token service."""

    def __init__(self) -> None:
        self.token = "tok-" + hashlib.sha256(b"emulator").hexdigest()[:16]
        self.credentials = ("operator", "s3cret")
        self.manifests: dict[str, tuple[str, bytes]] = {}
        self.blobs: dict[str, bytes] = {}
        self.token_requests: list[str] = []
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _challenge(self) -> None:
                realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
                self.send_response(401)
                self.send_header("WWW-Authenticate",
                                 f'Bearer realm="{realm}",service="emulator",scope="repository:x:pull"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                if status == 200 and self.path.startswith("/v2/") and "/manifests/" in self.path:
                    self.send_header("Docker-Content-Digest", "sha256:" + hashlib.sha256(body).hexdigest())
                self.end_headers()
                if self.command != "HEAD":
                    try:
                        self.wfile.write(body)
                    except BrokenPipeError:
                        pass  # the client stopped reading at its limit, as it should

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.startswith("/token"):
                    emulator.token_requests.append(self.path)
                    user, password = emulator.credentials
                    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
                    if self.headers.get("Authorization") != expected:
                        self._send(401, b'{"details":"bad credentials"}')
                        return
                    self._send(200, json.dumps({"token": emulator.token}).encode())
                    return
                if self.headers.get("Authorization") != f"Bearer {emulator.token}":
                    self._challenge()
                    return
                parts = self.path.split("/")
                if "manifests" in parts:
                    found = emulator.manifests.get(parts[-1])
                    if found is None:
                        self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}')
                        return
                    self._send(200, found[1], found[0])
                    return
                if "blobs" in parts and parts[-1] in emulator.blobs:
                    self._send(200, emulator.blobs[parts[-1]], "application/octet-stream")
                    return
                self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN","message":"unknown"}]}')

            do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def add_blob(self, content: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        self.blobs[digest] = content
        return {"mediaType": "application/octet-stream", "digest": digest, "size": len(content)}

    def add_manifest(self, tag: str, media_type: str, content: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        self.manifests[tag] = (media_type, content)
        self.manifests[digest] = (media_type, content)
        return digest

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    served = Emulator()
    try:
        yield served
    finally:
        served.close()


def _image(emulator: Emulator, arch: str) -> tuple[str, int, str]:
    config = emulator.add_blob(json.dumps({"architecture": arch, "os": "linux"}).encode())
    layer = emulator.add_blob(arch.encode() * 1000)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config,
                           "layers": [layer]}).encode()
    digest = emulator.add_manifest(f"only-{arch}", OCI_MANIFEST, manifest)
    return digest, len(manifest), config["digest"]


def test_bearer_token_flow_and_index_to_platform_manifest(emulator: Emulator, tmp_path: Path) -> None:
    arm_digest, arm_size, arm_config = _image(emulator, "arm64")
    amd_digest, amd_size, _ = _image(emulator, "amd64")
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": amd_digest, "size": amd_size,
         "platform": {"os": "linux", "architecture": "amd64"}},
        {"mediaType": OCI_MANIFEST, "digest": arm_digest, "size": arm_size,
         "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
    ]}).encode()
    emulator.add_manifest("multi", OCI_INDEX, index)

    anonymous = RegistryClient(emulator.address, insecure=True)
    with pytest.raises(InputError, match="token service .* answered HTTP 401 \\(credentials not given\\)"):
        anonymous.get_manifest("x", "multi")
    wrong = RegistryClient(emulator.address, insecure=True, credentials=Credentials("operator", "nope"))
    with pytest.raises(InputError, match="HTTP 401"):
        wrong.get_manifest("x", "multi")

    client = RegistryClient(emulator.address, insecure=True, credentials=Credentials(*emulator.credentials))
    pulled = pull_to_layout(client, parse_reference(f"{emulator.address}/x:multi"), tmp_path / "arm",
                            Platform.parse_any("linux/arm64"))
    assert pulled.manifest_digest == arm_digest and pulled.config_digest == arm_config
    assert "service=emulator" in emulator.token_requests[-1]
    assert (tmp_path / "arm" / "blobs" / "sha256" / arm_digest.split(":")[1]).is_file()
    with pytest.raises(CheckFailed, match="no manifest for linux/riscv64"):
        pull_to_layout(client, parse_reference(f"{emulator.address}/x:multi"), tmp_path / "riscv",
                       Platform.parse_any("linux/riscv64"))
    assert not (tmp_path / "riscv").exists()


def test_limits_and_tampering_are_refused(emulator: Emulator, tmp_path: Path) -> None:
    client = RegistryClient(emulator.address, insecure=True, credentials=Credentials(*emulator.credentials))
    emulator.add_manifest("huge", OCI_MANIFEST, b" " * (4 * 1024 * 1024 + 1))
    with pytest.raises(CheckFailed, match="manifest limit"):
        client.get_manifest("x", "huge")
    digest, _, config = _image(emulator, "arm64")
    # the registry now serves other bytes (of the same length) under the digest
    emulator.blobs[config] = b"x" * len(emulator.blobs[config])
    with pytest.raises(CheckFailed, match="hash to"):
        pull_to_layout(client, parse_reference(f"{emulator.address}/x@{digest}"), tmp_path / "t",
                       Platform("linux", "arm64"))
    assert not (tmp_path / "t").exists()
    # a manifest served for a digest it does not hash to
    emulator.manifests["sha256:" + "a" * 64] = (OCI_MANIFEST, b"{}")
    with pytest.raises(CheckFailed, match="hash to"):
        client.get_manifest("x", "sha256:" + "a" * 64)


def test_a_token_realm_over_plain_http_off_loopback_is_refused() -> None:
    client = RegistryClient("127.0.0.1:1", insecure=True)
    with pytest.raises(InputError, match="plain HTTP token realm"):
        client.auth.answer_challenge('Bearer realm="http://203.0.113.5/token",service="s"', "repository:x:pull", "t")


# ---- references and platforms: parsers under property tests ---------------------------------
_component = st.from_regex(r"\A[a-z0-9]+(?:[._-][a-z0-9]+)*\Z", fullmatch=True).filter(lambda s: len(s) < 30)
_tags = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}\Z", fullmatch=True)
_registries = st.sampled_from(["127.0.0.1:5000", "ghcr.io", "registry.example:443", "localhost", "[::1]:5000"])


@given(_registries, st.lists(_component, min_size=1, max_size=3), st.none() | _tags,
       st.none() | st.binary(min_size=1, max_size=8).map(lambda b: "sha256:" + hashlib.sha256(b).hexdigest()))
def test_reference_round_trip(registry: str, components: list[str], tag: str | None, digest: str | None) -> None:
    text = f"{registry}/{'/'.join(components)}" + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    parsed = parse_reference(text)
    assert str(parsed) == text
    assert parsed.reference == (digest or tag or "latest")


@given(st.text(max_size=80))
def test_reference_parser_refuses_cleanly(text: str) -> None:
    try:
        parse_reference(text)
    except InputError:
        pass


@given(_registries, st.lists(_component, min_size=1, max_size=3), _tags, st.sampled_from(["registry", "repository", "tag"]))
def test_a_newline_at_the_end_of_any_part_of_a_reference_is_refused(
    registry: str, components: list[str], tag: str, part: str
) -> None:
    parts = {"registry": registry, "repository": "/".join(components), "tag": tag}
    parts[part] += "\n"
    with pytest.raises(InputError, match=f": {part}: expected"):
        parse_reference(f"{parts['registry']}/{parts['repository']}:{parts['tag']}")


def test_select_platform_treats_arm64_without_variant_as_v8() -> None:
    index = {"manifests": [{"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "arm64"}}]}
    assert select_platform(index, Platform("linux", "arm64", "v8"), "i")["digest"].endswith("1" * 64)
    with pytest.raises(CheckFailed, match="index has \\['linux/arm64'\\]"):
        select_platform(index, Platform("linux", "amd64"), "i")
    with pytest.raises(InputError):
        Platform.parse_any("linux")


def test_registry_answers_on_v2(registry: str) -> None:
    with urllib.request.urlopen(f"http://{registry}/v2/") as response:
        assert response.status == 200


def test_fetch_blob_streams_and_checks_at_the_end(emulator: Emulator, tmp_path: Path) -> None:
    client = RegistryClient(emulator.address, insecure=True, credentials=Credentials(*emulator.credentials))
    descriptor = emulator.add_blob(b"layer bytes " * 50000)
    written = client.fetch_blob("x", descriptor["digest"], tmp_path / "blob", size=descriptor["size"])
    streamed = (tmp_path / "blob").read_bytes()
    assert streamed == emulator.blobs[descriptor["digest"]] and written == len(streamed)
    emulator.blobs[descriptor["digest"]] = b"L" + streamed[1:]
    with pytest.raises(CheckFailed, match="registry.blob-digest"):
        client.fetch_blob("x", descriptor["digest"], tmp_path / "tampered", size=descriptor["size"])
    assert not (tmp_path / "tampered").exists()
    with pytest.raises(InputError, match="registry.digest"):
        client.fetch_blob("x", "sha256:" + "A" * 64, tmp_path / "bad-digest", size=1)
    assert parse_reference("docker://127.0.0.1:5000/a/b:c").repository == "a/b"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@given(st.one_of(
    _JSON,
    st.fixed_dictionaries({"username": st.text(max_size=8), "password": st.text(max_size=8)}),
    st.fixed_dictionaries({"username": _JSON, "password": _JSON}),
))
def test_the_auth_file_is_read_or_refused_naming_it(document: object) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "auth.json"
        path.write_text(json.dumps(document))
        usable = (isinstance(document, dict) and set(document) == {"username", "password"}
                  and all(isinstance(value, str) for value in document.values()))
        try:
            credentials = load_credentials(path)
        except InputError as refusal:
            assert not usable and str(path) in str(refusal)
        else:
            assert usable and credentials == Credentials(document["username"], document["password"])


def test_a_ca_file_that_is_not_pem_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(InputError, match=f"{tmp_path / 'ca.pem'}: not PEM certificates"):
        tls_context(str(tmp_path / "ca.pem"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="fifo"):
        tls_context(str(tmp_path / "fifo"))


@given(st.text(max_size=120))
def test_any_auth_challenge_is_answered_or_refused_cleanly(challenge: str) -> None:
    # a generated realm could name a host off this machine: realms are covered above
    assume("realm" not in challenge.lower())
    client = RegistryClient("127.0.0.1:1", insecure=True)
    try:
        client.auth.answer_challenge(challenge, "repository:x:pull", "fuzz")
    except InputError:
        pass
