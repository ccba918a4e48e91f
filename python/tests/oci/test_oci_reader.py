"""Reading damaged layouts and archives: a clear error naming the path or digest, exit 2
when something cannot be read, exit 1 when bytes do not match their digest or size."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from sparkflake.cli import main as cli_main
from sparkflake.oci import (
    BlobStore,
    ImageSpec,
    LayerInput,
    LayerSpec,
    TreeSource,
    build_image,
    write_image_outputs,
)


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reader")
    tree = root / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_bytes(bytes(range(256)) * 200)
    spec = ImageSpec(
        layers=(
            LayerSpec(LayerInput(sources=(TreeSource(str(tree)),)), "one"),
            LayerSpec(LayerInput(deletions=("/d/f",)), "two"),
        )
    )
    image = build_image(spec, BlobStore(root / "cache"))
    write_image_outputs(image, root / "out")
    return root / "out"


def _copy_layout(image_dir: Path, tmp_path: Path) -> tuple[Path, dict]:
    layout = tmp_path / "oci"
    shutil.copytree(image_dir / "oci", layout)
    digests = json.loads((image_dir / "digests.json").read_text())
    return layout, digests


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.split(":")[1]


def _inspect(path: Path, capsys) -> tuple[int, str]:
    code = cli_main(["image", "inspect", str(path), "--json"])
    captured = capsys.readouterr()
    return code, captured.err


def test_intact_images_inspect_cleanly(image_dir, capsys):
    digests = json.loads((image_dir / "digests.json").read_text())
    for name in ("oci", "oci-archive.tar", "docker-archive.tar"):
        code = cli_main(["image", "inspect", str(image_dir / name), "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0
        assert report["digests"]["config"] == digests["config"]
        assert report["digests"]["chain_id"] == digests["chain_id"]
        assert [layer["diff_id"] for layer in report["layers"]] == [
            layer["diff_id"] for layer in digests["layers"]
        ]
        if name != "docker-archive.tar":
            assert report["digests"]["manifest"] == digests["manifest"]
            assert report["digests"]["index"] == digests["index"]
            assert [layer["digest"] for layer in report["layers"]] == [
                layer["digest"] for layer in digests["layers"]
            ]


def test_missing_blob_exit_2(image_dir, tmp_path, capsys):
    layout, digests = _copy_layout(image_dir, tmp_path)
    layer = digests["layers"][0]["digest"]
    _blob(layout, layer).unlink()
    code, err = _inspect(layout, capsys)
    assert code == 2
    assert layer in err and "missing" in err


def test_truncated_blob_exit_1(image_dir, tmp_path, capsys):
    layout, digests = _copy_layout(image_dir, tmp_path)
    layer = digests["layers"][0]["digest"]
    blob = _blob(layout, layer)
    blob.write_bytes(blob.read_bytes()[:-10])
    code, err = _inspect(layout, capsys)
    assert code == 1
    assert layer in err and "bytes" in err and "[oci.blob-size]" in err


def test_corrupted_blob_exit_1(image_dir, tmp_path, capsys):
    layout, digests = _copy_layout(image_dir, tmp_path)
    layer = digests["layers"][0]["digest"]
    blob = _blob(layout, layer)
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    blob.write_bytes(bytes(raw))
    code, err = _inspect(layout, capsys)
    assert code == 1
    assert f"expected {layer}" in err and "[oci.blob-digest]" in err


def test_corrupted_config_and_wrong_size_exit_1(image_dir, tmp_path, capsys):
    layout, digests = _copy_layout(image_dir, tmp_path)
    config = _blob(layout, digests["config"])
    config.write_bytes(config.read_bytes().replace(b"arm64", b"amd64"))
    code, err = _inspect(layout, capsys)
    assert code == 1 and digests["config"] in err

    layout2, _ = _copy_layout(image_dir, tmp_path / "two")
    index = json.loads((layout2 / "index.json").read_text())
    index["manifests"][0]["size"] += 1
    (layout2 / "index.json").write_text(json.dumps(index))
    code, err = _inspect(layout2, capsys)
    assert code == 1 and "the descriptor says" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "oci-layout file missing"),
        (b"{broken", "not valid JSON"),
        (b'{"imageLayoutVersion": "2.0.0"}', "imageLayoutVersion is '2.0.0'"),
    ],
)
def test_bad_oci_layout_file_exit_2(image_dir, tmp_path, capsys, content, message):
    layout, _ = _copy_layout(image_dir, tmp_path)
    if content is None:
        (layout / "oci-layout").unlink()
    else:
        (layout / "oci-layout").write_bytes(content)
    code, err = _inspect(layout, capsys)
    assert code == 2
    assert message in err and "oci-layout" in err


def _rewrite_archive(source: Path, target: Path, change) -> None:
    with (
        tarfile.open(source) as tar_in,
        tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar_out,
    ):
        for member in tar_in.getmembers():
            content = tar_in.extractfile(member).read() if member.isfile() else None
            result = change(member, content)
            if result is None:
                continue
            member, content = result
            if content is not None:
                member.size = len(content)
                tar_out.addfile(member, io.BytesIO(content))
            else:
                tar_out.addfile(member)


def test_damaged_archives(image_dir, tmp_path, capsys):
    digests = json.loads((image_dir / "digests.json").read_text())
    layer_hex = digests["layers"][0]["digest"].split(":")[1]

    def drop_layer(member, content):
        return None if member.name.endswith(layer_hex) else (member, content)

    missing = tmp_path / "missing.tar"
    _rewrite_archive(image_dir / "oci-archive.tar", missing, drop_layer)
    code, err = _inspect(missing, capsys)
    assert code == 2 and layer_hex in err

    def flip_layer(member, content):
        if member.name.endswith(layer_hex):
            content = content[:-1] + bytes([content[-1] ^ 1])
        return member, content

    flipped = tmp_path / "flipped.tar"
    _rewrite_archive(image_dir / "oci-archive.tar", flipped, flip_layer)
    code, err = _inspect(flipped, capsys)
    assert code == 1 and layer_hex in err

    def flip_docker_layer(member, content):
        # the docker-archive of a gzip image is the combined archive: layers are blobs/
        if member.name.endswith(layer_hex):
            content = content[:100] + bytes([content[100] ^ 1]) + content[101:]
        return member, content

    docker = tmp_path / "docker.tar"
    _rewrite_archive(image_dir / "docker-archive.tar", docker, flip_docker_layer)
    code, err = _inspect(docker, capsys)
    assert code in (1, 2) and "layer 0" in err

    truncated = tmp_path / "truncated.tar"
    raw = (image_dir / "oci-archive.tar").read_bytes()
    truncated.write_bytes(raw[: len(raw) // 2])
    code, err = _inspect(truncated, capsys)
    assert code == 2 and str(truncated) in err

    not_an_image = tmp_path / "plain.tar"
    with tarfile.open(not_an_image, "w") as tar:
        tar.addfile(tarfile.TarInfo("hello"), io.BytesIO(b""))
    code, err = _inspect(not_an_image, capsys)
    assert code == 2 and "neither an OCI layout" in err
    code, err = _inspect(tmp_path / "absent", capsys)
    assert code == 2 and "no such file" in err


def test_nested_index_picks_linux_arm64(image_dir, tmp_path, capsys):
    import hashlib

    layout, digests = _copy_layout(image_dir, tmp_path)
    outer = json.loads((layout / "index.json").read_text())
    arm64 = dict(outer["manifests"][0])
    arm64.pop("annotations")
    amd64 = {**arm64, "platform": {"architecture": "amd64", "os": "linux"}}
    inner = json.dumps({"schemaVersion": 2, "manifests": [amd64, arm64]}).encode()
    inner_digest = "sha256:" + hashlib.sha256(inner).hexdigest()
    _blob(layout, inner_digest).write_bytes(inner)
    outer["manifests"] = [
        {
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": inner_digest,
            "size": len(inner),
            "annotations": {"org.opencontainers.image.ref.name": "multi"},
        }
    ]
    (layout / "index.json").write_text(json.dumps(outer))
    code = cli_main(["image", "inspect", str(layout), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["digests"]["manifest"] == digests["manifest"]
    assert report["ref_name"] == "multi"


@pytest.mark.parametrize("document", ["index.json", "oci-layout", "manifest", "config"])
def test_deeply_nested_document_is_a_clear_error(image_dir, tmp_path, capsys, document):
    """json.loads gives up on deep nesting with RecursionError: a clear error, not a traceback."""
    layout, digests = _copy_layout(image_dir, tmp_path)
    deep = b"[" * 100_000
    if document in ("index.json", "oci-layout"):
        (layout / document).write_bytes(deep)
    else:
        # re-point the references so the reader gets as far as parsing the document
        import hashlib

        digest = "sha256:" + hashlib.sha256(deep).hexdigest()
        _blob(layout, digest).write_bytes(deep)
        index = json.loads((layout / "index.json").read_text())
        if document == "manifest":
            index["manifests"][0].update(digest=digest, size=len(deep))
        else:
            manifest = json.loads(_blob(layout, digests["manifest"]).read_text())
            manifest["config"].update(digest=digest, size=len(deep))
            raw = json.dumps(manifest).encode()
            manifest_digest = "sha256:" + hashlib.sha256(raw).hexdigest()
            _blob(layout, manifest_digest).write_bytes(raw)
            index["manifests"][0].update(digest=manifest_digest, size=len(raw))
        (layout / "index.json").write_text(json.dumps(index))
    code, err = _inspect(layout, capsys)
    assert code == 2 and "nested too deeply" in err and "document.parse" in err, err
    code = cli_main(["audit", f"oci:{layout}"])  # the audit reads through the same reader
    captured = capsys.readouterr()
    assert code in (1, 2) and "nested too deeply" in captured.out + captured.err, captured
