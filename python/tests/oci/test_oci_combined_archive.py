"""The combined archive (Docker 25 `docker save` layout): one tar that is both the
oci-archive and the docker-archive, written once and hard-linked; read and verified as
both views; zstd images keep two separate archives."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from fixtures.oci import (  # noqa: F401 - pytest fixtures
    PodmanStore,
    TreeVariant,
    materialize_tree,
    podman_store,
    run_tool,
    tree_specs,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkflake.cli import main as cli_main
from sparkflake.core.canonical_json import canonical_json_bytes
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci import (
    BlobStore,
    Compression,
    GeneratedFile,
    ImageSpec,
    LayerInput,
    LayerSpec,
    TreeSource,
    build_image,
    open_image,
    verify_image,
    write_archives,
    write_docker_archive,
    write_image_outputs,
    write_oci_archive,
)
from sparkflake.oci import archive as archive_module
from sparkflake.oci.archive import combined_archive_allowed, docker_archive_manifest

COMBINED = "oci-archive+docker-archive"


def _spec(tree: Path, compression: str, repository: str = "localhost/combined-test") -> ImageSpec:
    return ImageSpec(
        layers=(
            LayerSpec(LayerInput(sources=(TreeSource(str(tree)),)), "tree"),
            LayerSpec(
                LayerInput(files=(GeneratedFile("/etc/generated.conf", b"generated=1\n", 0o600),)),
                "generated",
            ),
        ),
        compression=Compression(compression),
        repository=repository,
        tag="v1",
    )


def _make_tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (tree / "usr" / "bin" / "tool").chmod(0o755)
    (tree / "data.bin").write_bytes(hashlib.sha256(b"seed").digest() * 4000)
    return tree


@pytest.fixture(scope="module")
def gzip_image(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("combined")
    tree = _make_tree(root)
    image = build_image(_spec(tree, "gzip"), BlobStore(root / "store"))
    outputs = write_image_outputs(image, root / "out")
    return {"root": root, "tree": tree, "image": image, "outputs": outputs}


@pytest.fixture(scope="module")
def zstd_image(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("combined-zstd")
    tree = _make_tree(root)
    image = build_image(_spec(tree, "zstd"), BlobStore(root / "store"))
    written = write_archives(image, root / "oci-archive.tar", root / "docker-archive.tar")
    return {"root": root, "image": image, "written": written}


def _member_names(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1]


def _expected_members(image) -> list[str]:
    """Blob-first: the layer blobs in layer order (each once), config and manifest blobs,
    then the documents (so the archive can be written while the layers are made)."""
    names = ["blobs", "blobs/sha256"]
    for digest in [layer.digest for layer in image.layers] + [image.config_digest, image.manifest_digest]:
        name = f"blobs/sha256/{_hex(digest)}"
        if name not in names:
            names.append(name)
    return names + ["index.json", "oci-layout", "manifest.json"]


# --- one file, two names ------------------------------------------------------------------


def test_image_build_writes_one_inode_for_both_archives(gzip_image):
    outputs, image = gzip_image["outputs"], gzip_image["image"]
    oci_stat, docker_stat = outputs.oci_archive.stat(), outputs.docker_archive.stat()
    assert (oci_stat.st_dev, oci_stat.st_ino) == (docker_stat.st_dev, docker_stat.st_ino)
    assert oci_stat.st_nlink == 2
    assert outputs.oci_archive.read_bytes() == outputs.docker_archive.read_bytes()
    assert _member_names(outputs.oci_archive) == _expected_members(image)
    with tarfile.open(outputs.oci_archive) as tar:
        docker_manifest = tar.extractfile("manifest.json").read()
    assert docker_manifest == docker_archive_manifest(image)
    assert docker_manifest == canonical_json_bytes(json.loads(docker_manifest))
    assert json.loads(docker_manifest) == [
        {
            "Config": f"blobs/sha256/{_hex(image.config_digest)}",
            "Layers": [f"blobs/sha256/{_hex(layer.digest)}" for layer in image.layers],
            "RepoTags": ["localhost/combined-test:v1"],
        }
    ]


def test_combined_archive_is_deterministic_and_rewritten_atomically(gzip_image, tmp_path):
    image, first = gzip_image["image"], gzip_image["outputs"].oci_archive
    written = write_archives(image, tmp_path / "a.tar", tmp_path / "b.tar")
    assert written["oci-archive"].read_bytes() == first.read_bytes()
    old_inode = written["oci-archive"].stat().st_ino
    again = write_archives(image, tmp_path / "a.tar", tmp_path / "b.tar")
    assert again["oci-archive"].stat().st_ino == again["docker-archive"].stat().st_ino != old_inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "b.tar"]  # no leftovers


def test_single_requests_and_single_writers_give_the_combined_form(gzip_image, tmp_path):
    image = gzip_image["image"]
    reference = gzip_image["outputs"].oci_archive.read_bytes()
    only_docker = write_archives(image, None, tmp_path / "d.tar")
    only_oci = write_archives(image, tmp_path / "o.tar", None)
    assert set(only_docker) == {"docker-archive"} and set(only_oci) == {"oci-archive"}
    assert only_docker["docker-archive"].read_bytes() == reference
    assert only_oci["oci-archive"].read_bytes() == reference
    assert write_oci_archive(image, tmp_path / "w1.tar").read_bytes() == reference
    assert write_docker_archive(image, tmp_path / "w2.tar").read_bytes() == reference
    assert write_archives(image, None, None) == {}
    same = write_archives(image, tmp_path / "same.tar", tmp_path / "same.tar")
    assert same["oci-archive"] == same["docker-archive"]
    assert same["oci-archive"].read_bytes() == reference


def test_link_failure_falls_back_to_a_copy(gzip_image, tmp_path, monkeypatch):
    image = gzip_image["image"]

    def cross_device(source, target, *args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(archive_module.os, "link", cross_device)
    written = write_archives(image, tmp_path / "o.tar", tmp_path / "d.tar")
    assert written["oci-archive"].stat().st_ino != written["docker-archive"].stat().st_ino
    assert written["docker-archive"].read_bytes() == written["oci-archive"].read_bytes()
    assert written["docker-archive"].read_bytes() == gzip_image["outputs"].oci_archive.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.tar", "o.tar"]


# --- read as both views -------------------------------------------------------------------


def test_inspect_reports_both_views(gzip_image, capsys):
    outputs, image = gzip_image["outputs"], gzip_image["image"]
    digests = json.loads(outputs.digests_file.read_text())
    assert cli_main(["image", "inspect", str(outputs.docker_archive), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == COMBINED
    assert report["digests"]["manifest"] == digests["manifest"] == image.manifest_digest
    assert report["digests"]["config"] == digests["config"]
    assert report["digests"]["index"] == digests["index"]
    assert report["repo_tags"] == ["localhost/combined-test:v1"]
    assert report["ref_name"] == "v1"
    assert [layer["digest"] for layer in report["layers"]] == [layer.digest for layer in image.layers]
    raw = run_tool(["skopeo", "inspect", "--raw", f"docker-archive:{outputs.docker_archive}"]).stdout
    assert report["digests"]["docker_archive_manifest"] == "sha256:" + hashlib.sha256(raw.encode()).hexdigest()
    assert cli_main(["image", "inspect", str(outputs.oci_archive)]) == 0
    human = capsys.readouterr().out
    assert f"format    {COMBINED}" in human and "docker_archive_manifest sha256:" in human


def test_skopeo_reads_both_views_with_our_digests(gzip_image):
    outputs, image = gzip_image["outputs"], gzip_image["image"]
    combined = outputs.oci_archive
    oci = json.loads(run_tool(["skopeo", "inspect", f"oci-archive:{combined}"]).stdout)
    assert oci["Digest"] == image.manifest_digest
    assert oci["Layers"] == [layer.digest for layer in image.layers]
    docker = json.loads(run_tool(["skopeo", "inspect", f"docker-archive:{combined}"]).stdout)
    assert docker["Layers"] == [layer.diff_id for layer in image.layers]
    assert docker["Architecture"] == "arm64" and docker["Os"] == "linux"
    for transport in ("oci-archive", "docker-archive"):
        config = run_tool(["skopeo", "inspect", "--config", "--raw", f"{transport}:{combined}"]).stdout
        assert "sha256:" + hashlib.sha256(config.encode()).hexdigest() == image.config_digest


def test_podman_loads_the_combined_file_with_our_image_id(gzip_image, podman_store: PodmanStore):  # noqa: F811
    outputs, image = gzip_image["outputs"], gzip_image["image"]
    # `podman load` takes the OCI view of the file (it tries oci-archive first) ...
    assert podman_store.load(outputs.docker_archive) == image.config_digest
    # ... and the docker-archive transport reads the docker view, named by RepoTags
    podman_store.run("pull", f"docker-archive:{outputs.docker_archive}")
    assert podman_store.image_id("localhost/combined-test:v1") == image.config_digest


def test_umoci_unpacks_the_extracted_combined_archive(gzip_image, tmp_path):
    layout = tmp_path / "layout"
    with tarfile.open(gzip_image["outputs"].oci_archive) as tar:
        tar.extractall(layout)  # our own archive: plain members under blobs/ only
    bundle = tmp_path / "bundle"
    run_tool(["umoci", "unpack", "--image", f"{layout}:v1", str(bundle)])
    rootfs = bundle / "rootfs"
    tree = gzip_image["tree"]
    assert (rootfs / "data.bin").read_bytes() == (tree / "data.bin").read_bytes()
    assert (rootfs / "usr" / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert (rootfs / "etc" / "generated.conf").read_bytes() == b"generated=1\n"


# --- zstd: two separate archives ----------------------------------------------------------


def test_zstd_image_gets_two_separate_archives(zstd_image, podman_store: PodmanStore):  # noqa: F811
    image, written = zstd_image["image"], zstd_image["written"]
    assert not combined_archive_allowed(image)
    oci_path, docker_path = written["oci-archive"], written["docker-archive"]
    assert oci_path.stat().st_ino != docker_path.stat().st_ino
    oci_members = _member_names(oci_path)
    assert "manifest.json" not in oci_members and oci_members[:2] == ["oci-layout", "index.json"]
    docker_members = _member_names(docker_path)
    assert "oci-layout" not in docker_members
    assert docker_members == [
        "manifest.json",
        f"{_hex(image.config_digest)}.json",
        *[f"{_hex(layer.diff_id)}.tar" for layer in image.layers],
    ]
    oci_report = verify_image(open_image(oci_path))
    docker_report = verify_image(open_image(docker_path))
    assert oci_report.format == "oci-archive" and docker_report.format == "docker-archive"
    assert oci_report.manifest_digest == image.manifest_digest
    assert oci_report.config_digest == docker_report.config_digest == image.config_digest
    assert [layer.compression for layer in docker_report.layers] == ["none", "none"]
    assert [layer.diff_id for layer in docker_report.layers] == [layer.diff_id for layer in image.layers]
    docker = json.loads(run_tool(["skopeo", "inspect", f"docker-archive:{docker_path}"]).stdout)
    assert docker["Layers"] == [layer.diff_id for layer in image.layers]
    assert podman_store.load(docker_path) == image.config_digest
    with pytest.raises(InputError, match="zstd"):
        archive_module.write_combined_archive(image, zstd_image["root"] / "refused.tar")


@pytest.mark.parametrize("damage", ["cut", "other-bytes"])
def test_a_damaged_zstd_blob_is_refused_for_the_docker_archive_and_nothing_enters_the_store(tmp_path, damage):
    """The docker-archive holds a zstd layer decompressed: a stored blob cut short (the stream
    ends inside a frame) or holding other bytes is refused by its diffID check, and no
    plain layer is left in the blob store under that diffID."""
    tree = _make_tree(tmp_path)
    store = BlobStore(tmp_path / "store")
    image = build_image(_spec(tree, "zstd"), store)
    layer = image.layers[0]
    blob = layer.blob_path.read_bytes()
    layer.blob_path.chmod(0o644)
    if damage == "cut":
        layer.blob_path.write_bytes(blob[: len(blob) - 3])
    else:
        import zstandard

        layer.blob_path.write_bytes(zstandard.ZstdCompressor().compress(b"other bytes"))
    with pytest.raises(CheckFailed) as refused:
        write_archives(image, tmp_path / "oci-archive.tar", tmp_path / "docker-archive.tar")
    assert refused.value.check_id == "oci.layer-diff-id"
    assert f"expected diffID {layer.diff_id}" in refused.value.message
    assert store.verified(layer.diff_id, layer.uncompressed_size) is None
    assert not list(store.blob_dir.glob(".incoming.*"))


# --- a combined archive whose two views disagree --------------------------------------------


def _with_docker_manifest(source: Path, target: Path, docker_manifest: object) -> None:
    content = json.dumps(docker_manifest).encode()
    with tarfile.open(source) as tar_in, tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar_out:
        for member in tar_in.getmembers():
            if member.name == "manifest.json":
                member.size = len(content)
                tar_out.addfile(member, io.BytesIO(content))
            elif member.isfile():
                tar_out.addfile(member, tar_in.extractfile(member))
            else:
                tar_out.addfile(member)


def _entry(image, config: str | None = None, layers: list[str] | None = None) -> dict:
    return {
        "Config": config or f"blobs/sha256/{_hex(image.config_digest)}",
        "RepoTags": [image.reference],
        "Layers": layers if layers is not None else [f"blobs/sha256/{_hex(layer.digest)}" for layer in image.layers],
    }


def test_views_that_disagree_are_refused_naming_the_members(gzip_image, tmp_path, capsys):
    image, source = gzip_image["image"], gzip_image["outputs"].oci_archive
    first, second = (f"blobs/sha256/{_hex(layer.digest)}" for layer in image.layers)
    manifest_blob = f"blobs/sha256/{_hex(image.manifest_digest)}"
    cases = {
        "other-layer": ([_entry(image, layers=[first, first])], "[oci.combined-layers]", [second, first]),
        "swapped": ([_entry(image, layers=[second, first])], "[oci.combined-layers]", [second, first]),
        "one-missing": ([_entry(image, layers=[first])], "[oci.combined-layers]", [second, "(none)"]),
        "legacy-name": ([_entry(image, layers=[first, "layer.tar"])], "[oci.combined-layers]", ["layer.tar"]),
        "other-config": ([_entry(image, config=manifest_blob)], "[oci.combined-config]", [manifest_blob]),
    }
    for name, (docker_manifest, check_id, members) in cases.items():
        broken = tmp_path / f"{name}.tar"
        _with_docker_manifest(source, broken, docker_manifest)
        code = cli_main(["image", "inspect", str(broken)])
        err = capsys.readouterr().err
        assert code == 1, (name, err)
        assert check_id in err and "manifest.json" in err, (name, err)
        assert all(member in err for member in members), (name, err)
        with pytest.raises(CheckFailed):
            verify_image(open_image(broken), verify_layers=False)


def test_docker_save_with_several_images_uses_the_entry_of_the_oci_image(gzip_image, tmp_path):
    image, source = gzip_image["image"], gzip_image["outputs"].oci_archive
    other = {"Config": "blobs/sha256/" + "a" * 64, "RepoTags": ["other:1"], "Layers": []}
    several = tmp_path / "several.tar"
    _with_docker_manifest(source, several, [other, _entry(image)])
    report = verify_image(open_image(several))
    assert report.format == COMBINED and report.repo_tags == (image.reference,)
    assert report.manifest_digest == image.manifest_digest


@pytest.mark.parametrize(
    ("docker_manifest", "message"),
    [
        ({"Config": "x"}, "expected a non-empty list"),
        ([], "expected a non-empty list"),
        ([{"Config": 3, "Layers": []}], "Config: expected a file name"),
        ([{"Config": "c", "Layers": "l"}], "Layers: expected a list of file names"),
    ],
)
def test_malformed_docker_manifest_in_a_combined_archive_exit_2(gzip_image, tmp_path, capsys, docker_manifest, message):
    broken = tmp_path / "malformed.tar"
    _with_docker_manifest(gzip_image["outputs"].oci_archive, broken, docker_manifest)
    assert cli_main(["image", "inspect", str(broken)]) == 2
    err = capsys.readouterr().err
    assert message in err and "manifest.json" in err


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=80),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    document=st.one_of(
        _JSON,
        st.builds(
            lambda config, layers, tags: [{"Config": config, "Layers": layers, "RepoTags": tags}],
            st.one_of(st.text(max_size=80), _JSON),
            st.one_of(st.lists(st.text(max_size=80), max_size=3), _JSON),
            st.one_of(st.lists(st.text(max_size=20), max_size=2), _JSON),
        ),
    )
)
def test_fuzzed_docker_manifest_gives_only_clear_errors(gzip_image, document):
    image = gzip_image["image"]
    with tempfile.TemporaryDirectory() as scratch:
        broken = Path(scratch) / "fuzzed.tar"
        _with_docker_manifest(gzip_image["outputs"].oci_archive, broken, document)
        try:
            report = verify_image(open_image(broken), verify_layers=False)
        except (InputError, CheckFailed):
            return
    # accepted only when the docker view names exactly the OCI blobs
    entries = [entry for entry in document if isinstance(entry, dict)]
    assert any(
        os.path.normpath(str(entry.get("Config"))) == f"blobs/sha256/{_hex(image.config_digest)}"
        and [os.path.normpath(name) for name in entry.get("Layers")]
        == [f"blobs/sha256/{_hex(layer.digest)}" for layer in image.layers]
        for entry in entries
    )
    assert report.format == COMBINED and report.config_digest == image.config_digest


# --- round trip of random small images ----------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    trees=st.lists(tree_specs(max_leaves=8), min_size=1, max_size=3),
    compression=st.sampled_from(["gzip", "none"]),
    tag=st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,10}", fullmatch=True),
)
def test_random_images_round_trip_through_the_combined_writer(trees, compression, tag):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        layers = []
        for position, tree in enumerate(trees):
            materialize_tree(root / f"t{position}", tree, TreeVariant(position, False, 0o022, 0))
            layers.append(LayerSpec(LayerInput(sources=(TreeSource(str(root / f"t{position}")),)), f"l{position}"))
        spec = ImageSpec(layers=tuple(layers), compression=Compression(compression), tag=tag)
        image = build_image(spec, BlobStore(root / "store"))
        written = write_archives(image, root / "o.tar", root / "d.tar")
        assert written["oci-archive"].stat().st_ino == written["docker-archive"].stat().st_ino
        assert _member_names(written["oci-archive"]) == _expected_members(image)
        reader = open_image(written["docker-archive"])
        report = verify_image(reader)
        assert report.format == COMBINED
        assert report.manifest_digest == image.manifest_digest
        assert report.index_digest == image.index_digest
        assert report.config_digest == image.config_digest
        assert report.chain_id == image.chain_id
        assert report.ref_name == tag and report.repo_tags == (image.reference,)
        assert [(layer.digest, layer.diff_id, layer.size) for layer in report.layers] == [
            (layer.digest, layer.diff_id, layer.size) for layer in image.layers
        ]
        assert reader.docker_view is not None
        assert reader.docker_view.layer_names == tuple(ref.name for ref in reader.layer_refs)


# --- written while the layers are made ----------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=4),
    repeat=st.booleans(),
    handed=st.integers(min_value=0, max_value=5),
)
def test_streamed_archive_equals_the_archive_written_at_the_end(tmp_path_factory, contents, repeat, handed):
    """CombinedArchiveWriter, fed the first ``handed`` layers as they are made (the
    compose build hands over the lower layers only), gives byte for byte what
    write_combined_archive gives for the finished image (repeated layers included),
    and writes the archive once: finish adds the layers not handed over."""
    from sparkflake.oci import archive as archive_module
    from sparkflake.oci.archive import CombinedArchiveWriter

    root = tmp_path_factory.mktemp("stream")
    layers = [
        LayerSpec(LayerInput(files=(GeneratedFile(f"/f{i}", content, 0o644),)), f"layer {i}")
        for i, content in enumerate(contents)
    ]
    if repeat:
        layers.append(layers[0])
    spec = ImageSpec(layers=tuple(layers), compression=Compression("gzip"), tag="t")
    writer = CombinedArchiveWriter(root / "streamed.tar", spec.source_date_epoch)
    made = []

    def on_layer(layer):
        made.append(layer)
        if len(made) <= handed:
            writer.add_layer(layer)

    image = build_image(spec, BlobStore(root / "store"), on_layer=on_layer)
    reference_writer = archive_module.write_combined_archive
    rewrites = []
    archive_module.write_combined_archive = lambda *args: rewrites.append(args) or reference_writer(*args)
    try:
        streamed = writer.finish(image)
    finally:
        archive_module.write_combined_archive = reference_writer
    assert rewrites == []
    reference = _documented_combined_archive(image, root / "reference.tar")
    assert streamed.read_bytes() == reference.read_bytes()
    assert sorted(p.name for p in root.iterdir()) == ["reference.tar", "store", "streamed.tar"]


def _documented_combined_archive(image, out):
    """The combined archive written member by member in the documented order (blobs/,
    blobs/sha256/, each layer blob once in layer order, config, manifest, index.json,
    oci-layout, manifest.json) with the plain tar writer: the reference the streaming
    writer is held to."""
    from sparkflake.core.atomic_write import atomic_stream
    from sparkflake.oci.archive import docker_archive_manifest
    from sparkflake.oci.layout import OCI_LAYOUT_BYTES
    from sparkflake.oci.tar_stream import EntryKind, TarEntry, write_tar_file

    def blob(digest):
        return "blobs/sha256/" + digest.split(":", 1)[1]

    def data(path, content):
        return TarEntry(path, EntryKind.FILE, 0o644, size=len(content), content=content)

    entries = [TarEntry("blobs", EntryKind.DIRECTORY, 0o755), TarEntry("blobs/sha256", EntryKind.DIRECTORY, 0o755)]
    seen = set()
    for layer in image.layers:
        if layer.digest not in seen:
            seen.add(layer.digest)
            entries.append(TarEntry(blob(layer.digest), EntryKind.FILE, 0o644, size=layer.size, source=str(layer.blob_path)))
    entries += [
        data(blob(image.config_digest), image.config_bytes),
        data(blob(image.manifest_digest), image.manifest_bytes),
        data("index.json", image.index_bytes),
        data("oci-layout", OCI_LAYOUT_BYTES),
        data("manifest.json", docker_archive_manifest(image)),
    ]
    with atomic_stream(out) as sink:
        write_tar_file(entries, sink, image.source_date_epoch)
    return out


def test_streamed_archive_abort_and_wrong_layers(tmp_path, gzip_image):
    """An aborted stream leaves the previous archive and no partial file; a stream fed
    other layers than the image has is written again from the image (same bytes)."""
    from sparkflake.oci.archive import CombinedArchiveWriter, write_combined_archive

    image = gzip_image["image"]
    target = tmp_path / "oci-archive.tar"
    target.write_bytes(b"previous")
    writer = CombinedArchiveWriter(target, image.source_date_epoch)
    writer.add_layer(image.layers[0])
    writer.abort()
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oci-archive.tar"]
    writer = CombinedArchiveWriter(target, image.source_date_epoch)
    writer.add_layer(image.layers[-1])  # wrong order / missing layer
    written = writer.finish(image)
    assert written.read_bytes() == write_combined_archive(image, tmp_path / "again.tar").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.tar", "oci-archive.tar"]


def test_an_archive_is_never_linked_over_a_fifo_or_a_directory(tmp_path):
    """Issue 28, class 1: the hard-link path of the archive writer replaces its target in
    one rename too, so it refuses what the atomic writers refuse."""
    source = tmp_path / "oci-archive.tar"
    source.write_bytes(b"archive bytes")
    os.mkfifo(tmp_path / "fifo.tar")
    (tmp_path / "directory.tar").mkdir()
    for name in ("fifo.tar", "directory.tar"):
        with pytest.raises(InputError, match=f"{name}: is a .*; an output is written to a regular file only"):
            archive_module.link_or_copy_atomic(source, tmp_path / name)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["directory.tar", "fifo.tar", "oci-archive.tar"]
    assert archive_module.link_or_copy_atomic(source, tmp_path / "copy.tar").samefile(source)
