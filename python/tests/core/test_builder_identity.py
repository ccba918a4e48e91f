"""`sparkflake version [--json]` prints the tool's version and the versions of the interpreter
and libraries that decide image bytes; the receipt beside the image records them as its
builder, the receipt inside the image (part of a layer) does not; `sparkflake load` refuses
an output that is not a build's with a message naming the file."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

from sparkflake import __version__
from sparkflake.workflows.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[3]


def sparkflake(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *argv], capture_output=True, text=True, check=False)


def test_version_json_names_every_byte_deciding_component() -> None:
    completed = sparkflake("version", "--json")
    assert completed.returncode == 0, completed.stderr
    versions = json.loads(completed.stdout)
    assert versions == {
        "sparkflake": __version__,
        "python": f"CPython {platform.python_version()}",
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
        "zstd": versions["zstd"],
        **{name: importlib.metadata.version(name) for name in ("deflate", "installer", "packaging", "zstandard")},
    }
    assert versions["zstd"].count(".") == 2
    plain = sparkflake("version")
    assert plain.returncode == 0
    assert sorted(line.split()[0] for line in plain.stdout.splitlines()) == sorted(versions)
    assert f"installer   {versions['installer']}" in plain.stdout


def test_the_receipt_beside_the_image_names_the_builder_and_the_one_inside_does_not(tmp_path: Path) -> None:
    result = build_profile(
        BuildRequest(profile=str(REPO / "profiles/fixture"), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True)
    )
    beside = json.loads((tmp_path / "out/receipt.json").read_text())
    assert beside["predicate"]["runDetails"]["builder"]["version"] == json.loads(sparkflake("version", "--json").stdout)
    recorded = next(
        item for item in result.full_receipt["predicate"]["runDetails"]["byproducts"]
        if item.get("uri") == "file:///etc/sparkflake/receipt.json"
    )
    receipt_bytes = _in_image_receipt(tmp_path / "out/oci")
    assert hashlib.sha256(receipt_bytes).hexdigest() == recorded["digest"]["sha256"]
    assert json.loads(receipt_bytes)["predicate"]["runDetails"]["builder"]["version"] == {"sparkflake": __version__}


def _in_image_receipt(layout: Path) -> bytes:
    index = json.loads((layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((layout / "blobs/sha256" / manifest_digest).read_text())
    top = manifest["layers"][-1]["digest"].split(":")[1]
    with tarfile.open(layout / "blobs/sha256" / top) as layer:
        member = layer.extractfile("etc/sparkflake/receipt.json")
        assert member is not None
        return member.read()


def test_load_refuses_an_output_without_digests_or_archive(tmp_path: Path) -> None:
    completed = sparkflake("load", str(tmp_path))
    assert completed.returncode == 2
    assert f"sparkflake: error: {tmp_path}/digests.json: cannot read the digests.json of a build" in completed.stderr
    (tmp_path / "digests.json").write_text('{"config": "sha256:' + "0" * 64 + '"}')
    completed = sparkflake("load", str(tmp_path))
    assert completed.returncode == 2
    assert f"sparkflake: error: {tmp_path}: no docker-archive.tar or oci-archive.tar" in completed.stderr
