"""A file a later command adds to a build's OUT (`export`'s archive, the runtime check's
capabilities) on a full disk (a real tmpfs filled up): the marker that lists it is written
before the file is renamed in, so a marker that cannot be written leaves OUT as it was, and
the next build still replaces OUT; never OUT holding a file its marker does not list."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

import pytest
from fixtures.full_disk import fill, small_disk
from fixtures.launch import real_contract

from sparkflake.cli import main
from sparkflake.core.atomic_write import OUTPUT_MARKER
from sparkflake.launch.image_capabilities import record_capabilities
from sparkflake.oci.archive_export import export_archive
from sparkflake.runtime.capabilities import dumps

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
PAGE = 4096  # what tmpfs gives a file at a time


def _build(out: Path, cache: Path) -> None:
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0


def _files(root: Path) -> dict[str, bytes | None]:
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None for path in sorted(root.rglob("*"))}


def test_an_export_whose_marker_cannot_be_written_leaves_out_as_it_was(tmp_path):
    with small_disk(tmp_path / "disk", "16m") as disk:
        out = disk / "out"
        _build(out, tmp_path / "cache")
        before = _files(out)
        filled: list[Path] = []

        def disk_fills_meanwhile(_done: int, _total: int, _what: str) -> None:
            if not filled:  # while the archive written is verified, before it goes in
                filled.append(fill(disk))

        with pytest.raises(OSError) as raised:
            export_archive(out, "docker-archive", progress=disk_fills_meanwhile)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(out / OUTPUT_MARKER)
        assert _files(out) == before and sorted(p.name for p in disk.iterdir()) == ["filler", "out"]
        filled[0].unlink()
        _build(out, tmp_path / "cache")  # OUT is still the build's to replace
        assert export_archive(out, "docker-archive").path == out / "docker-archive.tar"
        _build(out, tmp_path / "cache")


def test_capabilities_whose_marker_cannot_be_written_leave_out_as_it_was(tmp_path):
    with small_disk(tmp_path / "disk", "16m") as disk:
        out, cache = disk / "out", tmp_path / "cache"
        _build(out, cache)
        digests = json.loads((out / "digests.json").read_text())
        mine = dataclasses.replace(real_contract("glm53-dflash7").capabilities, config_digest=digests["config"],
                                   manifest_digest=digests["manifest"])
        before = _files(out)
        filler = fill(disk, leave=-(-len(dumps(mine)) // PAGE) * PAGE)  # room for the file, none for the marker
        with pytest.raises(OSError) as raised:
            record_capabilities(mine, out, cache)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(out / OUTPUT_MARKER)
        assert _files(out) == before
        filler.unlink()
        _build(out, cache)  # OUT is still the build's to replace
        record_capabilities(mine, out, cache)
        _build(out, cache)


def test_a_build_whose_record_cannot_be_written_fails_with_out_as_it_was(tmp_path, monkeypatch, capsys):
    # the build's record in the cache (what `cache gc` keeps for it) is written before OUT is
    # swapped in: before, a full cache disk there failed the build (exit 2) with OUT already
    # holding the new image
    from sparkflake.workflows import build as build_workflow

    out = tmp_path / "out"
    with small_disk(tmp_path / "disk", "16m") as disk:
        cache = disk / "cache"
        _build(out, cache)
        before, identity = _files(out), os.stat(out).st_ino
        record = build_workflow.write_build_record

        def on_a_full_disk(root: Path, built) -> Path:
            filler = fill(disk)  # the layers and OUT's staging are written; the record is next
            try:
                return record(root, built)
            finally:
                filler.unlink()

        monkeypatch.setattr(build_workflow, "write_build_record", on_a_full_disk)
        capsys.readouterr()
        assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 2
        said = capsys.readouterr().err
        assert "No space left on device" in said and str(cache / "builds" / "fixture") in said, said
        assert os.stat(out).st_ino == identity and _files(out) == before  # not swapped in
        assert sorted(path.name for path in out.parent.iterdir()) == ["disk", "out"]  # no staging left
        monkeypatch.undo()
        _build(out, cache)  # with room, the same build replaces OUT
