"""The audit against images made by our engine, corrupted in every way the issue names,
and against images made and held by peers (umoci, skopeo, podman)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from fixtures.oci import podman_store, registry_server, run_tool  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake import audit
from sparkflake.cli import main
from sparkflake.core.errors import InputError, SparkflakeError
from sparkflake.oci.layer_scan import TarElfScanner
from sparkflake.oci.reader import open_image
from sparkflake.oci.verify import verify_image

ELF_AARCH64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little") + bytes(44)
ELF_X86_64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little") + bytes(44)


def build_image(root: Path, *, platform: str = "linux/arm64", elf: bytes = ELF_AARCH64, labels=None) -> Path:
    (root / "base" / "usr" / "lib").mkdir(parents=True)
    (root / "base" / "usr" / "lib" / "libnative.so").write_bytes(elf + b"\x00" * 3000)
    (root / "base" / "etc").mkdir()
    (root / "base" / "etc" / "os-release").write_text("ID=fixture\n")
    (root / "top" / "app").mkdir(parents=True)
    (root / "top" / "app" / "main.py").write_text("print('hello')\n" * 50)
    (root / "top" / "app" / "run").symlink_to("main.py")
    spec = {
        "platform": platform,
        "compression": "gzip",
        "layers": [{"tree": "base"}, {"tree": "top"}],
        "config": {"Entrypoint": ["/app/run"], "Labels": labels or {"org.sparkflake.profile": "fixture"}},
        "tag": "latest",
    }
    (root / "spec.json").write_text(json.dumps(spec))
    # its own layer cache: never the user's (~/.cache/sparkflake/oci), which other runs share
    assert main(["image", "build", str(root / "spec.json"), "-o", str(root / "out"), "--cache", str(root / "cache")]) == 0
    return root / "out"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_image(tmp_path_factory.mktemp("audit-image"))


def run_audit(target: str, **expect) -> audit.AuditReport:
    source = audit.open_target(target)
    try:
        return audit.audit_image(source, audit.expectations_from(**expect))
    finally:
        if source.cleanup:
            source.cleanup()


def test_clean_image_passes_in_every_format(built: Path):
    digests = json.loads((built / "digests.json").read_text())
    for target in (f"oci:{built / 'oci'}:latest", str(built / "oci-archive.tar"), str(built / "docker-archive.tar")):
        report = run_audit(target, expect_file=str(built / "digests.json")) if "docker" not in target else run_audit(target)
        assert report.exit_code == 0, [c for c in report.failures]
        assert report.config_digest == digests["config"]
        assert report.chain_id == digests["chain_id"]
        assert [layer.diff_id for layer in report.layers] == [layer["diff_id"] for layer in digests["layers"]]
        elf = next(c for c in report.checks if c.id == "platform.elf")
        assert elf.status == "pass" and "1 ELF files, all AArch64" in elf.detail
    report = run_audit(f"oci:{built / 'oci'}")
    assert report.manifest_digest == digests["manifest"]


def _blobs(layout: Path) -> list[Path]:
    return sorted(p for p in (layout / "blobs" / "sha256").iterdir())


def _named_digests(report: audit.AuditReport) -> set[str]:
    return {c.digest for c in report.failures if c.digest}


@settings(max_examples=210, deadline=None)
@given(st.data())
def test_every_single_byte_flip_in_every_blob_is_named(built: Path, tmp_path_factory, data):
    work = tmp_path_factory.mktemp("flip")
    layout = work / "oci"
    shutil.copytree(built / "oci", layout)
    blob = data.draw(st.sampled_from(_blobs(layout)))
    content = bytearray(blob.read_bytes())
    position = data.draw(st.integers(0, len(content) - 1))
    content[position] ^= data.draw(st.integers(1, 255))
    blob.write_bytes(bytes(content))
    digest = f"sha256:{blob.name}"
    # one verifier: whatever the audit names, `image inspect` (oci.verify) refuses too
    with pytest.raises(SparkflakeError) as refused:
        verify_image(open_image(layout))
    assert digest in str(refused.value), str(refused.value)
    try:
        report = run_audit(f"oci:{layout}")
    except SparkflakeError as exc:
        # a manifest that no longer hashes to its reference is refused before it is parsed
        assert digest in str(exc), str(exc)
        assert exc.check_id == "manifest.digest" and exc.exit_code == 1
        assert refused.value.check_id == "oci.blob-digest"
        return
    assert report.exit_code != 0
    assert digest in _named_digests(report), [c.as_record() for c in report.failures]


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_truncated_blob_is_named_before_hashing(built: Path, tmp_path_factory, data):
    layout = tmp_path_factory.mktemp("trunc") / "oci"
    shutil.copytree(built / "oci", layout)
    manifest = json.loads(next(iter(_documents(layout, "manifest"))).read_text())
    layer = data.draw(st.sampled_from(manifest["layers"]))
    path = layout / "blobs" / "sha256" / layer["digest"].split(":")[1]
    keep = data.draw(st.integers(0, path.stat().st_size - 1))
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    report = run_audit(f"oci:{layout}")
    failing = [c for c in report.failures if c.id == "layer.size"]
    assert failing and failing[0].digest == layer["digest"] and "not hashed" in failing[0].detail


def _documents(layout: Path, kind: str):
    index = json.loads((layout / "index.json").read_text())
    manifest_path = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    if kind == "manifest":
        yield manifest_path
    else:
        manifest = json.loads(manifest_path.read_text())
        yield layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]


def _rewrite(layout: Path, *, config_edit=None, manifest_edit=None, reserialize_config=False, update_refs=True):
    """Edit the config and/or manifest; with ``update_refs``, re-point every descriptor so
    the image is self-consistent (what a careful forger would do)."""
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest_path = blobs / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(manifest_path.read_bytes())
    config_path = blobs / manifest["config"]["digest"].split(":")[1]
    config = json.loads(config_path.read_bytes())
    if config_edit:
        config_edit(config)
    config_bytes = json.dumps(config, indent=1 if reserialize_config else None).encode()
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    if update_refs:
        (blobs / config_digest.split(":")[1]).write_bytes(config_bytes)
        manifest["config"]["digest"] = config_digest
        manifest["config"]["size"] = len(config_bytes)
    else:
        config_path.write_bytes(config_bytes)
    if manifest_edit:
        manifest_edit(manifest)
    manifest_bytes = json.dumps(manifest).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    (blobs / manifest_digest.split(":")[1]).write_bytes(manifest_bytes)
    index["manifests"][0]["digest"] = manifest_digest
    index["manifests"][0]["size"] = len(manifest_bytes)
    (layout / "index.json").write_text(json.dumps(index))
    return config_digest, manifest_digest


def test_swapped_layers_fail_diff_id(built: Path, tmp_path):
    layout = tmp_path / "oci"
    shutil.copytree(built / "oci", layout)
    _rewrite(layout, manifest_edit=lambda m: m.update(layers=list(reversed(m["layers"]))))
    report = run_audit(f"oci:{layout}")
    ids = {c.id for c in report.failures}
    assert "layer.diff-id" in ids and report.exit_code == 1


def test_edited_label_is_caught_by_expected_digests_and_profile_labels(built: Path, tmp_path):
    layout = tmp_path / "oci"
    shutil.copytree(built / "oci", layout)
    new_config, new_manifest = _rewrite(
        layout, config_edit=lambda c: c["config"]["Labels"].update({"org.sparkflake.profile": "forged"})
    )
    report = run_audit(f"oci:{layout}", expect_file=str(built / "digests.json"))
    failing = {c.id: c for c in report.failures}
    assert {"expect.manifest", "expect.config"} <= set(failing)
    assert new_manifest in failing["expect.manifest"].detail
    old = json.loads((built / "digests.json").read_text())["manifest"]
    assert old in failing["expect.manifest"].detail


def test_reserialized_config_fails_config_digest(built: Path, tmp_path):
    layout = tmp_path / "oci"
    shutil.copytree(built / "oci", layout)
    original = next(iter(_documents(layout, "config")))
    _rewrite(layout, reserialize_config=True, update_refs=False)
    report = run_audit(f"oci:{layout}")
    failing = [c for c in report.failures if c.id == "config.digest"]
    assert failing and failing[0].digest == f"sha256:{original.name}"


def test_wrong_architecture_elf_is_named(tmp_path):
    out = build_image(tmp_path, elf=ELF_X86_64)
    report = run_audit(f"oci:{out / 'oci'}")
    failing = [c for c in report.failures if c.id == "platform.elf"]
    assert failing and "usr/lib/libnative.so (x86-64)" in failing[0].detail


def test_profile_platform_mismatch(tmp_path):
    out = build_image(tmp_path, platform="linux/amd64", elf=ELF_X86_64)
    report = run_audit(f"oci:{out / 'oci'}", profile_name="glm53-dflash7")
    ids = {c.id for c in report.failures}
    assert "platform.expected" in ids and "labels.expected" in ids


def test_receipt_subject_and_byproducts(built: Path, tmp_path):
    digests = json.loads((built / "digests.json").read_text())
    hexes = lambda d: {"sha256": d.split(":")[1]}  # noqa: E731
    receipt = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "fixture", "digest": hexes(digests["manifest"])}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {"externalParameters": {}, "resolvedDependencies": []},
            "runDetails": {"byproducts": [
                {"name": "image-config", "digest": hexes(digests["config"])},
                *({"name": f"layer[{i}]", "digest": hexes(layer["digest"]), "annotations": {"diff_id": layer["diff_id"]}}
                  for i, layer in enumerate(digests["layers"])),
            ]},
        },
    }
    good = tmp_path / "receipt.json"
    good.write_text(json.dumps(receipt))
    assert run_audit(f"oci:{built / 'oci'}", receipt_file=str(good)).exit_code == 0
    receipt["subject"][0]["digest"] = hexes("sha256:" + "0" * 64)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(receipt))
    report = run_audit(f"oci:{built / 'oci'}", receipt_file=str(bad))
    assert [c.id for c in report.failures] == ["receipt.subject"]


def test_peer_umoci_and_skopeo_images_agree_with_skopeo_raw(tmp_path):
    layout = tmp_path / "umoci"
    run_tool(["umoci", "init", "--layout", str(layout)])
    run_tool(["umoci", "new", "--image", f"{layout}:t"])
    content = tmp_path / "content"
    (content / "opt").mkdir(parents=True)
    (content / "opt" / "hello.txt").write_text("peer\n")
    run_tool(["umoci", "insert", "--image", f"{layout}:t", str(content / "opt"), "/opt"])
    for target, skopeo_ref in (
        (f"oci:{layout}:t", f"oci:{layout}:t"),
        (str(tmp_path / "peer.tar"), f"docker-archive:{tmp_path / 'peer.tar'}"),
    ):
        if "peer.tar" in target:
            run_tool(["skopeo", "copy", f"oci:{layout}:t", f"docker-archive:{tmp_path / 'peer.tar'}"])
        report = run_audit(target)
        assert report.exit_code == 0, [c.as_record() for c in report.failures]
        raw = run_tool(["skopeo", "inspect", "--raw", skopeo_ref]).stdout.encode()
        config = json.loads(run_tool(["skopeo", "inspect", "--config", "--raw", skopeo_ref]).stdout)
        if report.manifest_digest is not None:
            assert report.manifest_digest == "sha256:" + hashlib.sha256(raw).hexdigest()
        assert report.config_digest == json.loads(raw)["config"]["digest"]
        assert config["rootfs"]["diff_ids"] == [layer.diff_id for layer in report.layers]


def test_podman_store_audit_agrees_with_podman_inspect(built: Path, podman_store, tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch):
    image_id = podman_store.load(built / "docker-archive.tar")
    engine_args = podman_store.argv()[1:]
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # where podman save would keep its own temporaries
    source = audit.open_target(f"podman:{image_id}", engine_args=engine_args)
    try:
        # the saved archive, and whatever podman kept while saving, in one directory of ours
        assert [path.name.startswith("sparkflake-audit-") for path in temporary.iterdir()] == [True]
        report = audit.audit_image(source, audit.Expectations())
    finally:
        source.cleanup()
    assert list(temporary.iterdir()) == []
    assert report.exit_code == 0, [c.as_record() for c in report.failures]
    assert report.engine_image_id == image_id == report.config_digest
    assert any(c.id == "engine.image-id" and c.status == "pass" for c in report.checks)


def test_podman_store_audit_with_the_builds_digests_compares_like_with_like(built: Path, podman_store):  # noqa: F811
    """Issue 31: an engine's store keeps no manifest and its layers uncompressed; the build's
    digests.json is compared by config (image ID), chain ID and diffIDs, the manifest and
    the compressed layer digests are named as not comparable, never reported as a mismatch."""
    image_id = podman_store.load(built / "docker-archive.tar")
    source = audit.open_target(f"podman:{image_id}", engine_args=podman_store.argv()[1:])
    try:
        report = audit.audit_image(source, audit.expectations_from(expect_file=str(built / "digests.json")))
    finally:
        source.cleanup()
    assert report.exit_code == 0, [c.as_record() for c in report.failures]
    status = {check.id: check for check in report.checks}
    assert status["expect.config"].status == "pass" and status["expect.chain-id"].status == "pass"
    assert status["expect.layers"].status == "pass" and "by diffID" in status["expect.layers"].detail
    assert status["expect.manifest"].status == "skip" and "keeps no manifest" in status["expect.manifest"].detail
    # a store holding another image still fails on what is comparable
    digests = json.loads((built / "digests.json").read_text())
    digests["layers"][0]["diff_id"] = "sha256:" + "0" * 64
    wrong = built.parent / "wrong-digests.json"
    wrong.write_text(json.dumps(digests))
    source = audit.open_target(f"podman:{image_id}", engine_args=podman_store.argv()[1:])
    try:
        report = audit.audit_image(source, audit.expectations_from(expect_file=str(wrong)))
    finally:
        source.cleanup()
    assert [check.id for check in report.failures] == ["expect.layers"]


def test_layer_over_decompression_bound(built: Path):
    report = run_audit(f"oci:{built / 'oci'}", max_uncompressed_bytes=1024)
    assert any(c.id == "layer.decompressed-bound" for c in report.failures)


def test_uppercase_digest_and_unknown_media_type(built: Path, tmp_path, capsys):
    layout = tmp_path / "oci"
    shutil.copytree(built / "oci", layout)
    _rewrite(layout, manifest_edit=lambda m: m["layers"][0].update(mediaType="application/x-unknown"))
    report = run_audit(f"oci:{layout}")
    assert any(c.id == "media-type.consistent" and "application/x-unknown" in c.detail for c in report.failures)
    layout2 = tmp_path / "oci2"
    shutil.copytree(built / "oci", layout2)
    _rewrite(layout2, manifest_edit=lambda m: m["layers"][0].update(digest=m["layers"][0]["digest"].upper().replace("SHA256", "sha256")))
    code = main(["audit", f"oci:{layout2}"])
    err = capsys.readouterr().err
    assert code == 2 and "[digest.well-formed]" in err and "layers[0].digest" in err
    assert main(["audit", f"oci:{built / 'oci'}", "--expect", "sha256:" + "A" * 64 + "@manifest"]) == 2
    assert "digest.well-formed" in capsys.readouterr().err


def test_oversized_manifest_and_malformed_json(built: Path, tmp_path, capsys):
    layout = tmp_path / "oci"
    shutil.copytree(built / "oci", layout)
    _rewrite(layout, manifest_edit=lambda m: m.update(annotations={"padding": "x" * (5 << 20)}))
    assert main(["audit", f"oci:{layout}"]) == 2
    err = capsys.readouterr().err
    assert "document.size" in err and "Traceback" not in err
    (layout / "index.json").write_text("{not json")
    assert main(["audit", f"oci:{layout}", "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["checks"][0]["id"] == "document.parse"


def test_record_file_and_cli_exit_codes(built: Path, tmp_path, capsys):
    record = tmp_path / "record.json"
    code = main(["audit", f"oci:{built / 'oci'}", "--expect-file", str(built / "digests.json"), "--record", str(record), "--json"])
    assert code == 0
    written = json.loads(record.read_text())
    assert written["kind"] == "sparkflake.digest-verification" and written["passed"] is True
    assert written["digests"]["manifest"]["digest"] == json.loads((built / "digests.json").read_text())["manifest"]
    capsys.readouterr()
    assert main(["audit", str(tmp_path / "missing")]) == 2


@given(st.binary(min_size=0, max_size=4096))
def test_tar_scanner_never_raises_on_garbage(blob):
    scanner = TarElfScanner()
    scanner.feed(blob)


def test_tar_scanner_finds_elf_across_chunk_boundaries(tmp_path):
    import tarfile

    (tmp_path / "a").write_bytes(ELF_AARCH64)
    (tmp_path / "b").write_bytes(b"plain")
    long_name = "d" * 150
    (tmp_path / long_name).write_bytes(ELF_X86_64)
    archive = tmp_path / "t.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("a", "b", long_name):
            tar.add(tmp_path / name, arcname=name)
    raw = archive.read_bytes()
    for step in (1, 7, 512, 4096):
        scanner = TarElfScanner()
        for offset in range(0, len(raw), step):
            scanner.feed(raw[offset : offset + step])
        assert [(e.path, e.machine) for e in scanner.elf_files] == [("a", 183), (long_name, 62)]


def test_registry_audit_by_tag_and_digest_then_moved_tag(built: Path, tmp_path, registry_server, capsys):  # noqa: F811
    host = registry_server.host
    digests = json.loads((built / "digests.json").read_text())
    run_tool(["skopeo", "copy", "--preserve-digests", "--dest-tls-verify=false",
              f"oci:{built / 'oci'}:latest", f"docker://{host}/sparkflake/audit:v1"])
    by_tag = main(["audit", f"docker://{host}/sparkflake/audit:v1", "--insecure",
                   "--expect", f"{digests['manifest']}@manifest", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert by_tag == 0, report["failures"] if "failures" in report else report["checks"]
    assert report["digests"]["manifest"]["digest"] == digests["manifest"]
    assert report["digests"]["config"]["digest"] == digests["config"]
    by_digest = main(["audit", f"docker://{host}/sparkflake/audit@{digests['manifest']}", "--insecure"])
    assert by_digest == 0
    capsys.readouterr()
    other = build_image(tmp_path / "other", labels={"org.sparkflake.profile": "other"})
    other_manifest = json.loads((other / "digests.json").read_text())["manifest"]
    run_tool(["skopeo", "copy", "--preserve-digests", "--dest-tls-verify=false",
              f"oci:{other / 'oci'}:latest", f"docker://{host}/sparkflake/audit:v1"])
    moved = main(["audit", f"docker://{host}/sparkflake/audit:v1", "--insecure",
                  "--expect", f"{digests['manifest']}@manifest"])
    out = capsys.readouterr().out
    assert moved == 1
    assert "expect.manifest" in out and digests["manifest"] in out and other_manifest in out


def test_registry_unreachable_and_missing(registry_server, capsys):  # noqa: F811
    from fixtures.oci import free_port

    port = free_port()
    assert main(["audit", f"docker://127.0.0.1:{port}/sparkflake/none:v1", "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach registry" in err and "Traceback" not in err
    assert main(["audit", f"docker://{registry_server.host}/sparkflake/none:v1", "--insecure"]) == 1
    err = capsys.readouterr().err
    assert "registry.not-found" in err and "404" in err
    assert main(["audit", "docker://example.org/sparkflake/none:v1", "--insecure"]) == 2
    assert "plain HTTP is allowed only to a loopback registry" in capsys.readouterr().err


@pytest.mark.parametrize("profile", ["fixture", "glm53-dflash7"])
def test_committed_expected_digests_are_well_formed(profile):
    from sparkflake.profile.lookup import find_profiles_dir

    path = find_profiles_dir() / profile / "expected-digests.json"
    expectations = audit.expectations_from(expect_file=str(path))
    kinds = {kind for kind, _ in expectations.digests}
    assert {"manifest", "config", "chain-id"} <= kinds
    assert expectations.expected_layers and all("diff_id" in layer for layer in expectations.expected_layers)


def test_registry_401_without_credentials_is_a_clear_error(capsys):
    import http.server
    import threading

    class Unauthorized(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="registry"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Unauthorized)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        code = main(["audit", f"docker://127.0.0.1:{server.server_port}/sparkflake/private:v1", "--insecure"])
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    assert code == 2
    assert "requires credentials (401" in err and "Traceback" not in err


def _retarred(source: Path, target: Path, edit_manifest_json) -> None:
    """A copy of a tar archive with its manifest.json rewritten by ``edit_manifest_json``."""
    import io
    import tarfile

    with tarfile.open(source) as old, tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as new:
        for member in old.getmembers():
            data = old.extractfile(member).read() if member.isfile() else None
            if member.name == "manifest.json":
                data = json.dumps(edit_manifest_json(json.loads(data))).encode()
                member.size = len(data)
            new.addfile(member, io.BytesIO(data) if data is not None else None)


def test_combined_archive_docker_view_is_audited(built: Path, tmp_path):
    """The oci-archive is also the docker-archive: the audit checks that manifest.json
    (what docker and podman load) names the config and layers the OCI chain does."""
    archive = built / "oci-archive.tar"
    assert archive.samefile(built / "docker-archive.tar")
    report = run_audit(str(archive))
    assert report.source_kind == "oci-archive+docker-archive"
    view = next(c for c in report.checks if c.id == "archive.docker-view")
    assert view.status == "pass" and "2 layers" in view.detail
    swapped = tmp_path / "swapped.tar"
    _retarred(archive, swapped, lambda doc: [{**doc[0], "Layers": doc[0]["Layers"][::-1]}])
    report = run_audit(str(swapped))
    assert report.exit_code == 1
    failed = [c for c in report.failures if c.id == "archive.docker-view"]
    assert failed and "manifest.json names layers" in failed[0].detail
    other_config = tmp_path / "config.tar"
    _retarred(archive, other_config, lambda doc: [{**doc[0], "Config": doc[0]["Layers"][0]}])
    report = run_audit(str(other_config))
    assert [c.id for c in report.failures] == ["archive.docker-view"]
    assert "manifest.json names config" in report.failures[0].detail


def _multi_platform_layout(built: Path, tmp_path: Path) -> tuple[Path, str]:
    """The built layout with its index.json leading to a multi-platform index whose first
    entry claims linux/amd64 for the (arm64/v8) manifest, the second linux/arm64."""
    layout = tmp_path / "oci"
    shutil.copytree(built / "oci", layout)
    outer = json.loads((layout / "index.json").read_text())
    arm64 = {key: value for key, value in outer["manifests"][0].items() if key != "annotations"}
    # spelled without the variant the config names (v8): one platform by oci.types' rule
    arm64["platform"] = {"architecture": "arm64", "os": "linux"}
    claims_amd64 = {**arm64, "platform": {"architecture": "amd64", "os": "linux"}}
    inner = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [claims_amd64, arm64]}).encode()
    inner_digest = "sha256:" + hashlib.sha256(inner).hexdigest()
    (layout / "blobs" / "sha256" / inner_digest.split(":")[1]).write_bytes(inner)
    outer["manifests"] = [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": inner_digest,
                           "size": len(inner), "annotations": {"org.opencontainers.image.ref.name": "multi"}}]
    (layout / "index.json").write_text(json.dumps(outer))
    return layout, inner_digest


def _platform_checks(target: str, platform: str | None = None, **open_args) -> audit.AuditReport:
    source = audit.open_target(target, platform=platform, **open_args)
    return audit.audit_image(source, audit.Expectations())


def test_nested_index_platform_is_chosen_by_the_one_rule_and_checked(built: Path, tmp_path):
    """An OCI layout whose index.json leads to a multi-platform index: the audit reads
    through oci's reader, which picks by --platform or else the cluster's platform, and
    compares the platform the index claims with the config's."""
    layout, inner_digest = _multi_platform_layout(built, tmp_path)
    chosen = {c.id: c.status for c in run_audit(f"oci:{layout}:multi").checks}
    assert chosen["platform.index"] == "pass" and run_audit(f"oci:{layout}").exit_code == 0
    assert run_audit(f"oci:{layout}").platform == "linux/arm64/v8"  # the index says linux/arm64
    claimed = _platform_checks(f"oci:{layout}", "linux/amd64")
    assert [c.id for c in claimed.failures] == ["platform.index"], claimed.failures
    assert "the index says linux/amd64" in claimed.failures[0].detail
    with pytest.raises(InputError) as refused:
        audit.open_target(f"oci:{layout}", platform="linux/s390x")
    assert refused.value.check_id == "platform.index" and inner_digest.split(":")[1] in refused.value.message


def test_registry_index_platform_by_the_same_rule(built: Path, tmp_path, registry_server):  # noqa: F811
    """The same index pushed by skopeo to the real registry: read by oci.remote_image into
    the same reader, chosen by the same rule, the index digest the registry serves."""
    layout, inner_digest = _multi_platform_layout(built, tmp_path)
    target = f"docker://{registry_server.host}/sparkflake/multi:v1"
    run_tool(["skopeo", "copy", "--all", "--preserve-digests", "--dest-tls-verify=false",
              f"oci:{layout}:multi", target])
    default = _platform_checks(target, insecure=True)
    assert default.exit_code == 0, default.failures
    assert default.index_digest == inner_digest
    assert {c.id: c.status for c in default.checks}["platform.index"] == "pass"
    claimed = _platform_checks(target, "linux/amd64", insecure=True)
    assert [c.id for c in claimed.failures] == ["platform.index"], claimed.failures
    with pytest.raises(InputError) as refused:
        audit.open_target(target, platform="linux/s390x", insecure=True)
    assert refused.value.check_id == "platform.index"


def test_docker_archive_files_named_by_digest_are_checked_against_it(built: Path, tmp_path):
    """A docker-archive names its config and layers after their digests (docker save,
    skopeo, ours): the audit and oci.verify both hash the bytes against that name."""
    import io
    import tarfile

    digests = json.loads((built / "digests.json").read_text())
    layer_hex = digests["layers"][0]["digest"].split(":")[1]
    archive = tmp_path / "docker-only.tar"
    with tarfile.open(built / "docker-archive.tar") as original, tarfile.open(archive, "w") as rewritten:
        for member in original.getmembers():
            if member.name in ("oci-layout", "index.json"):
                continue  # what is left is a plain docker-archive
            content = original.extractfile(member).read() if member.isfile() else None
            if member.name.endswith(layer_hex):
                content = content[:-1] + bytes([content[-1] ^ 1])  # the gzip trailer: still the same tar
            rewritten.addfile(member, io.BytesIO(content) if content is not None else None)
    report = run_audit(str(archive))
    assert report.source_kind == "docker-archive"
    failing = {c.id: c for c in report.failures}
    assert "layer.digest" in failing and failing["layer.digest"].digest == digests["layers"][0]["digest"]
    with pytest.raises(SparkflakeError) as refused:
        verify_image(open_image(archive))
    assert refused.value.check_id == "oci.blob-digest" and layer_hex in refused.value.message


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3),
    max_leaves=10,
)
# receipts shaped like a build's, with any value at any level
_RECEIPTS = st.one_of(
    st.dictionaries(st.text(max_size=8), _JSON, max_size=3),
    st.fixed_dictionaries({
        "subject": st.one_of(_JSON, st.lists(st.fixed_dictionaries({"digest": _JSON}), max_size=2)),
        "predicate": st.one_of(_JSON, st.fixed_dictionaries({
            "buildDefinition": st.one_of(_JSON, st.fixed_dictionaries({
                "internalParameters": st.one_of(_JSON, st.fixed_dictionaries({"labels": _JSON})),
                "resolvedDependencies": _JSON,
            })),
            "runDetails": st.one_of(_JSON, st.fixed_dictionaries({"byproducts": st.one_of(_JSON, st.lists(
                st.fixed_dictionaries({"name": st.sampled_from(["image-config", "layer[0]", "layer[1]", "layer[x]"]),
                                       "digest": _JSON, "annotations": _JSON}), max_size=3))})),
        })),
    }),
)


@settings(max_examples=60, deadline=None)
@given(receipt=_RECEIPTS, with_lock=st.booleans())
def test_any_receipt_gives_named_checks_never_a_traceback(built: Path, receipt, with_lock):
    """`audit --receipt FILE` reads whatever JSON object the file holds: every reading of
    it is bounded by type, so the result is checks, never an exception."""
    source = audit.open_target(f"oci:{built / 'oci'}")
    expectations = audit.Expectations(receipt=receipt, receipt_where="receipt.json",
                                      lock_digests={"vllm": "sha256:" + "a" * 64} if with_lock else None)
    report = audit.audit_image(source, expectations)
    assert all(c.id.startswith(("receipt.", "labels.")) for c in report.failures), report.failures


@pytest.mark.parametrize("layer", [1, None, True, 1.5, "x", [1]])
def test_an_expected_layer_that_is_no_object_is_refused_with_its_path(tmp_path, layer):
    """`key in layer` of a number was a TypeError out of the audit, and of a string a
    substring test: each expected layer is an object of the fields it names."""
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"manifest": "sha256:" + "1" * 64, "layers": [{"diff_id": "sha256:" + "2" * 64}, layer]}))
    with pytest.raises(InputError) as refused:
        audit.expectations_from(expect_file=str(path))
    assert refused.value.check_id == "document.parse"
    assert refused.value.message == f"{path}: $.layers[1]: expected a layer object", refused.value.message
