"""remove_tree on a chain of directories deeper than Python's recursion limit: Python 3.11's
rmtree recursed into a RecursionError traceback (an output replaced, a marker listing such a
chain); now a clear refusal naming the tree, which is left as it is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkflake.core.atomic_write import remove_tree
from sparkflake.core.errors import InputError


def _chain(root: Path, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):  # by descriptors: the path of the bottom is longer than PATH_MAX
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def test_a_tree_too_deep_for_rmtree_is_refused_by_name_and_left(tmp_path: Path) -> None:
    tree = tmp_path / "deep"
    tree.mkdir()
    _chain(tree, 1500)
    with pytest.raises(InputError) as refused:
        remove_tree(tree)
    assert refused.value.message.startswith(f"{tree}: a tree too deep to remove here")
    assert (tree / "d").is_dir()
    # the test's own cleanup (pytest's rmtree recurses too); GNU rm walks without recursion
    subprocess.run(["rm", "-rf", "--", str(tree)], check=True)
    assert not tree.exists()


def test_an_ordinary_tree_is_removed(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    os.chmod(tree / "a" / "b", 0o555)  # a package's read-only directory
    remove_tree(tree)
    assert not tree.exists()
