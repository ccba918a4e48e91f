"""NAR hashes and git tree ids of real trees, checked against the real tools.

Every expected value here comes from `nix hash path`, `nix path-info`, `git write-tree`,
`git hash-object`, or from test vectors published by other NAR implementations.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core import digest, tree_digest
from sparkflake.core.errors import InputError

NIX = ["nix", "--extra-experimental-features", "nix-command"]
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
GIT_SETTINGS = ["-c", "core.autocrlf=false", "-c", "core.filemode=true", "-c", "core.symlinks=true"]


# ---------------------------------------------------------------------------------------
# The real tools


def nix_hash_path(path: Path, *flags: str) -> str:
    return subprocess.run(
        [*NIX, "hash", "path", *flags, str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()


def git_write_tree(root: Path, object_format: str = "sha1", *, force: bool = False) -> str:
    """`git add -A && git write-tree` in a fresh repository whose git dir lives outside
    the tree, so the tree itself is not modified (Nix hashes the same tree)."""
    scratch = tempfile.mkdtemp(prefix="sparkflake-git-")
    try:
        git = ["git", *GIT_SETTINGS, f"--git-dir={scratch}/repo.git", f"--work-tree={root}"]
        subprocess.run(
            [*git, "init", "-q", f"--object-format={object_format}"], check=True, env=GIT_ENV
        )
        add = [*git, "add", "-A"] + (["--force"] if force else [])
        subprocess.run(add, check=True, env=GIT_ENV, capture_output=True)
        return subprocess.run(
            [*git, "write-tree"], check=True, capture_output=True, text=True, env=GIT_ENV
        ).stdout.strip()
    finally:
        shutil.rmtree(scratch)


def git_add_refuses(root: Path) -> bool:
    scratch = tempfile.mkdtemp(prefix="sparkflake-git-")
    try:
        git = ["git", *GIT_SETTINGS, f"--git-dir={scratch}/repo.git", f"--work-tree={root}"]
        subprocess.run([*git, "init", "-q"], check=True, env=GIT_ENV)
        return subprocess.run([*git, "add", "-A"], env=GIT_ENV, capture_output=True).returncode != 0
    finally:
        shutil.rmtree(scratch)


# ---------------------------------------------------------------------------------------
# Generated trees
#
# A node is ("file", size, seed, mode) | ("symlink", target) | ("dir", {name: node}).
# Contents come from a seeded PRNG so large files cost no Hypothesis shrinking effort.

# Names git would refuse or interpret (ignore rules, attributes) are left out here and
# tested on their own below.
_GIT_SPECIAL = {b".git", b".gitignore", b".gitattributes", b".gitmodules"}


def _acceptable_name(name: bytes) -> bool:
    return (
        name not in (b".", b"..")
        and b"/" not in name
        and b"\0" not in name
        and len(name) <= 255
        and name.lower() not in _GIT_SPECIAL
        and not tree_digest._git_refuses_name(name)
    )


names = st.one_of(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
        min_size=1,
        max_size=12,
    ).map(lambda text: text.encode("utf-8")),
    st.binary(min_size=1, max_size=8),  # names that are not UTF-8
    st.sampled_from([b"a", b"a.b", b"a-b", b"a0", b"a/"[:1], b"A", b"\xff", b"z" * 200]),
).filter(_acceptable_name)

file_sizes = st.one_of(
    st.integers(0, 40),
    st.sampled_from([0, 7, 8, 9, 64 << 10, (64 << 10) + 1, (1 << 20) + 5, (2 << 20) + 3]),
)
file_modes = st.sampled_from([0o644, 0o755, 0o700, 0o744, 0o654, 0o600, 0o711, 0o400])
symlink_targets = st.one_of(
    names,
    st.sampled_from([b"/nonexistent/dangling", b"../up", b"./self", b"a/b/c", b"/"]),
)
file_nodes = st.tuples(st.just("file"), file_sizes, st.integers(0, 2**32), file_modes)
symlink_nodes = st.tuples(st.just("symlink"), symlink_targets)


def _directory(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(st.just("dir"), st.dictionaries(names, children, max_size=5))


nodes = st.recursive(st.one_of(file_nodes, symlink_nodes), _directory, max_leaves=18)
trees = _directory(nodes)


def materialize(path: bytes, node: tuple) -> None:
    kind = node[0]
    if kind == "file":
        _, size, seed, mode = node
        with open(path, "wb") as handle:
            handle.write(random.Random(seed).randbytes(size))
        os.chmod(path, mode)
    elif kind == "symlink":
        os.symlink(node[1], path)
    else:
        os.mkdir(path)
        for name, child in node[1].items():
            materialize(os.path.join(path, name), child)


class GeneratedTree:
    """A tree built in a fresh temporary directory, removed on exit."""

    def __init__(self, node: tuple) -> None:
        self.node = node

    def __enter__(self) -> Path:
        self._scratch = tempfile.mkdtemp(prefix="sparkflake-tree-")
        root = os.path.join(os.fsencode(self._scratch), b"root")
        materialize(root, self.node)
        return Path(os.fsdecode(root))

    def __exit__(self, *exc_info: object) -> None:
        for directory, _, files in os.walk(self._scratch):
            for name in files:
                path = os.path.join(directory, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o600)
        shutil.rmtree(self._scratch)


# ---------------------------------------------------------------------------------------
# NAR hash against `nix hash path`


@given(trees)
def test_nar_hash_equals_nix_hash_path(tree: tuple) -> None:
    with GeneratedTree(tree) as root:
        ours = tree_digest.nar_hash(root)
        assert ours.sri == nix_hash_path(root)
        assert ours.base16 == nix_hash_path(root, "--base16")
        assert ours.nix32 == nix_hash_path(root, "--base32")


@settings(max_examples=15)
@given(trees, st.sampled_from(["sha1", "sha512"]))
def test_nar_hash_other_algorithms_equal_nix(tree: tuple, algorithm: str) -> None:
    with GeneratedTree(tree) as root:
        assert tree_digest.nar_hash(root, algorithm).sri == nix_hash_path(root, "--type", algorithm)


@given(st.one_of(file_nodes, symlink_nodes))
def test_nar_hash_of_a_single_file_or_symlink_root_equals_nix(node: tuple) -> None:
    with GeneratedTree(node) as root:
        assert tree_digest.nar_hash(root).sri == nix_hash_path(root)


@settings(max_examples=25)
@given(trees)
def test_nar_serialization_streams_the_bytes_that_are_hashed(tree: tuple) -> None:
    with GeneratedTree(tree) as root:
        buffer = io.BytesIO()
        size = tree_digest.nar_serialize(root, buffer.write)
        serialized = buffer.getvalue()
        assert size == len(serialized)
        assert size % 8 == 0
        nar = tree_digest.nar_digest(root)
        assert nar.nar_size == size
        assert digest.Hash("sha256", hashlib.sha256(serialized).digest()) == nar.nar_hash


# ---------------------------------------------------------------------------------------
# Published vectors


def _nar_string(value: bytes) -> bytes:
    return len(value).to_bytes(8, "little") + value + bytes(-len(value) % 8)


def _nar(*strings: bytes) -> bytes:
    return b"".join(_nar_string(value) for value in strings)


# NAR_CONTENTS_SYMLINK, NAR_CONTENTS_HELLOWORLD and NAR_CONTENTS_COMPLICATED from TVL's
# tvix store fixtures (thkoch2001/tvlfyi_depot: tvix/store/src/tests/fixtures.rs), spelled
# here as the sequences of NAR strings those byte arrays hold; go-nix uses the same
# symlink and one-byte fixtures (nix-community/go-nix: pkg/nar/fixtures_test.go).
TVIX_NAR_SYMLINK = _nar(
    b"nix-archive-1", b"(", b"type", b"symlink", b"target", b"/nix/store/somewhereelse", b")"
)
TVIX_NAR_HELLOWORLD = _nar(
    b"nix-archive-1", b"(", b"type", b"regular", b"contents", b"Hello World!", b")"
)
TVIX_NAR_COMPLICATED = _nar(
    b"nix-archive-1", b"(", b"type", b"directory",
    b"entry", b"(", b"name", b".keep", b"node",
    b"(", b"type", b"regular", b"contents", b"", b")", b")",
    b"entry", b"(", b"name", b"aa", b"node",
    b"(", b"type", b"symlink", b"target", b"/nix/store/somewhereelse", b")", b")",
    b"entry", b"(", b"name", b"keep", b"node",
    b"(", b"type", b"directory",
    b"entry", b"(", b"name", b".keep", b"node",
    b"(", b"type", b"regular", b"contents", b"", b")", b")",
    b")", b")",
    b")",
)  # fmt: skip
GO_NIX_ONE_BYTE_REGULAR = _nar(
    b"nix-archive-1", b"(", b"type", b"regular", b"contents", b"\x01", b")"
)


def _serialized(path: Path) -> bytes:
    buffer = io.BytesIO()
    tree_digest.nar_serialize(path, buffer.write)
    return buffer.getvalue()


def test_published_nar_vectors(tmp_path: Path) -> None:
    (tmp_path / "symlink").symlink_to("/nix/store/somewhereelse")
    assert _serialized(tmp_path / "symlink") == TVIX_NAR_SYMLINK

    (tmp_path / "helloworld").write_bytes(b"Hello World!")
    assert _serialized(tmp_path / "helloworld") == TVIX_NAR_HELLOWORLD

    (tmp_path / "onebyte").write_bytes(b"\x01")
    assert _serialized(tmp_path / "onebyte") == GO_NIX_ONE_BYTE_REGULAR

    complicated = tmp_path / "complicated"
    (complicated / "keep").mkdir(parents=True)
    (complicated / ".keep").write_bytes(b"")
    (complicated / "keep" / ".keep").write_bytes(b"")
    (complicated / "aa").symlink_to("/nix/store/somewhereelse")
    assert _serialized(complicated) == TVIX_NAR_COMPLICATED
    assert tree_digest.nar_digest(complicated).nar_size == len(TVIX_NAR_COMPLICATED)
    # The same vectors, hashed by Nix itself.
    for name in ("symlink", "helloworld", "onebyte", "complicated"):
        assert tree_digest.nar_hash(tmp_path / name).sri == nix_hash_path(tmp_path / name)


def test_nix_own_fixed_output_vector(tmp_path: Path) -> None:
    # Nix's functional test tests/fixed.sh (NixOS/nix; lix-project/lix:
    # tests/functional/fixed.sh) builds this tree and pins its recursive sha256 as
    # 1ixr6yd3297ciyp9im522dfxpqbkhcw0pylkb2aab915278fqaik.
    fixed = tmp_path / "fixed"
    (fixed / "bla").mkdir(parents=True)
    (fixed / "foo").write_text("Hello World!\n")
    (fixed / "bar").symlink_to("foo")
    assert tree_digest.nar_hash(fixed).nix32 == "1ixr6yd3297ciyp9im522dfxpqbkhcw0pylkb2aab915278fqaik"


# ---------------------------------------------------------------------------------------
# narHash recorded by Nix for paths it added to its store


@pytest.fixture
def nix_store_paths():
    added: list[str] = []
    yield added
    for store_path in added:
        subprocess.run([*NIX, "store", "delete", store_path], capture_output=True, check=False)


def _add_to_store(root: Path) -> dict:
    store_path = subprocess.run(
        [*NIX, "store", "add-path", str(root)], check=True, capture_output=True, text=True
    ).stdout.strip()
    info = json.loads(
        subprocess.run(
            [*NIX, "path-info", "--json", store_path], check=True, capture_output=True, text=True
        ).stdout
    )
    return info[0]


@settings(max_examples=12)
@given(tree=trees)
def test_nar_digest_equals_path_info_of_nix_store_add_path(tree: tuple, nix_store_paths) -> None:
    with GeneratedTree(tree) as root:
        info = _add_to_store(root)
        nix_store_paths.append(info["path"])
        nar = tree_digest.nar_digest(root)
        assert digest.parse_hash(info["narHash"]) == nar.nar_hash
        assert info["narSize"] == nar.nar_size
        # "fixed:r:sha256:<nix32>": the recursive content address is the NAR hash too.
        assert info["ca"] == f"fixed:r:{nar.nar_hash.prefixed('nix32')}"


# ---------------------------------------------------------------------------------------
# git tree ids against `git add -A && git write-tree`


@given(trees)
def test_git_tree_id_equals_git_write_tree(tree: tuple) -> None:
    with GeneratedTree(tree) as root:
        assert tree_digest.git_tree_id(root) == git_write_tree(root, "sha1")
        assert tree_digest.git_tree_id(root, "sha256") == git_write_tree(root, "sha256")


# Trees that also hold ".git" entries at any level: a directory without HEAD is no
# repository (git skips it, NAR keeps it); a file or one with HEAD is refused by both.
trees_with_dot_git = _directory(st.recursive(
    st.one_of(file_nodes, symlink_nodes),
    lambda children: st.tuples(st.just("dir"), st.dictionaries(st.one_of(names, st.just(b".git")), children, max_size=5)),
    max_leaves=18,
))


@given(st.one_of(trees, trees_with_dot_git), st.sampled_from([("sha256", "sha1"), ("sha512", "sha256")]))
def test_nar_digest_and_git_tree_in_one_walk_equal_each_alone(tree: tuple, algorithms: tuple[str, str]) -> None:
    algorithm, object_format = algorithms
    with GeneratedTree(tree) as root:
        try:
            expected = (tree_digest.nar_digest(root, algorithm), tree_digest.git_tree_id(root, object_format))
        except InputError as refused:
            with pytest.raises(InputError) as also:
                tree_digest.nar_digest_and_git_tree(root, algorithm, object_format)
            assert also.value.message == refused.message
            return
        assert tree_digest.nar_digest_and_git_tree(root, algorithm, object_format) == expected


@pytest.mark.parametrize("name", [".GIT", "git~1", ".git."])
def test_nar_digest_and_git_tree_refuse_what_git_refuses(tmp_path: Path, name: str) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / name).write_text("x")
    with pytest.raises(InputError, match="git refuses to store a path named"):
        tree_digest.nar_digest_and_git_tree(tmp_path)
    (tmp_path / "sub" / name).unlink()
    (tmp_path / "sub" / ".gitmodules").symlink_to("elsewhere")
    with pytest.raises(InputError, match="git refuses a symlink named"):
        tree_digest.nar_digest_and_git_tree(tmp_path)
    (tmp_path / "sub" / ".gitmodules").unlink()
    subprocess.run(["git", "init", "-q", str(tmp_path / "sub")], check=True, env=GIT_ENV)
    with pytest.raises(InputError, match="nested git repository"):
        tree_digest.nar_digest_and_git_tree(tmp_path)
    with pytest.raises(InputError, match="is not a directory"):
        tree_digest.nar_digest_and_git_tree(tmp_path / "sub" / ".git" / "HEAD")


def test_git_tree_of_empty_and_only_empty_directories(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "d").mkdir()
    assert tree_digest.git_tree_id(tmp_path) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    assert tree_digest.git_tree_id(tmp_path) == git_write_tree(tmp_path)
    assert tree_digest.git_tree_id(tmp_path, "sha256") == git_write_tree(tmp_path, "sha256")


def test_git_tree_orders_directories_as_if_named_with_a_slash(tmp_path: Path) -> None:
    # "a" (a tree) sorts as "a/": after "a.b" and "a-b" (bytes below '/'), before "a0".
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "inner").write_text("x")
    for name in ("a.b", "a-b", "a0", "a=", "a\x01"):
        (tmp_path / name).write_text(name)
    assert tree_digest.git_tree_id(tmp_path) == git_write_tree(tmp_path)


def git_hash_object(content: bytes, object_format: str) -> str:
    """The blob id git itself gives ``content`` (``git hash-object --stdin``)."""
    theirs = subprocess.run(
        ["git", "hash-object", f"--object-format={object_format}", "--stdin"]
        if object_format == "sha256"
        else ["git", "hash-object", "--stdin"],
        input=content,
        capture_output=True,
        check=False,
        env=GIT_ENV,
    )
    if theirs.returncode != 0:  # older git without --object-format on hash-object
        scratch = tempfile.mkdtemp()
        try:
            subprocess.run(
                ["git", "init", "-q", f"--object-format={object_format}", scratch],
                check=True,
                env=GIT_ENV,
            )
            theirs = subprocess.run(
                ["git", "-C", scratch, "hash-object", "--stdin"],
                input=content,
                capture_output=True,
                check=True,
                env=GIT_ENV,
            )
        finally:
            shutil.rmtree(scratch)
    return theirs.stdout.decode().strip()


@given(st.binary(max_size=2000), st.sampled_from(["sha1", "sha256"]))
def test_git_blob_id_equals_git_hash_object(content: bytes, object_format: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "blob"
        path.write_bytes(content)
        ours = tree_digest.git_blob_id(path, object_format)
    assert ours == git_hash_object(content, object_format)


def test_git_blob_id_of_file_and_symlink(tmp_path: Path) -> None:
    content = random.Random(7).randbytes((1 << 20) + 17)
    (tmp_path / "big").write_bytes(content)
    (tmp_path / "link").symlink_to("big")
    assert tree_digest.git_blob_id(tmp_path / "big") == git_hash_object(content, "sha1")
    # a symlink's blob is its target's bytes
    assert tree_digest.git_blob_id(tmp_path / "link", "sha256") == git_hash_object(b"big", "sha256")
    expected = subprocess.run(
        ["git", "hash-object", str(tmp_path / "big")], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert tree_digest.git_blob_id(tmp_path / "big") == expected


def test_dot_git_is_excluded_at_every_level(tmp_path: Path) -> None:
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "sub" / ".git").mkdir(parents=True)  # no HEAD: not a repository, git skips it
    (tmp_path / "sub" / ".git" / "junk").write_text("junk")
    (tmp_path / "sub" / "kept").write_text("kept")
    (tmp_path / "top").write_text("top")
    plain = tmp_path.parent / f"{tmp_path.name}-plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "sub" / "kept").write_text("kept")
    (plain / "top").write_text("top")
    assert tree_digest.git_tree_id(tmp_path) == tree_digest.git_tree_id(plain)
    shutil.rmtree(tmp_path / ".git")  # git's own directory must not be in the work tree run
    assert tree_digest.git_tree_id(tmp_path) == git_write_tree(tmp_path)


def test_nested_repository_is_refused_with_its_path(tmp_path: Path) -> None:
    nested = tmp_path / "vendor" / "lib"
    nested.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(nested)], check=True, env=GIT_ENV)
    with pytest.raises(InputError) as refused:
        tree_digest.git_tree_id(tmp_path)
    assert str(nested) in str(refused.value)
    assert "submodule" in str(refused.value)


@pytest.mark.parametrize(
    "name",
    [".GIT", ".Git", ".git.", ".git ", "git~1", "GIT~1.", ".git:x", ".git\\x", ".git .. ",
     ".git~1", ".gitx", "x.git", "a\\b", "git~2", ".git::"],
)  # fmt: skip
def test_names_git_refuses_are_refused_and_others_match_git(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("x")
    if git_add_refuses(tmp_path):
        with pytest.raises(InputError) as refused:
            tree_digest.git_tree_id(tmp_path)
        assert str(tmp_path / name) in str(refused.value)
    else:
        assert tree_digest.git_tree_id(tmp_path) == git_write_tree(tmp_path)


@pytest.mark.parametrize(
    "name",
    [".gitmodules", ".GITMODULES", "gitmod~1", "gitmod~4", "gitmod~5", ".gitmodules.",
     ".gitmodules:x", "gi7eba~1", "gi7eba~12", "gi7~1234", "gi7eba~0", ".gitattributes",
     ".gitignore", ".mailmap"],
)  # fmt: skip
def test_symlink_names_git_refuses_match_git(tmp_path: Path, name: str) -> None:
    (tmp_path / name).symlink_to("elsewhere")
    if git_add_refuses(tmp_path):
        with pytest.raises(InputError) as refused:
            tree_digest.git_tree_id(tmp_path)
        assert str(tmp_path / name) in str(refused.value)
    else:
        assert tree_digest.git_tree_id(tmp_path) == git_write_tree(tmp_path)


# ---------------------------------------------------------------------------------------
# Sockets, FIFOs, devices, unreadable entries


def _socket_in(directory: Path) -> tuple[Path, socket.socket]:
    path = directory / "control.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return path, server


@pytest.mark.parametrize("hasher", ["nar", "git"])
def test_socket_inside_tree_is_refused_with_its_path(tmp_path: Path, hasher: str) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    path, server = _socket_in(tmp_path / "deep" / "er")
    try:
        with pytest.raises(InputError) as refused:
            tree_digest.nar_hash(tmp_path) if hasher == "nar" else tree_digest.git_tree_id(tmp_path)
    finally:
        server.close()
    assert str(path) in str(refused.value)
    assert "socket" in str(refused.value)


@pytest.mark.parametrize("hasher", ["nar", "git"])
def test_fifo_inside_tree_is_refused_with_its_path(tmp_path: Path, hasher: str) -> None:
    (tmp_path / "sub").mkdir()
    fifo = tmp_path / "sub" / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as refused:
        tree_digest.nar_hash(tmp_path) if hasher == "nar" else tree_digest.git_tree_id(tmp_path)
    assert str(fifo) in str(refused.value)
    assert "FIFO" in str(refused.value)
    # Nix refuses it too.
    assert (
        subprocess.run([*NIX, "hash", "path", str(tmp_path)], capture_output=True).returncode != 0
    )


def test_device_node_is_refused_with_its_path(tmp_path: Path) -> None:
    # /dev/null is a real character device; a symlink to it is only a symlink, so hash the
    # device itself as the root, which is what reaching a device inside a tree comes to.
    with pytest.raises(InputError) as refused:
        tree_digest.nar_hash("/dev/null")
    assert "/dev/null" in str(refused.value)
    assert "character device" in str(refused.value)
    device = tmp_path / "null"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(InputError) as refused:
        tree_digest.nar_hash(tmp_path)
    assert str(device) in str(refused.value)
    with pytest.raises(InputError):
        tree_digest.git_tree_id(tmp_path)


def test_missing_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-tree"
    for call in (tree_digest.nar_hash, tree_digest.git_tree_id, tree_digest.git_blob_id, digest.file_hash):
        with pytest.raises(InputError) as refused:
            call(missing)
        assert str(missing) in str(refused.value)


SYSFS_SHORT_READS = [
    "/sys/kernel/profiling",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/ksm/run",
    "/sys/power/state",
]


def test_file_whose_bytes_do_not_match_its_size_is_refused() -> None:
    # sysfs attributes claim a size of 4096 and read back fewer bytes: a real file whose
    # content is not what its size said, like one truncated while being hashed. A hash of
    # it would be a hash of bytes the NAR header does not describe.
    path = next(candidate for candidate in SYSFS_SHORT_READS if os.path.exists(candidate))
    assert os.stat(path).st_size != len(Path(path).read_bytes())
    with pytest.raises(InputError) as refused:
        tree_digest.nar_hash(path)
    assert path in str(refused.value)
    assert "changed size" in str(refused.value)


# ---------------------------------------------------------------------------------------
# A real tree of more than 1,000 files: an sdist from PyPI


@pytest.fixture(scope="session")
def real_source_tree() -> Path:
    cache = Path(tempfile.gettempdir()) / "sparkflake-test-sdist"
    unpacked = cache / "unpacked"
    marker = cache / "unpacked.complete"
    if not marker.exists():
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--dest", str(cache),
                "--quiet", "Django==5.1.4",
            ],
            check=True,
        )  # fmt: skip
        (archive,) = cache.glob("*.tar.gz")
        with tarfile.open(archive) as sdist:
            members = sdist.getmembers()
            for member in members:  # this Python's tarfile has no extraction filters
                parts = Path(member.name).parts
                assert not Path(member.name).is_absolute() and ".." not in parts, member.name
                assert member.isfile() or member.isdir() or member.issym(), member.name
            sdist.extractall(unpacked, members=members)
        marker.write_text("complete\n")
    return unpacked


@pytest.mark.network
def test_real_sdist_tree_matches_nix_and_git(real_source_tree: Path) -> None:
    files = sum(len(names) for _, _, names in os.walk(real_source_tree))
    assert files >= 1000
    nar = tree_digest.nar_digest(real_source_tree)
    assert nar.nar_hash.sri == nix_hash_path(real_source_tree)
    assert nar.nar_hash.nix32 == nix_hash_path(real_source_tree, "--base32")
    # --force: hash every file, as we do, even if the sdist ships a .gitignore
    assert tree_digest.git_tree_id(real_source_tree) == git_write_tree(real_source_tree, force=True)
    assert tree_digest.git_tree_id(real_source_tree, "sha256") == git_write_tree(
        real_source_tree, "sha256", force=True
    )
