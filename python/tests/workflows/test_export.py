"""`sparkflake build` writes the OCI layout alone by default; `sparkflake export OUT --format
KIND` writes the archive from it on demand: the bytes a build with `--formats oci,KIND`
writes (gzip and zstd), verified against OUT/digests.json before it replaces the target, read
by skopeo and loaded by podman with image ID = config digest, audited like any archive;
an edited layout is refused and the previous target stays."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures.podman import Podman

from sparkflake.cli import main
from sparkflake.oci.archive_export import archive_space, recorded_digests
from sparkflake.oci.reader import open_image

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
ARCHIVES = ("oci-archive", "docker-archive")


def build(out: Path, cache: Path, *args: str) -> dict:
    assert main(["build", str(FIXTURE), "--offline", "--cache", str(cache), "-o", str(out), *args]) == 0
    return json.loads((out / "digests.json").read_text())


@pytest.fixture(scope="module", params=["gzip", "zstd"])
def outputs(request, tmp_path_factory) -> tuple[Path, Path, dict]:
    """A default build (layout alone) and one with both archives, same cache, same image."""
    base = tmp_path_factory.mktemp(f"export-{request.param}")
    cache = base / "cache"
    compression = ["--compression", request.param]
    digests = build(base / "layout", cache, *compression)
    with_archives = build(base / "archives", cache, *compression, "--formats", "oci,oci-archive,docker-archive")
    assert with_archives["manifest"] == digests["manifest"]
    return base / "layout", base / "archives", digests


def test_a_default_build_writes_the_layout_and_no_archive(outputs):
    layout_only, _, _ = outputs
    assert (layout_only / "oci" / "index.json").is_file() and (layout_only / "digests.json").is_file()
    assert not [path.name for path in layout_only.iterdir() if path.name.endswith(".tar")]


@pytest.mark.parametrize("kind", ARCHIVES)
def test_export_writes_the_bytes_a_build_with_that_format_writes(outputs, kind, capsys):
    layout_only, with_archives, digests = outputs
    capsys.readouterr()
    assert main(["export", str(layout_only), "--format", kind, "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    target = layout_only / f"{kind}.tar"
    assert exported["archive"] == str(target) and exported["manifest"] == digests["manifest"]
    assert exported["size"] == target.stat().st_size
    assert target.read_bytes() == (with_archives / f"{kind}.tar").read_bytes()
    if kind == "docker-archive" and digests["layers"][0]["media_type"].endswith("+zstd"):
        # no manifest, layers stored decompressed (docker loads no zstd): bound by its image ID
        expectation = ["--expect", f"{digests['config']}@config", "--expect", f"{digests['chain_id']}@chain-id"]
    else:
        expectation = ["--expect-file", str(layout_only / "digests.json")]
    assert main(["audit", f"{kind}:{target}", *expectation]) == 0
    # what the build wrote and the export added may both be replaced by the next build
    marker = json.loads((layout_only / ".sparkflake-output.json").read_text())
    assert f"{kind}.tar" in marker["entries"]
    target.unlink()


def test_an_exported_archive_is_read_by_skopeo_and_loaded_by_podman(outputs, tmp_path, capsys):
    layout_only, _, digests = outputs
    archive = tmp_path / "elsewhere" / "image.tar"
    assert main(["export", str(layout_only), "--format", "docker-archive", "-o", str(archive)]) == 0
    assert f"wrote {archive} (docker-archive" in capsys.readouterr().out
    assert not (layout_only / "docker-archive.tar").exists()
    assert sorted(os.listdir(archive.parent)) == ["image.tar"]  # no run directory left behind
    inspected = subprocess.run(["skopeo", "inspect", "--config", "--raw", f"docker-archive:{archive}"],
                               capture_output=True, check=True, timeout=120)
    assert f"sha256:{hashlib.sha256(inspected.stdout).hexdigest()}" == digests["config"]
    podman = Podman(tmp_path / "podman")
    try:
        loaded = podman("load", "-q", "-i", str(archive))
        assert loaded.returncode == 0, loaded.stderr
        image_id = podman("image", "inspect", "--format", "{{.Id}}", digests["reference"])
        assert f"sha256:{image_id.stdout.strip()}" == digests["config"]
    finally:
        podman.cleanup()


def test_an_edited_layout_is_refused_and_the_previous_archive_stays(outputs, tmp_path, capsys):
    layout_only, _, digests = outputs
    copy = tmp_path / "out"
    shutil.copytree(layout_only, copy)
    previous = copy / "docker-archive.tar"
    assert main(["export", str(copy), "--format", "docker-archive"]) == 0
    previous_bytes = previous.read_bytes()
    blob = copy / "oci" / "blobs" / "sha256" / digests["layers"][0]["digest"].split(":")[1]
    blob.chmod(0o644)
    content = bytearray(blob.read_bytes())
    content[len(content) // 2] ^= 1
    blob.write_bytes(bytes(content))
    capsys.readouterr()
    assert main(["export", str(copy), "--format", "docker-archive"]) == 1
    assert digests["layers"][0]["digest"] in capsys.readouterr().err
    assert previous.read_bytes() == previous_bytes
    assert sorted(path.name for path in copy.iterdir() if path.name.startswith(".docker-archive")) == []


def test_an_operator_file_or_symlink_at_the_archive_name_is_refused(outputs, tmp_path, capsys):
    """OUT/KIND.tar replaces only the archive sparkflake wrote there (OUT's marker lists
    it, unchanged): an operator's file of that name is kept, a symlink there is never
    written through, and an archive edited since it was exported is not replaced."""
    layout_only, _, _ = outputs
    copy = tmp_path / "out"
    shutil.copytree(layout_only, copy)
    theirs = copy / "docker-archive.tar"
    theirs.write_bytes(b"the operator's own archive")
    capsys.readouterr()
    assert main(["export", str(copy), "--format", "docker-archive"]) == 2
    err = capsys.readouterr().err
    # "did not write it", or "changed since" where an archive exported there earlier was removed
    assert f"sparkflake: error: {theirs}: " in err and "would be lost (move it away, or name another file with -o FILE)" in err
    assert theirs.read_bytes() == b"the operator's own archive"
    assert main(["export", str(copy), "--format", "docker-archive", "-o", str(theirs)]) == 2  # named, still in OUT
    assert f"sparkflake: error: {theirs}: " in capsys.readouterr().err
    assert theirs.read_bytes() == b"the operator's own archive"
    precious = tmp_path / "precious.tar"
    precious.write_bytes(b"elsewhere")
    link = copy / "oci-archive.tar"
    link.symlink_to(precious)
    assert main(["export", str(copy), "--format", "oci-archive"]) == 2
    assert f"{link}: is a symlink, not a file sparkflake wrote; it is not written over or through" in capsys.readouterr().err
    assert precious.read_bytes() == b"elsewhere" and link.is_symlink()
    assert sorted(path.name for path in copy.iterdir() if ".export." in path.name) == []
    link.unlink()
    assert main(["export", str(copy), "--format", "oci-archive"]) == 0
    assert main(["export", str(copy), "--format", "oci-archive"]) == 0  # its own archive: replaced
    with open(link, "ab") as edited:
        edited.write(b"\0" * 512)
    assert main(["export", str(copy), "--format", "oci-archive"]) == 2
    assert f"{link}: changed since sparkflake wrote it" in capsys.readouterr().err


def test_a_disk_without_room_for_the_archive_is_refused_before_anything_is_written(outputs, tmp_path, capsys):
    """A real small file system (tmpfs, its own statvfs): the export names the place, what
    it needs and what is free, exit 2, and writes nothing there."""
    layout_only, _, digests = outputs
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        assert main(["export", str(layout_only), "--format", "docker-archive", "-o", str(small / "image.tar")]) == 2
        err = capsys.readouterr().err
        assert f"{small}: not enough free disk space for the docker-archive (nothing was written): needs about " in err
        assert "MiB free" in err and list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)
    written = tmp_path / "room" / "image.tar"
    assert main(["export", str(layout_only), "--format", "docker-archive", "-o", str(written)]) == 0
    # the estimate bounds what was written, and by little (a zstd image's layers decompressed
    # twice: in the archive and in the scratch store)
    need = archive_space(open_image(layout_only / "oci"), "docker-archive", recorded_digests(layout_only).uncompressed_sizes)
    twice = digests["layers"][0]["media_type"].endswith("+zstd")
    assert written.stat().st_size <= need <= (2 if twice else 1) * written.stat().st_size + (1 << 18)


def test_bad_outputs_are_refused_with_the_file_named(outputs, tmp_path, capsys):
    layout_only, _, digests = outputs
    assert main(["export", str(tmp_path), "--format", "oci-archive"]) == 2
    assert f"{tmp_path}: no OCI layout oci/" in capsys.readouterr().err
    copy = tmp_path / "out"
    shutil.copytree(layout_only, copy)
    (copy / "digests.json").write_text(json.dumps({**digests, "manifest": "sha256:" + "0" * 64}))
    assert main(["export", str(copy), "--format", "oci-archive"]) == 1
    assert f"{copy / 'digests.json'} records sha256:{'0' * 64}" in capsys.readouterr().err
    (copy / "digests.json").write_text(json.dumps({**digests, "layers": digests["layers"][1:]}))
    assert main(["export", str(copy), "--format", "oci-archive"]) == 2
    assert f"{copy / 'oci'}: holds {len(digests['layers'])} layers, its digests.json records" in capsys.readouterr().err
    (copy / "digests.json").write_text(json.dumps({**digests, "layers": [{"uncompressed_size": "9"}]}))
    assert main(["export", str(copy), "--format", "oci-archive"]) == 2
    assert "layers[0].uncompressed_size: expected a non-negative integer, got '9'" in capsys.readouterr().err
    (copy / "digests.json").write_text("[]")
    assert main(["export", str(copy), "--format", "oci-archive"]) == 2
    assert f"{copy / 'digests.json'}: expected a JSON object" in capsys.readouterr().err
    (copy / "digests.json").write_text(json.dumps(digests))
    copy.chmod(0o555)  # as a Nix store path is: never written into, even by root
    assert main(["export", str(copy), "--format", "oci-archive"]) == 2
    assert f"{copy}: is read-only (a Nix store path?); name where the archive goes: -o FILE" in capsys.readouterr().err
    copy.chmod(0o755)
    assert main(["export", str(layout_only), "--format", "oci-archive", "-o", "/dev/null"]) == 2
    assert "/dev/null: is a character device" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["export", str(layout_only), "--format", "tarball"])
    assert usage.value.code == 2 and "invalid choice: 'tarball'" in capsys.readouterr().err
