"""Signatures, provenance and the SBOM referrer against the real distribution registry on
127.0.0.1, cross-checked both ways with cosign 2.x (Debian 13's package): cosign verifies
what `sparkflake sign` pushed, `sparkflake verify` verifies what `cosign sign`/`cosign
attest` pushed; a re-pushed tag, another key and tampered payloads fail both, each of ours
with a named check; `publish` pushes the SBOM (fallback tag: distribution 2.8 has no
referrers API) and `audit --sbom --key` reports it all."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fixtures.oci import RegistryServer, free_port, registry_server  # noqa: F401

from sparkflake.cli import main as cli_main
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci.artifact import fallback_tag
from sparkflake.oci.media_types import OCI_MANIFEST
from sparkflake.oci.referrers import find_referrers
from sparkflake.oci.remote import RegistryClient, parse_reference
from sparkflake.signing.cosign import attestation_tag, signature_tag, verify_image_signing
from sparkflake.signing.keys import load_public_key
from sparkflake.workflows.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "profiles" / "fixture"
COSIGN = "/usr/bin/cosign"
PASSWORD = "pw for tests"


def cosign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "HOME": str(cwd)}  # cosign caches under $HOME
    return subprocess.run([COSIGN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)


def cosign_verify(reference: str, public: Path, cwd: Path) -> subprocess.CompletedProcess:
    return cosign("verify", "--key", str(public), "--insecure-ignore-tlog", "--allow-insecure-registry",
                  "--allow-http-registry", reference, cwd=cwd)


def cosign_verify_attestation(reference: str, public: Path, cwd: Path) -> subprocess.CompletedProcess:
    return cosign("verify-attestation", "--type", "slsaprovenance1", "--key", str(public), "--insecure-ignore-tlog",
                  "--allow-insecure-registry", "--allow-http-registry", reference, cwd=cwd)


def sparkflake(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli_main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(autouse=True)
def _records_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # publish writes publish.json in the working directory


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("supply-chain-build")
    build_profile(BuildRequest(profile=str(FIXTURE), output_dir=base / "out", cache_root=base / "cache", offline=True))
    return base / "out"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("keys")
    for name in ("first", "second"):
        (directory / name).mkdir()
        completed = cosign("generate-key-pair", cwd=directory / name)
        assert completed.returncode == 0, completed.stderr
    return directory


def push_other_image(client: RegistryClient, repository: str, tag: str, marker: bytes) -> str:
    """A small image (one layer) under ``tag``: a later push that moves the tag."""
    layer = b"layer " + marker
    config = json.dumps({"architecture": "arm64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": client.push_small_blob(repository, config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": client.push_small_blob(repository, layer), "size": len(layer)}],
    }).encode()
    return client.push_manifest(repository, tag, manifest, OCI_MANIFEST)


def test_sign_publish_verify_both_ways(built: Path, keys: Path, registry_server: RegistryServer,  # noqa: F811
                                       capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    host = registry_server.host
    reference = f"{host}/supply/fixture:v1"
    first, second = keys / "first", keys / "second"
    code, out, err = sparkflake("publish", str(built), reference, "--insecure", "--json", capsys=capsys)
    assert code == 0, err
    published = json.loads(out)
    manifest = published["manifest_digest"]
    # the SBOM went up as an artifact whose subject is the image, under the fallback tag
    assert published["sbom"]["via"] == "fallback-tag" and published["sbom"]["tag"] == fallback_tag(manifest)
    client = RegistryClient(host, insecure=True)
    index = client.get_manifest("supply/fixture", fallback_tag(manifest)).document()
    (entry,) = index["manifests"]
    assert entry["artifactType"] == "application/spdx+json"
    artifact = client.get_manifest("supply/fixture", entry["digest"]).document()
    assert artifact["subject"]["digest"] == manifest
    assert client.read_blob("supply/fixture", artifact["layers"][0]["digest"]) == (built / "sbom.spdx.json").read_bytes()

    # ours signed -> cosign verifies signature and provenance; ours verifies too
    code, out, err = sparkflake("sign", reference, "--key", str(first / "cosign.key"), "--receipt",
                                str(built / "receipt.json"), "--insecure", "--json", capsys=capsys)
    assert code == 0, err
    signed = json.loads(out)
    assert signed["signature"]["tag"] == signature_tag(manifest)
    assert signed["attestation"]["tag"] == attestation_tag(manifest)
    checked = cosign_verify(reference, first / "cosign.pub", tmp_path)
    assert checked.returncode == 0, checked.stderr
    (claim,) = json.loads(checked.stdout)
    assert claim["critical"]["image"]["docker-manifest-digest"] == manifest
    attested = cosign_verify_attestation(reference, first / "cosign.pub", tmp_path)
    assert attested.returncode == 0, attested.stderr
    statement = json.loads(base64.b64decode(json.loads(attested.stdout.splitlines()[0])["payload"]))
    assert statement["subject"][0]["digest"]["sha256"] == manifest.removeprefix("sha256:")
    assert statement["predicate"] == json.loads((built / "receipt.json").read_text())["predicate"]
    code, out, err = sparkflake("verify", reference, "--key", str(first / "cosign.pub"), "--insecure", "--json",
                                capsys=capsys)
    assert code == 0 and json.loads(out)["passed"], out + err

    # another key: both refuse
    assert cosign_verify(reference, second / "cosign.pub", tmp_path).returncode != 0
    assert cosign_verify_attestation(reference, second / "cosign.pub", tmp_path).returncode != 0
    code, out, _ = sparkflake("verify", reference, "--key", str(second / "cosign.pub"), "--insecure", "--json",
                              capsys=capsys)
    assert code == 1
    assert {c["id"]: c["status"] for c in json.loads(out)["checks"]} == {
        "signature.valid": "fail", "attestation.valid": "fail"}

    # cosign signs and attests with the second key -> ours verifies cosign's (both keys now verify)
    predicate = tmp_path / "predicate.json"
    predicate.write_text(json.dumps(json.loads((built / "receipt.json").read_text())["predicate"]))
    assert cosign("sign", "--key", str(second / "cosign.key"), "--tlog-upload=false", "--allow-insecure-registry",
                  "--allow-http-registry", "-y", reference, cwd=tmp_path).returncode == 0
    assert cosign("attest", "--key", str(second / "cosign.key"), "--type", "slsaprovenance1", "--predicate",
                  str(predicate), "--tlog-upload=false", "--allow-insecure-registry", "--allow-http-registry", "-y",
                  reference, cwd=tmp_path).returncode == 0
    for key in (first, second):
        code, out, err = sparkflake("verify", reference, "--key", str(key / "cosign.pub"), "--insecure", capsys=capsys)
        assert code == 0, out + err

    # the audit reports the SBOM, its referrer, the signature and the attestation
    code, out, err = sparkflake(
        "audit", f"docker://{reference}", "--insecure", "--sbom", str(built / "sbom.spdx.json"), "--key",
        str(first / "cosign.pub"), "--receipt", str(built / "receipt.json"), "--lock", str(FIXTURE / "fixture.lock"),
        "--json", capsys=capsys)
    report = json.loads(out)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert code == 0, out + err
    for check in ("sbom.document", "sbom.subject", "sbom.receipt", "sbom.inputs", "sbom.referrer", "signature",
                  "attestation"):
        assert statuses[check] == "pass", check

    # a later image under the same tag: cosign and ours refuse it (no signature for its digest)
    moved = push_other_image(client, "supply/fixture", "v1", b"later")
    assert moved != manifest
    assert cosign_verify(reference, first / "cosign.pub", tmp_path).returncode != 0
    assert cosign_verify_attestation(reference, first / "cosign.pub", tmp_path).returncode != 0
    code, out, _ = sparkflake("verify", reference, "--key", str(first / "cosign.pub"), "--insecure", "--json",
                              capsys=capsys)
    assert code == 1
    assert {c["id"] for c in json.loads(out)["checks"]} == {"signature.present", "attestation.present"}
    code, out, _ = sparkflake("audit", f"docker://{reference}", "--insecure", "--key", str(first / "cosign.pub"),
                              "--sbom", str(built / "sbom.spdx.json"), "--json", capsys=capsys)
    statuses = {c["id"]: c["status"] for c in json.loads(out)["checks"]}
    assert code == 1
    assert statuses["sbom.subject"] == "fail" and statuses["sbom.referrer"] == "fail"
    assert statuses["signature.present"] == "fail" and statuses["attestation.present"] == "fail"
    # pinned by digest, the signed image still verifies
    code, out, err = sparkflake("verify", f"{host}/supply/fixture@{manifest}", "--key", str(first / "cosign.pub"),
                                "--insecure", capsys=capsys)
    assert code == 0, out + err


def _signed_image(client: RegistryClient, host: str, repository: str, keys: Path, capsys) -> tuple[str, str]:  # noqa: ANN001
    digest = push_other_image(client, repository, "v1", repository.encode())
    reference = f"{host}/{repository}:v1"
    code, _, err = sparkflake("sign", reference, "--key", str(keys / "first" / "cosign.key"), "--insecure",
                              capsys=capsys)
    assert code == 0, err
    return reference, digest


def _replace_layer(client: RegistryClient, repository: str, tag: str, **changes: object) -> None:
    """The manifest under ``tag`` with its one layer changed (blob bytes or annotations)."""
    manifest = client.get_manifest(repository, tag).document()
    (layer,) = manifest["layers"]
    if "content" in changes:
        content = changes["content"]
        assert isinstance(content, bytes)
        layer.update(digest=client.push_small_blob(repository, content), size=len(content))
    if "annotations" in changes:
        layer["annotations"] = changes["annotations"]
    client.push_manifest(repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)


def test_tampered_signatures_fail_by_name(keys: Path, registry_server: RegistryServer,  # noqa: F811
                                          capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    host = registry_server.host
    client = RegistryClient(host, insecure=True)
    public = str(keys / "first" / "cosign.pub")

    # the payload changed after signing (it now names another digest): the signature no longer verifies
    reference, digest = _signed_image(client, host, "tamper/payload", keys, capsys)
    tag = signature_tag(digest)
    payload = client.read_blob("tamper/payload", client.get_manifest("tamper/payload", tag).document()["layers"][0]["digest"])
    _replace_layer(client, "tamper/payload", tag, content=payload.replace(b"sha256:", b"sha256:0", 1)[:-1] + b"}")
    code, out, _ = sparkflake("verify", reference, "--key", public, "--insecure", "--no-attestation", "--json",
                              capsys=capsys)
    assert code == 1 and json.loads(out)["checks"][0]["id"] == "signature.valid"
    assert cosign_verify(reference, keys / "first" / "cosign.pub", tmp_path).returncode != 0

    # a valid signature of another image's payload moved under this image's tag: signature.subject
    other_reference, other = _signed_image(client, host, "tamper/subject", keys, capsys)
    target = push_other_image(client, "tamper/subject", "v2", b"target")
    moved = client.get_manifest("tamper/subject", signature_tag(other))
    client.push_manifest("tamper/subject", signature_tag(target), moved.content, OCI_MANIFEST)
    code, out, _ = sparkflake("verify", f"{host}/tamper/subject:v2", "--key", public, "--insecure",
                              "--no-attestation", "--json", capsys=capsys)
    assert code == 1 and json.loads(out)["checks"][0]["id"] == "signature.subject"
    assert cosign_verify(f"{host}/tamper/subject:v2", keys / "first" / "cosign.pub", tmp_path).returncode != 0

    # a signature annotation that is not base64
    reference, digest = _signed_image(client, host, "tamper/annotation", keys, capsys)
    _replace_layer(client, "tamper/annotation", signature_tag(digest),
                   annotations={"dev.cosignproject.cosign/signature": "%%%"})
    code, out, _ = sparkflake("verify", reference, "--key", public, "--insecure", "--no-attestation", "--json",
                              capsys=capsys)
    assert code == 1 and json.loads(out)["checks"][0]["id"] == "signature.valid"

    # no signature at all: a clear failure, no traceback
    push_other_image(client, "tamper/unsigned", "v1", b"unsigned")
    code, out, err = sparkflake("verify", f"{host}/tamper/unsigned:v1", "--key", public, "--insecure", capsys=capsys)
    assert code == 1 and "signature.present" in out and "has no signature" in out and "Traceback" not in err
    # no such image: exit 1 with the reference named
    code, _, err = sparkflake("verify", f"{host}/tamper/absent:v1", "--key", public, "--insecure", capsys=capsys)
    assert code == 1 and "tamper/absent:v1" in err and "Traceback" not in err


def test_tampered_attestation_fails_by_name(built: Path, keys: Path, registry_server: RegistryServer,  # noqa: F811
                                            capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    host = registry_server.host
    reference = f"{host}/tamper/attestation:v1"
    assert sparkflake("publish", str(built), reference, "--insecure", "--no-sbom", capsys=capsys)[0] == 0
    code, out, err = sparkflake("sign", reference, "--key", str(keys / "first" / "cosign.key"), "--receipt",
                                str(built / "receipt.json"), "--insecure", "--json", capsys=capsys)
    assert code == 0, err
    digest = json.loads(out)["manifest_digest"]
    client = RegistryClient(host, insecure=True)
    tag = attestation_tag(digest)
    layer = client.get_manifest("tamper/attestation", tag).document()["layers"][0]
    envelope = json.loads(client.read_blob("tamper/attestation", layer["digest"], limit=1 << 24))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["buildDefinition"]["externalParameters"]["tampered"] = True
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _replace_layer(client, "tamper/attestation", tag, content=json.dumps(envelope).encode())
    code, out, _ = sparkflake("verify", reference, "--key", str(keys / "first" / "cosign.pub"), "--insecure", "--json",
                              capsys=capsys)
    checks = {c["id"]: c["status"] for c in json.loads(out)["checks"]}
    assert code == 1 and checks == {"signature": "pass", "attestation.valid": "fail"}
    assert cosign_verify_attestation(reference, keys / "first" / "cosign.pub", tmp_path).returncode != 0


def test_sign_refuses_a_receipt_of_another_image(built: Path, keys: Path, registry_server: RegistryServer,  # noqa: F811
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    client = RegistryClient(registry_server.host, insecure=True)
    digest = push_other_image(client, "tamper/receipt", "v1", b"not the fixture")
    code, _, err = sparkflake("sign", f"{registry_server.host}/tamper/receipt:v1", "--key",
                              str(keys / "first" / "cosign.key"), "--receipt", str(built / "receipt.json"),
                              "--insecure", capsys=capsys)
    assert code == 1 and "[attestation.subject]" in err and "receipt.json" in err
    # refused before anything was pushed: no signature either
    assert client.head_manifest("tamper/receipt", signature_tag(digest)) is None


class ReferrersFront(ThreadingHTTPServer):
    """The OCI 1.1 referrers API in front of the real registry (distribution 2.8 lacks it):
    every request is passed through; a manifest pushed with a ``subject`` is remembered and
    listed by ``GET /v2/<name>/referrers/<digest>`` as distribution-spec 1.1 says (an image
    index of descriptors with ``artifactType`` and annotations), and its PUT answer carries
    the ``OCI-Subject`` header."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.referrers: dict[tuple[str, str], list[dict]] = {}
        super().__init__(("127.0.0.1", 0), _FrontHandler)


class _FrontHandler(BaseHTTPRequestHandler):
    server: ReferrersFront

    def log_message(self, *args) -> None:  # noqa: ANN002 - quiet
        pass

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        parts = self.path.split("?")[0].split("/")
        if self.command == "GET" and len(parts) >= 5 and parts[-2] == "referrers":
            name, digest = "/".join(parts[2:-2]), parts[-1]
            index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                                "manifests": self.server.referrers.get((name, digest), [])}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
            self.send_header("Content-Length", str(len(index)))
            self.end_headers()
            self.wfile.write(index)
            return
        host, port = self.server.upstream.split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        connection.request(self.command, self.path, body=body, headers=headers)
        response = connection.getresponse()
        content = response.read()
        subject = None
        if self.command == "PUT" and "/manifests/" in self.path and response.status == 201 and body:
            document = json.loads(body)
            if isinstance(document.get("subject"), dict):
                name = self.path.split("/manifests/")[0].removeprefix("/v2/")
                subject = document["subject"]["digest"]
                descriptor = {"mediaType": document["mediaType"], "size": len(body),
                              "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                              "artifactType": document.get("artifactType") or document["config"]["mediaType"]}
                if document.get("annotations"):
                    descriptor["annotations"] = document["annotations"]
                self.server.referrers.setdefault((name, subject), []).append(descriptor)
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                self.send_header(key, value)
        if subject:
            self.send_header("OCI-Subject", subject)
        # a HEAD answer has no body but says the length of the GET's
        length = response.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(content))
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(content)
        connection.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _relay


def test_publish_to_a_registry_with_the_referrers_api(built: Path, registry_server: RegistryServer,  # noqa: F811
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    front = ReferrersFront(registry_server.host)
    thread = threading.Thread(target=front.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"127.0.0.1:{front.server_address[1]}"
        code, out, err = sparkflake("publish", str(built), f"{host}/api/fixture:v1", "--insecure", "--json",
                                    capsys=capsys)
        assert code == 0, err
        published = json.loads(out)
        manifest = published["manifest_digest"]
        assert published["sbom"]["via"] == "referrers-api" and published["sbom"]["tag"] is None
        # no fallback tag was made: the API lists the artifact
        upstream = RegistryClient(registry_server.host, insecure=True)
        assert upstream.head_manifest("api/fixture", fallback_tag(manifest)) is None
        (listed,) = find_referrers(RegistryClient(host, insecure=True), "api/fixture", manifest, "application/spdx+json")
        assert listed["digest"] == published["sbom"]["manifest"]
        code, out, err = sparkflake("audit", f"docker://{host}/api/fixture:v1", "--insecure", "--sbom",
                                    str(built / "sbom.spdx.json"), "--json", capsys=capsys)
        statuses = {c["id"]: c["status"] for c in json.loads(out)["checks"]}
        assert code == 0 and statuses["sbom.referrer"] == "pass", out + err
    finally:
        front.shutdown()
        front.server_close()


def test_verify_checks_signature_and_attestation_together(keys: Path, registry_server: RegistryServer,  # noqa: F811
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The attestation is checked in a second thread: each outcome keeps its own name and
    order, a check that fails is an outcome, and an error that is not a check's (the registry
    gone) reaches the caller instead of passing for a result."""
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    client = RegistryClient(registry_server.host, insecure=True)
    reference_text, digest = _signed_image(client, registry_server.host, "together/fixture", keys, capsys)
    reference = parse_reference(reference_text)
    public = load_public_key(keys / "first" / "cosign.pub")
    outcomes = verify_image_signing(client, reference, public, digest)
    assert [name for name, _ in outcomes] == ["signature", "attestation"]
    assert isinstance(outcomes[0][1], str) and digest in outcomes[0][1]
    assert isinstance(outcomes[1][1], CheckFailed) and outcomes[1][1].check_id == "attestation.present"
    assert [name for name, _ in verify_image_signing(client, reference, public, digest, attestation=False)] == [
        "signature"]
    gone = RegistryClient(f"127.0.0.1:{free_port()}", insecure=True)
    with pytest.raises(InputError, match="cannot reach registry"):
        verify_image_signing(gone, reference, public, digest)
