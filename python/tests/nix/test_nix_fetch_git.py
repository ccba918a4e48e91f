"""nix/fetch-git.nix: a git lock record becomes Nix's builtins.fetchGit at the locked commit
(fetched by id, bound by the NAR hash when pinned), and sparkflake admits the store path
with --from only when its git tree id is the lock's tree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fixtures.git import make_repository

from sparkflake.core.errors import InputError
from sparkflake.core.tree_digest import nar_hash
from sparkflake.fetch.git import GitCache, fetch_git, fetch_git_inputs
from sparkflake.lock.pins import GitPin

REPO = Path(__file__).resolve().parents[3]
FETCH_GIT = REPO / "nix" / "fetch-git.nix"
NIX_ENV = {**os.environ, "NIX_CONFIG": "experimental-features = nix-command flakes\nsubstituters ="}


def nix_fetch_git(record: dict) -> subprocess.CompletedProcess[str]:
    """The store path of the fetch; the record reaches Nix as JSON data (--argstr), not code."""
    return subprocess.run(
        ["nix-instantiate", "--eval", "--read-write-mode", "--json", "--argstr", "record", json.dumps(record),
         "--expr", f"{{ record }}: (import {FETCH_GIT} (builtins.fromJSON record)).outPath"],
        capture_output=True, text=True, check=False, env=NIX_ENV,
    )


def test_fetch_git_gives_the_commit_and_sparkflake_binds_it_by_tree(tmp_path: Path) -> None:
    served, [(rev, tree), (_rev2, _tree2)] = make_repository(
        tmp_path / "origin", [{"pkg/__init__.py": b"A = 1\n", "bin/x": ("x", b"#!/bin/sh\n")}, {"pkg/b.py": b"B\n"}]
    )
    record = {"urls": [served.as_uri()], "rev": rev, "tree": tree}
    completed = nix_fetch_git(record)
    assert completed.returncode == 0, completed.stderr
    store_path = Path(json.loads(completed.stdout))
    assert not (store_path / ".git").exists() and not (store_path / "pkg" / "b.py").exists()

    # our fetch of the same commit has the NAR hash Nix gives the store path, and Nix
    # accepts that hash as the pin (and refuses another)
    reference = GitCache(tmp_path / "reference")
    fetch_git(GitPin(name="src", urls=(served.as_uri(),), rev=rev, tree=tree), reference)
    sri = nar_hash(reference.tree_path(tree)).sri
    assert nar_hash(store_path).sri == sri
    assert nix_fetch_git({**record, "nar_hash": sri}).returncode == 0
    refused = nix_fetch_git({**record, "nar_hash": "sha256-" + "A" * 43 + "="})
    assert refused.returncode != 0 and "NAR hash mismatch" in refused.stderr

    # the store path (read-only, no .git) is taken with --from by its tree id
    links = tmp_path / "inputs"
    links.mkdir()
    (links / f"git-{tree}").symlink_to(store_path)
    cache = GitCache(tmp_path / "cache")
    pin = GitPin(name="src", urls=("https://git.sparkflake.invalid/src.git",), rev=rev, tree=tree, nar_hash=sri)
    outcomes = fetch_git_inputs([pin], cache, local_repositories=[links], offline=True)
    assert [o.source for o in outcomes] == ["import"]
    assert cache.verified_tree(pin) == cache.tree_path(tree)
    other = GitPin(name="other", urls=pin.urls, rev="1" * 40, tree="2" * 40)
    with pytest.raises(InputError, match="other: git commit"):
        fetch_git_inputs([other], cache, local_repositories=[links], offline=True)


def test_a_rev_the_repository_lacks_is_refused_by_nix(tmp_path: Path) -> None:
    served, [(_rev, tree)] = make_repository(tmp_path / "origin", [{"a": b"a\n"}])
    completed = nix_fetch_git({"urls": [served.as_uri()], "rev": "0123456789abcdef0123456789abcdef01234567", "tree": tree})
    assert completed.returncode != 0
