"""The identity of an unpacked root (``runtime.rootfs.tree_identity``): the same tree gives
the same identity, whatever its names (non-UTF-8 bytes, newlines, quotes); any change a
reuse must notice (an entry added, removed or renamed, a mode, a size, a symlink's target
length) gives another."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.runtime.rootfs import tree_identity

pytestmark = pytest.mark.runtime

_names = st.one_of(st.text("abc.-_\n\"\\é", min_size=1, max_size=5),
                   st.binary(min_size=1, max_size=4).filter(lambda raw: b"/" not in raw and b"\0" not in raw)
                   .map(os.fsdecode)).filter(lambda name: name not in (".", ".."))
_trees = st.recursive(st.binary(max_size=20) | st.tuples(st.just("link"), st.sampled_from(["x", "../y", "/etc"])),
                      lambda inner: st.dictionaries(_names, inner, max_size=3), max_leaves=8)


def _write(path: Path, tree) -> list[Path]:
    """Make ``tree`` at ``path``; every path made, deepest first."""
    made = []
    if isinstance(tree, dict):
        path.mkdir()
        for name, value in tree.items():
            made += _write(path / name, value)
    elif isinstance(tree, tuple):
        path.symlink_to(tree[1])
    else:
        path.write_bytes(tree)
    return [*made, path]


@given(st.dictionaries(_names, _trees, max_size=4), st.data())
def test_the_same_tree_is_the_same_identity_and_any_change_another(tmp_path_factory, tree, data) -> None:
    root = tmp_path_factory.mktemp("root") / "r"
    made = _write(root, tree)
    identity = tree_identity(root)
    assert identity.startswith("sha256:") and len(identity) == 7 + 64
    assert tree_identity(root) == identity
    entries = [path for path in made if path != root]
    modes = [path for path in entries if not path.is_symlink()]
    change = data.draw(st.sampled_from(["add"] + (["remove", "rename", "grow"] if entries else [])
                                       + (["mode"] if modes else [])))
    if change == "add":
        (root / "added\udcff").write_bytes(b"")
    elif change == "mode":  # (the root's own mode is no part of it: the root is sparkflake's directory)
        victim = data.draw(st.sampled_from(modes))
        victim.chmod(0o700 if (victim.stat().st_mode & 0o777) != 0o700 else 0o755)
    else:
        victim = data.draw(st.sampled_from(entries))
        if change == "remove":
            if victim.is_dir() and not victim.is_symlink():
                for inner in [p for p in made if victim in p.parents]:
                    inner.unlink() if not inner.is_dir() or inner.is_symlink() else inner.rmdir()
                victim.rmdir()
            else:
                victim.unlink()
        elif change == "rename":
            victim.rename(victim.with_name(victim.name + "~"))
        elif victim.is_symlink():  # grow: a longer target is a larger symlink
            target = os.readlink(victim)
            victim.unlink()
            victim.symlink_to(target + "/z")
        elif victim.is_dir():
            (victim / "grown").write_bytes(b"")
        else:
            with open(victim, "ab") as handle:
                handle.write(b"+")
    assert tree_identity(root) != identity
