"""Git inputs fetched by commit and bound by tree (sparkflake.fetch.git), against real git:
repositories made here, served by `git daemon`, smart HTTP (`git http-backend`), dumb HTTP
and file:// on this machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from fixtures.git import git, git_daemon, http_server, make_repository
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.cli import main
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.core.tree_digest import git_tree_id, nar_hash
from sparkflake.fetch.git import (
    GitCache,
    commit_tree,
    fetch_git,
    fetch_git_inputs,
    git_object_id,
    parse_ls_tree,
)
from sparkflake.lock.lock_file import write_lock
from sparkflake.lock.pins import GitPin, Lock, Target

FILES_1 = {
    "pkg/__init__.py": b"VERSION = 1\n",
    "pkg/data/table.json": b'{"a": 1}\n',
    "bin/run": ("x", b"#!/bin/sh\necho run\n"),
    "pkg/alias.py": ("l", b"__init__.py"),
    "README": b"fixture\n",
}
FILES_2 = {"pkg/__init__.py": b"VERSION = 2\n", "pkg/new.py": b"NEW = True\n"}


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    """A bare repository with two commits; the first is not a branch tip."""
    return make_repository(tmp_path / "origin", [FILES_1, FILES_2])


def pin_for(rev: str, tree: str, *urls: str, name: str = "src", **extra: str) -> GitPin:
    return GitPin(name=name, urls=urls, rev=rev, tree=tree, **extra)


def cache_state(root: Path) -> list[str]:
    """Everything a fetch may leave behind, besides its advisory lock files."""
    return sorted(
        str(path.relative_to(root)) for path in root.rglob("*") if "locks" not in path.relative_to(root).parts
    )


def assert_checkout(path: Path, tree: str) -> None:
    assert git_tree_id(path) == tree
    assert (path / "pkg/__init__.py").read_bytes() == b"VERSION = 1\n"
    assert os.readlink(path / "pkg/alias.py") == "__init__.py"
    assert os.stat(path / "bin/run").st_mode & 0o777 == 0o755
    assert os.stat(path / "README").st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- transports


def test_fetch_by_commit_over_file_url(tmp_path: Path, repository) -> None:
    served, [(rev, tree), _] = repository
    cache = GitCache(tmp_path / "cache")
    outcome = fetch_git(pin_for(rev, tree, served.as_uri()), cache)
    assert (outcome.source, outcome.url, outcome.files) == ("fetch", served.as_uri(), 5)
    assert_checkout(cache.tree_path(tree), tree)
    assert cache.commit_path(rev).read_text() == f"tree {tree}\n"
    assert not any((tmp_path / "cache" / "partial").iterdir())
    again = fetch_git(pin_for(rev, tree, served.as_uri()), cache)
    assert again.source == "cache"


def test_fetch_by_commit_over_git_daemon(tmp_path: Path, repository) -> None:
    served, [(rev, tree), (rev2, tree2)] = repository
    cache = GitCache(tmp_path / "cache")
    with git_daemon(served.parent) as base:
        url = f"{base}/served.git"
        assert fetch_git(pin_for(rev, tree, url), cache).url == url  # not a branch tip
        assert fetch_git(pin_for(rev2, tree2, url, name="tip"), cache).source == "fetch"
    assert_checkout(cache.tree_path(tree), tree)
    assert (cache.tree_path(tree2) / "pkg/new.py").read_bytes() == b"NEW = True\n"


@pytest.mark.parametrize("smart", [True, False], ids=["smart-http", "dumb-http"])
def test_fetch_by_commit_over_http(tmp_path: Path, repository, smart: bool) -> None:
    """Dumb HTTP serves no shallow fetch: there the commit is fetched in full, checked the same."""
    served, [(rev, tree), _] = repository
    git("update-server-info", cwd=served)
    cache = GitCache(tmp_path / "cache")
    with http_server(served.parent, smart=smart) as base:
        outcome = fetch_git(pin_for(rev, tree, f"{base}/served.git"), cache)
    assert outcome.source == "fetch"
    assert_checkout(cache.tree_path(tree), tree)


def test_mirrors_are_tried_in_order_and_each_failure_is_named(tmp_path: Path, repository) -> None:
    served, [(rev, tree), _] = repository
    cache = GitCache(tmp_path / "cache")
    absent = (tmp_path / "absent.git").as_uri()
    outcome = fetch_git(pin_for(rev, tree, absent, served.as_uri()), cache)
    assert outcome.url == served.as_uri()


def test_nar_hash_is_checked_when_pinned(tmp_path: Path, repository) -> None:
    served, [(rev, tree), _] = repository
    reference = tmp_path / "reference"
    fetch_git(pin_for(rev, tree, served.as_uri()), GitCache(reference))
    sri = nar_hash(GitCache(reference).tree_path(tree)).sri
    assert fetch_git(pin_for(rev, tree, served.as_uri(), nar_hash=sri), GitCache(tmp_path / "a")).source == "fetch"
    other = "sha256-" + "A" * 43 + "="
    with pytest.raises(CheckFailed, match="NAR hash"):
        fetch_git(pin_for(rev, tree, served.as_uri(), nar_hash=other), GitCache(tmp_path / "b"))
    assert cache_state(tmp_path / "b") == ["partial"]


# --------------------------------------------------------------------------- bad input


def test_wrong_tree_is_refused_naming_both_and_the_cache_is_untouched(tmp_path: Path, repository) -> None:
    served, [(rev, tree), (_rev2, tree2)] = repository
    with git_daemon(served.parent) as base:
        with pytest.raises(CheckFailed) as error:
            fetch_git(pin_for(rev, tree2, f"{base}/served.git"), GitCache(tmp_path / "cache"))
    assert error.value.check_id == "fetch-tree"
    assert f"names tree {tree}, the lock says tree {tree2}" in str(error.value)
    assert cache_state(tmp_path / "cache") == ["partial"]


def test_a_rev_that_does_not_exist_names_each_url_and_how_to_supply_it(tmp_path: Path, repository) -> None:
    served, [(_rev, tree), _] = repository
    git("update-server-info", cwd=served)
    missing = "0123456789abcdef0123456789abcdef01234567"
    with git_daemon(served.parent) as daemon, http_server(served.parent, smart=True) as smart:
        urls = (f"{daemon}/served.git", f"{smart}/served.git", served.as_uri())
        with pytest.raises(InputError) as error:
            fetch_git_inputs([pin_for(missing, tree, *urls, name="vllm-src")], GitCache(tmp_path / "cache"))
    message = error.value.message
    assert message.startswith("1 git input(s) missing:\n")
    assert f"vllm-src: git commit {missing} (tree {tree}) could not be fetched" in message
    for url in urls:
        assert f"tried {url}: " in message
    assert "not our ref" in message
    assert "--git-mirror vllm-src=URL" in message and "--from DIR" in message
    assert cache_state(tmp_path / "cache") == ["partial"]


def test_a_repository_answering_with_another_commit_is_refused(tmp_path: Path, repository) -> None:
    """A dumb-HTTP server whose loose object for REV holds another commit's bytes."""
    served, [(rev, tree), (rev2, _tree2)] = repository
    loose = tmp_path / "loose.git"
    git("init", "-q", "--bare", str(loose))
    git("--git-dir", str(served), "push", "-q", str(loose), "main:main")
    git("update-server-info", cwd=loose)

    def object_path(object_id: str) -> Path:
        return loose / "objects" / object_id[:2] / object_id[2:]

    # unpack everything loose so each object is one file the server hands out by name
    for pack in (loose / "objects" / "pack").glob("*.pack"):
        moved = pack.with_suffix(".moved")
        pack.rename(moved)
        pack.with_suffix(".idx").unlink()
        git("--git-dir", str(loose), "unpack-objects", "-q", input=moved.read_bytes())
        moved.unlink()
    git("update-server-info", cwd=loose)
    body = git("--git-dir", str(loose), "cat-file", "commit", rev2).encode() + b"\n"
    impostor = zlib.compress(b"commit %d\0" % len(body) + body)
    path = object_path(rev)
    path.chmod(0o644)
    path.write_bytes(impostor)
    with http_server(tmp_path, smart=False) as base:
        with pytest.raises(InputError) as error:
            fetch_git_inputs([pin_for(rev, tree, f"{base}/loose.git")], GitCache(tmp_path / "cache"))
    assert f"src: git commit {rev} (tree {tree}) could not be fetched" in str(error.value)
    assert f"File {rev} has bad hash" in error.value.message  # git's own object check
    assert cache_state(tmp_path / "cache") == ["partial"]


def test_our_commit_check_refuses_bytes_that_hash_to_another_id() -> None:
    body = b"tree " + b"a" * 40 + b"\nauthor x <x> 0 +0000\ncommitter x <x> 0 +0000\n\nm\n"
    assert git_object_id(b"commit", body) == subprocess.run(
        ["git", "hash-object", "-t", "commit", "--literally", "--stdin"], input=body, capture_output=True, check=True
    ).stdout.decode().strip()
    assert commit_tree(body) == "a" * 40
    with pytest.raises(InputError, match="not a commit object"):
        commit_tree(b"parent " + b"a" * 40 + b"\n")


def test_submodules_and_unsafe_protocols_are_refused(tmp_path: Path, repository) -> None:
    served, _ = repository
    work = tmp_path / "super"
    work.mkdir()
    git("init", "-q", str(work))
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", served.as_uri(), "sub", cwd=work)
    git("commit", "-q", "-m", "with a submodule", cwd=work)
    rev, tree = git("rev-parse", "HEAD", cwd=work), git("rev-parse", "HEAD^{tree}", cwd=work)
    with pytest.raises(InputError, match="submodule"):
        fetch_git(pin_for(rev, tree, work.as_uri()), GitCache(tmp_path / "cache"))
    assert cache_state(tmp_path / "cache") == ["partial"]
    with pytest.raises(InputError, match="expected a git URL"):
        pin_for(rev, tree, "ext::sh -c touch% /tmp/pwned")
    with pytest.raises(InputError, match="expected a git URL"):
        pin_for(rev, tree, "git@github.com:owner/repo.git")


# --------------------------------------------------------------------------- cache


def test_an_altered_cache_entry_is_evicted_and_fetched_again(tmp_path: Path, repository) -> None:
    served, [(rev, tree), _] = repository
    cache = GitCache(tmp_path / "cache")
    pin = pin_for(rev, tree, served.as_uri())
    fetch_git(pin, cache)
    (cache.tree_path(tree) / "pkg/__init__.py").write_bytes(b"VERSION = 666\n")
    with pytest.raises(CheckFailed, match="was altered") as error:
        cache.verified_tree(pin)
    assert error.value.check_id == "cache-entry" and not cache.tree_path(tree).exists()
    assert fetch_git(pin, cache).source == "fetch"
    assert cache.verified_tree(pin) == cache.tree_path(tree)


def test_an_interrupted_fetch_leaves_nothing_unverified_and_is_redone(tmp_path: Path, repository) -> None:
    """A fetch killed while the server is still sending objects: no tree or commit record
    in the cache; the next fetch removes the dead process's staging and completes."""
    served, [(rev, tree), _] = repository
    loose = tmp_path / "site" / "served.git"
    loose.parent.mkdir()
    git("clone", "-q", "--bare", str(served), str(loose))
    git("update-server-info", cwd=loose)
    cache_root = tmp_path / "cache"
    script = (
        "import sys; from sparkflake.fetch.git import GitCache, fetch_git; from sparkflake.lock.pins import GitPin; "
        "fetch_git(GitPin(name='src', urls=(sys.argv[1],), rev=sys.argv[2], tree=sys.argv[3]), GitCache(sys.argv[4]))"
    )
    with http_server(tmp_path / "site", smart=False, delay_objects=60) as base:
        process = subprocess.Popen([sys.executable, "-c", script, f"{base}/served.git", rev, tree, str(cache_root)],
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not list((cache_root / "partial").glob(f"git-{rev}.*/repo.git/HEAD")):
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.05)
            time.sleep(0.5)  # the walker is waiting for the object it asked for
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    left = cache_state(cache_root)
    assert not any(entry.startswith("git") for entry in left)
    assert any(entry.startswith(f"partial/git-{rev}.{process.pid}.") for entry in left)
    outcome = fetch_git(pin_for(rev, tree, served.as_uri()), GitCache(cache_root))
    assert outcome.source == "fetch"
    assert list((cache_root / "partial").iterdir()) == []
    assert_checkout(GitCache(cache_root).tree_path(tree), tree)


# --------------------------------------------------------------------------- parsers, against git

_names = st.text(alphabet="abcdefghij_.-", min_size=1, max_size=6).filter(lambda n: n not in (".", "..") and n.lower() != ".git")
_contents = st.binary(max_size=64)
_entries = st.dictionaries(
    st.lists(_names, min_size=1, max_size=3).map("/".join),
    st.one_of(_contents, st.tuples(st.just("x"), _contents), st.tuples(st.just("l"), st.sampled_from([b"x", b"../y", b"a b"]))),
    min_size=1,
    max_size=8,
)


def _consistent(files: dict) -> bool:
    """No path is both a file and a directory of another path."""
    paths = set(files)
    return not any("/".join(p.split("/")[:i]) in paths for p in paths for i in range(1, p.count("/") + 1))


@settings(max_examples=15)
@given(files=_entries.filter(_consistent))
def test_fetched_tree_equals_what_git_committed(tmp_path_factory: pytest.TempPathFactory, files: dict) -> None:
    """Any tree of files, executables and symlinks: the checkout we write from git's objects
    has git's own tree id, and our ls-tree parser reads git's records as git wrote them."""
    root = tmp_path_factory.mktemp("repo")
    served, [(rev, tree)] = make_repository(root, [files])
    cache = GitCache(root / "cache")
    fetch_git(pin_for(rev, tree, served.as_uri()), cache)
    assert git_tree_id(cache.tree_path(tree)) == tree
    entries = parse_ls_tree(subprocess.run(["git", "--git-dir", str(served), "ls-tree", "-r", "-z", rev],
                                           capture_output=True, check=True).stdout)
    assert sorted(e.path for e in entries) == sorted(files)
    for entry in entries:
        content = files[entry.path]
        expected_mode = {"x": "100755", "l": "120000"}[content[0]] if isinstance(content, tuple) else "100644"
        assert entry.mode == expected_mode and entry.kind == "blob"
    assert commit_tree(git("--git-dir", str(served), "cat-file", "commit", rev).encode()) == tree


def test_parse_ls_tree_refuses_malformed_records() -> None:
    with pytest.raises(InputError, match="unexpected record"):
        parse_ls_tree(b"100644 blob nothex\tpath\0")
    with pytest.raises(InputError, match="not UTF-8"):
        parse_ls_tree(b"100644 blob " + b"a" * 40 + b"\t\xff\0")


# --------------------------------------------------------------------------- CLI


def test_fetch_command_takes_a_lock_file(tmp_path: Path, repository, capsys: pytest.CaptureFixture[str]) -> None:
    served, [(rev, tree), _] = repository
    lock_path = tmp_path / "sources.lock"
    unreachable = "https://git.sparkflake.invalid/src.git"
    write_lock(lock_path, Lock(target=Target("linux/arm64", "3.11", "2.36"), inputs=(pin_for(rev, tree, unreachable),)))
    cache = str(tmp_path / "cache")
    assert main(["fetch", str(lock_path), "--cache", cache]) == 2
    message = capsys.readouterr().err
    assert f"src: git commit {rev} (tree {tree}) could not be fetched" in message
    assert f"tried {unreachable}: " in message and "--git-mirror src=URL" in message
    assert main(["fetch", str(lock_path), "--cache", cache, "--git-mirror", f"src={served.as_uri()}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["git"] == [{"name": "src", "rev": rev, "tree": tree, "source": "fetch", "url": served.as_uri(), "files": 5}]
    work = served.parent / "work"
    assert main(["fetch", str(lock_path), "--cache", str(tmp_path / "c2"), "--from", str(work), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["git"][0]["url"] == work.resolve().as_uri()
    assert main(["fetch", str(lock_path), "--cache", cache, "--git-mirror", "src=ext::sh"]) == 2
    assert "--git-mirror" in capsys.readouterr().err
    # a refused mirror is never echoed with its credential, in either of the refusals
    for mirror in ("src=https://alice:S3cr/etPW@git.sparkflake.invalid/src.git",
                   "other=https://alice:S3cretPW@git.sparkflake.invalid/src.git",
                   "src=https://git.sparkflake.invalid/src.git?private_token=S3cretPW"):
        assert main(["fetch", str(lock_path), "--cache", cache, "--git-mirror", mirror]) == 2
        err = capsys.readouterr().err
        assert "--git-mirror" in err and "S3cr" not in err and "***" in err


def test_a_plain_checkout_given_with_from_is_admitted_by_its_tree(tmp_path: Path, repository,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A directory without .git (a Nix fetchGit store path, an unpacked archive) whose tree
    id is a pin's; read-only like a store path. Another directory is ignored."""
    served, [(rev, tree), (rev2, tree2)] = repository
    supplied = tmp_path / "supplied"
    reference = GitCache(tmp_path / "reference")
    fetch_git(pin_for(rev, tree, served.as_uri()), reference)
    import shutil

    shutil.copytree(reference.tree_path(tree), supplied / "src-checkout", symlinks=True)
    (supplied / "unrelated").mkdir()
    (supplied / "unrelated" / "x").write_text("x")
    for path in sorted(supplied.rglob("*"), reverse=True):
        if not path.is_symlink():
            path.chmod(0o555 if path.is_dir() or os.access(path, os.X_OK) else 0o444)
    cache = GitCache(tmp_path / "cache")
    pins = [pin_for(rev, tree, "https://git.sparkflake.invalid/src.git")]
    outcomes = fetch_git_inputs(pins, cache, local_repositories=[supplied], offline=True)
    assert [(o.source, o.url) for o in outcomes] == [("import", (supplied / "src-checkout").resolve().as_uri())]
    assert_checkout(cache.verified_tree(pins[0]), tree)
    with pytest.raises(InputError, match=f"checkout of it \\(git tree {tree2}\\)"):
        fetch_git_inputs([pin_for(rev2, tree2, "https://git.sparkflake.invalid/src.git")], cache,
                         local_repositories=[supplied], offline=True)


# --------------------------------------------------------------------------- forge archives


def _archive(served: Path, rev: str, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    git("--git-dir", str(served), "archive", "--format=tar.gz", f"--prefix=repo-{rev}/", "-o", str(target), rev)
    return target


def test_a_forge_archive_is_used_when_no_git_url_serves_the_commit(tmp_path: Path, repository) -> None:
    served, [(rev, tree), (rev2, tree2)] = repository
    elsewhere, _ = make_repository(tmp_path / "elsewhere", [{"x": b"x\n"}])  # lacks the commit
    _archive(served, rev, tmp_path / "site" / f"{rev}.tar.gz")
    _archive(served, rev2, tmp_path / "site" / f"{rev2}.tar.gz")
    cache = GitCache(tmp_path / "cache")
    with http_server(tmp_path / "site", smart=False) as base:
        pin = pin_for(rev, tree, elsewhere.as_uri(), archive_urls=(f"{base}/missing.tar.gz", f"{base}/{rev}.tar.gz"))
        outcome = fetch_git(pin, cache)
        assert (outcome.source, outcome.url) == ("archive", f"{base}/{rev}.tar.gz")
        assert_checkout(cache.verified_tree(pin), tree)
        # an archive of another commit (git archive records the commit id) is refused
        other = pin_for("1" * 40, tree2, elsewhere.as_uri(), name="other", archive_urls=(f"{base}/{rev2}.tar.gz",))
        with pytest.raises(InputError) as error:
            fetch_git_inputs([other], cache)
    assert f"an archive of commit {rev2}, not {'1' * 40}" in error.value.message
    assert not cache.tree_path(tree2).exists()


def test_an_archive_with_other_files_than_the_tree_is_refused(tmp_path: Path) -> None:
    """export-ignore leaves a file out of the archive: its tree is not the commit's."""
    served, [(rev, tree)] = make_repository(tmp_path / "origin", [{".gitattributes": b"secret export-ignore\n",
                                                                   "secret": b"s\n", "kept": b"k\n"}])
    archive = _archive(served, rev, tmp_path / "a.tar.gz")
    with pytest.raises(CheckFailed, match=f"the files of the archive {archive.as_uri()} have git tree .*, the lock says {tree}"):
        fetch_git(pin_for(rev, tree, (tmp_path / "none.git").as_uri(), archive_urls=(archive.as_uri(),)), GitCache(tmp_path / "c"))
    assert cache_state(tmp_path / "c") == ["partial"]


def test_an_archive_writing_through_a_symlink_is_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        link = tarfile.TarInfo("top/link")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path / "outside")
        tar.addfile(link)
        payload = tarfile.TarInfo("top/link/planted")
        payload.size = 3
        tar.addfile(payload, io.BytesIO(b"bad"))
    (tmp_path / "outside").mkdir()
    with pytest.raises(InputError) as error:
        fetch_git_inputs([pin_for("a" * 40, "b" * 40, (tmp_path / "none.git").as_uri(), archive_urls=(archive.as_uri(),))],
                         GitCache(tmp_path / "c"))
    assert "is written through a symlink" in error.value.message
    assert list((tmp_path / "outside").iterdir()) == [] and cache_state(tmp_path / "c") == ["partial"]


def test_a_commit_record_that_is_no_small_regular_file_is_no_record(tmp_path: Path) -> None:
    """git/commits/<rev> as a FIFO hung fetch and build (read whole, blocking), a symlink to
    /dev/zero was read without end: one bounded reader (fetch.git.recorded_tree) for the
    cache and for cache gc. In a child, so that a hang fails the test instead of hanging it."""
    import subprocess
    import sys

    cache = GitCache(tmp_path / "cache")
    cache.commit_dir.mkdir(parents=True)
    tree, revs = "b" * 40, ["1" * 40, "2" * 40, "3" * 40, "4" * 40]
    cache.tree_path(tree).mkdir(parents=True)
    os.mkfifo(cache.commit_path(revs[0]))
    cache.commit_path(revs[1]).symlink_to("/dev/zero")
    cache.commit_path(revs[2]).write_text(f"tree {tree}\n" + "x" * 5000)
    cache.commit_path(revs[3]).write_text(f"tree {tree}\n")
    code = ("import sys; from sparkflake.fetch.git import GitCache; from sparkflake.lock.pins import GitPin; "
            "cache = GitCache(sys.argv[1]); "
            "print([cache.holds(GitPin(name='src', rev=rev, tree=sys.argv[2], urls=('https://h.example/r.git',))) "
            "for rev in sys.argv[3:]])")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache"), tree, *revs],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[False, False, False, True]"


def test_a_large_file_of_the_tree_is_written_in_pieces(tmp_path: Path) -> None:
    """Each blob was read whole from `git cat-file` (and copied once more): a checkout
    holding a 512 MiB file peaked at 1 GB. It is written in pieces now."""
    import tracemalloc

    large = os.urandom(48 << 20)
    served, [(rev, tree)] = make_repository(tmp_path / "origin", [{**FILES_1, "assets/large.bin": large}])
    cache = GitCache(tmp_path / "cache")
    tracemalloc.start()
    try:
        fetch_git(pin_for(rev, tree, served.as_uri()), cache)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"fetching a tree with a {len(large) >> 20} MiB file held {peak >> 20} MiB"
    assert_checkout(cache.tree_path(tree), tree)
    assert (cache.tree_path(tree) / "assets/large.bin").read_bytes() == large
