"""`sparkflake assemble PROFILE -o DIR` replaces DIR/base and DIR/python only where
sparkflake wrote them (each tree's marker lists every path in it, unchanged): an
operator's directory of either name, or a tree an operator added to, is refused with the
path named, before either tree is assembled, and left as it was; --force replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.core.atomic_write import OUTPUT_MARKER

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
HINT = "choose another -o, move it away, or pass --force to replace it"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("assemble-output") / "cache"
    assert main(["fetch", str(FIXTURE), "--cache", str(root), "--from", str(FIXTURE / "inputs")]) == 0
    return str(root)


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink()}


def assemble(cache: str, out: Path, *extra: str) -> int:
    return main(["assemble", str(FIXTURE), "--cache", cache, "-o", str(out), *extra])


@pytest.mark.parametrize("name", ["base", "python"])
def test_an_operator_directory_is_refused_and_kept(tmp_path, cache, capsys, name):
    out = tmp_path / "dir"
    (out / name).mkdir(parents=True)
    (out / name / "thesis.tex").write_text("years of work\n")
    capsys.readouterr()
    assert assemble(cache, out) == 2
    err = capsys.readouterr().err
    assert f"{out / name}: a directory sparkflake did not write (no {OUTPUT_MARKER}; holds thesis.tex); {HINT}" in err
    assert sorted(p.name for p in out.iterdir()) == [name]  # the other tree was not assembled either
    assert tree(out / name) == {"thesis.tex": b"years of work\n"}
    assert assemble(cache, out, "--force") == 0
    assert not (out / name / "thesis.tex").exists() and (out / name / OUTPUT_MARKER).is_file()


def test_a_tree_sparkflake_wrote_is_replaced_but_not_with_an_added_file(tmp_path, cache, capsys):
    out = tmp_path / "dir"
    assert assemble(cache, out) == 0
    assert assemble(cache, out) == 0  # what sparkflake wrote alone: replaced
    (out / "python" / "opt" / "venv" / "notes.txt").write_text("keep me\n")
    before = tree(out)
    capsys.readouterr()
    assert assemble(cache, out, "--only", "python") == 2
    assert (f"{out / 'python'}: holds entries sparkflake did not write (opt/venv/notes.txt); they would be lost; "
            f"{HINT}") in capsys.readouterr().err
    assert tree(out) == before
    assert assemble(cache, out, "--only", "base") == 0  # the other tree is sparkflake's
