"""`build` checks free space before it writes: on a small tmpfs (a real file system with a
real statvfs) it refuses with exit 2 naming the place, what it needs and what is free, and
leaves the file system as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkflake.cli import build_parser, main
from sparkflake.compose.composition import load_composition
from sparkflake.housekeeping.build_record import last_build_of
from sparkflake.housekeeping.free_space import OUTPUT_DOCUMENTS, estimate_build_space
from sparkflake.workflows.build import BuildRequest

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def _listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_an_output_on_a_full_disk_is_refused_before_anything_is_written(small_disk, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(tmp_path / "first"), "--cache", str(cache)]) == 0
    capsys.readouterr()
    assert main(["build", str(FIXTURE), "--offline", "-o", str(small_disk / "out"), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "not enough free disk space for this build (nothing was written)" in err
    assert f"{small_disk}: needs about " in err and f"the image in {small_disk / 'out'}" in err
    assert "MiB free" in err and "cache gc --apply" in err
    assert _listing(small_disk) == []


def test_a_cold_cache_on_a_full_disk_is_refused_naming_the_cache(small_disk, tmp_path, capsys):
    cache = small_disk / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(tmp_path / "out"), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert f"{cache} and {cache / 'oci'}: needs about " in err
    assert "inputs to download" in err and "assembled trees" in err and "layer store" in err
    assert _listing(small_disk) == [] and not (tmp_path / "out").exists()


def test_the_output_needs_the_layout_s_bytes_only_on_another_file_system(small_disk, tmp_path):
    """On the layer store's file system the layout's blobs are the store's (hard links):
    the output needs the archive's bytes once when one is asked for, none by default;
    elsewhere the layout is a copy, once more."""
    cache = tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(tmp_path / "first"), "--cache", str(cache)]) == 0
    composition = load_composition(str(FIXTURE))
    last = last_build_of(cache, composition.profile.name)
    assert last is not None
    image = sum((cache / "oci" / "blobs" / "sha256" / digest.removeprefix("sha256:")).stat().st_size
                for digest in last.blobs)

    def output_need(out: Path, formats: tuple[str, ...]) -> int:
        needs = estimate_build_space(composition, cache, cache / "oci", out, formats, last)
        return dict(part for need in needs for part in need.parts)[f"the image in {out}"]

    assert output_need(tmp_path / "out", ("oci", "oci-archive", "docker-archive")) == image + OUTPUT_DOCUMENTS
    assert output_need(tmp_path / "out", ("oci",)) == OUTPUT_DOCUMENTS
    assert output_need(small_disk / "out", ("oci", "oci-archive", "docker-archive")) == 2 * image + OUTPUT_DOCUMENTS
    assert output_need(small_disk / "out", ("oci",)) == image + OUTPUT_DOCUMENTS
    # what `build` writes unless asked (the CLI's default, the pipeline's): the layout alone,
    # so beside the layer store the output needs its documents only
    default = tuple(build_parser("build").parse_args(["build", "p"]).formats.split(","))
    assert default == BuildRequest("p").formats == ("oci",)
    assert output_need(tmp_path / "out", default) == OUTPUT_DOCUMENTS
