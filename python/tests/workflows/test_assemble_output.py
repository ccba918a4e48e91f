"""`sparkflake assemble PROFILE -o DIR` never replaces what stands at DIR/base or DIR/python
without --force: an operator's directory of either name is refused with the path named,
before either tree is assembled, and left as it was. A tree is a layer's content byte for
byte, so it carries no marker of who wrote it: a tree sparkflake wrote is replaced with
--force too."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.core.atomic_write import OUTPUT_MARKER

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
HINT = "assemble writes a new tree there and would replace it; choose another -o, move it away, or pass --force"


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
    assert f"{out / name}: exists (holds thesis.tex); {HINT}" in err
    assert sorted(p.name for p in out.iterdir()) == [name]  # the other tree was not assembled either
    assert tree(out / name) == {"thesis.tex": b"years of work\n"}
    assert assemble(cache, out, "--force") == 0
    assert not (out / name / "thesis.tex").exists()


def test_a_tree_holds_only_what_its_layer_gets_and_is_replaced_only_with_force(tmp_path, cache, capsys):
    out = tmp_path / "dir"
    assert assemble(cache, out) == 0
    assert not (out / "base" / OUTPUT_MARKER).exists() and not (out / "python" / OUTPUT_MARKER).exists()
    before = tree(out)
    capsys.readouterr()
    assert assemble(cache, out, "--only", "python") == 2
    assert f"{out / 'python'}: exists (holds opt); {HINT}" in capsys.readouterr().err
    assert tree(out) == before
    assert assemble(cache, out, "--force") == 0
    assert tree(out) == before  # the same inputs, the same trees
