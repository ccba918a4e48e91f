"""`build -o PATH` and `image build -o PATH` replace only an output sparkflake wrote (its
marker, nothing else in it); a regular file, a symlink, a directory it did not write or an
output an operator added to is refused with a clear error and left as it was; --force
replaces it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.core.atomic_write import OUTPUT_MARKER

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("image-build-spec")
    (root / "tree" / "etc").mkdir(parents=True)
    (root / "tree" / "etc" / "hello").write_text("hello\n")
    (root / "spec.json").write_text(json.dumps({"layers": [{"tree": "tree"}]}))
    return root / "spec.json"


@pytest.fixture(scope="module", params=["build", "image build"])
def command(request, spec) -> list[str]:
    if request.param == "build":
        return ["build", str(FIXTURE), "--offline"]
    return ["image", "build", str(spec)]


@pytest.fixture(scope="module")
def cache(tmp_path_factory, command) -> Path:
    return tmp_path_factory.mktemp("build-output-cache")


@pytest.fixture
def build(command):
    def run(out: Path, cache: Path, *extra: str) -> int:
        return main([*command, "-o", str(out), "--cache", str(cache), *extra])

    return run


def snapshot(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_regular_file_is_refused_and_kept(tmp_path, build, cache, capsys):
    out = tmp_path / "result"
    out.write_text("the operator's notes\n")
    assert build(out, cache) == 2
    err = capsys.readouterr().err
    assert f"{out}: exists and is not a directory sparkflake wrote (it is a regular file)" in err
    assert "--force" in err
    assert out.read_text() == "the operator's notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result"]  # no staging left


def test_a_foreign_directory_is_refused_and_kept(tmp_path, build, cache, capsys):
    out = tmp_path / "result"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work\n")
    assert build(out, cache) == 2
    assert f"{out}: a directory sparkflake did not write (no {OUTPUT_MARKER}; holds thesis.tex)" in capsys.readouterr().err
    assert snapshot(out) == {"thesis.tex": b"years of work\n"}


def test_a_symlink_is_refused(tmp_path, build, cache, capsys):
    target = tmp_path / "elsewhere"
    target.mkdir()
    out = tmp_path / "result"
    out.symlink_to(target)
    assert build(out, cache) == 2
    assert "(it is a symlink)" in capsys.readouterr().err
    assert out.is_symlink() and list(target.iterdir()) == []


def test_own_output_is_replaced_but_not_with_an_added_file(tmp_path, build, cache, capsys):
    out = tmp_path / "result"
    assert build(out, cache) == 0
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker["kind"] == "sparkflake.output-directory"
    assert set(marker["entries"]) == {p.name for p in out.iterdir()} - {OUTPUT_MARKER}
    assert build(out, cache) == 0  # a rebuild replaces what sparkflake wrote
    (out / "my-notes.txt").write_text("keep me\n")
    before = snapshot(out)
    assert build(out, cache) == 2
    assert "holds entries sparkflake did not write (my-notes.txt); they would be lost" in capsys.readouterr().err
    assert snapshot(out) == before


def test_an_output_with_files_added_inside_it_or_edited_is_refused(tmp_path, build, cache, capsys):
    """The marker lists every path written, not only the top-level entries: an operator's
    file inside OUT/oci, or a file of the output edited, is not lost to the next build."""
    out = tmp_path / "result"
    assert build(out, cache) == 0
    (out / "oci" / "NOTES.txt").write_text("keep me\n")
    (out / "oci" / "blobs" / "mine").mkdir()
    (out / "oci" / "blobs" / "mine" / "x").write_text("mine too\n")
    before = snapshot(out)
    assert build(out, cache) == 2
    assert (f"{out}: holds entries sparkflake did not write (oci/NOTES.txt, oci/blobs/mine); they would be lost; "
            "choose another -o, move it away, or pass --force to replace it") in capsys.readouterr().err
    assert snapshot(out) == before
    (out / "oci" / "NOTES.txt").unlink()
    (out / "oci" / "blobs" / "mine" / "x").unlink()
    (out / "oci" / "blobs" / "mine").rmdir()
    with open(out / "digests.json", "a") as edited:
        edited.write("\n")
    before = snapshot(out)
    assert build(out, cache) == 2
    assert f"{out}: holds files changed since sparkflake wrote them (digests.json: " in capsys.readouterr().err
    assert snapshot(out) == before
    assert build(out, cache, "--force") == 0


def test_force_replaces_anything(tmp_path, build, cache):
    out = tmp_path / "result"
    out.write_text("x")
    assert build(out, cache, "--force") == 0
    assert (out / "digests.json").is_file() and (out / OUTPUT_MARKER).is_file()


def test_an_empty_directory_is_used(tmp_path, build, cache):
    out = tmp_path / "result"
    out.mkdir()
    assert build(out, cache) == 0
    assert (out / OUTPUT_MARKER).is_file()
