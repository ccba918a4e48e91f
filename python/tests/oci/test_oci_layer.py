"""Layers from trees: refusals with the path, whiteouts, hardlinks, cache behaviour."""

from __future__ import annotations

import io
import os
import shutil
import socket
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
from fixtures.oci import TreeVariant, materialize_tree, tree_specs
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci import (
    BlobStore,
    Compression,
    GeneratedFile,
    LayerCache,
    LayerInput,
    LayerOptions,
    TreeSource,
    build_layer,
)
from sparkflake.oci.layer_tree import scan_layer_input


def _tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "run").write_bytes(b"#!/bin/sh\n")
    (root / "bin" / "run").chmod(0o4775)
    (root / "etc").mkdir()
    (root / "etc" / "conf").write_bytes(b"conf")
    (root / "etc" / "conf").chmod(0o664)
    return root


def _members(blob: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(blob) as tar:
        return tar.getmembers()


def _build(layer_input: LayerInput, store_root: Path, compression: str = "gzip", cache=True):
    cache_obj = LayerCache(store_root) if cache else None
    return build_layer(
        layer_input, LayerOptions(Compression(compression)), BlobStore(store_root), cache_obj
    )


def test_modes_normalized_and_parents_first(tmp_path):
    tree = _tree(tmp_path / "t")
    layer = _build(LayerInput(sources=(TreeSource(str(tree), "/srv/x"),)), tmp_path / "s")
    members = {m.name: m for m in _members(layer.blob_path)}
    assert list(members) == [
        "srv",
        "srv/x",
        "srv/x/bin",
        "srv/x/bin/run",
        "srv/x/etc",
        "srv/x/etc/conf",
    ]
    assert members["srv/x/bin/run"].mode == 0o755  # setuid and group write dropped
    assert members["srv/x/etc/conf"].mode == 0o644
    assert members["srv/x"].mode == 0o755


def test_whiteouts_and_opaque_directories(tmp_path):
    layer = _build(
        LayerInput(deletions=("/usr/share/doc", "/etc/passwd"), opaque_dirs=("/var/cache",)),
        tmp_path / "s",
    )
    names = [m.name for m in _members(layer.blob_path)]
    assert names == [
        "etc",
        "etc/.wh.passwd",
        "usr",
        "usr/share",
        "usr/share/.wh.doc",
        "var",
        "var/cache",
        "var/cache/.wh..wh..opq",
    ]


def test_hardlinks_inside_a_layer_are_kept(tmp_path):
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "b").write_bytes(b"shared")
    os.link(tree / "b", tree / "a")
    layer = _build(LayerInput(sources=(TreeSource(str(tree)),)), tmp_path / "s")
    members = _members(layer.blob_path)
    assert [(m.name, m.type) for m in members] == [("a", tarfile.REGTYPE), ("b", tarfile.LNKTYPE)]
    assert members[1].linkname == "a"


def test_generated_files_and_duplicates(tmp_path):
    tree = _tree(tmp_path / "t")
    layer = _build(
        LayerInput(
            sources=(TreeSource(str(tree)),),
            files=(GeneratedFile("/etc/generated", b"g", 0o600),),
        ),
        tmp_path / "s",
    )
    members = {m.name: m for m in _members(layer.blob_path)}
    assert members["etc/generated"].mode == 0o600
    with pytest.raises(InputError, match="duplicate target path /etc/conf"):
        scan_layer_input(
            LayerInput(sources=(TreeSource(str(tree)),), files=(GeneratedFile("/etc/conf", b"x"),))
        )
    with pytest.raises(InputError, match="both deleted and added"):
        scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),), deletions=("/etc/conf",)))


def test_special_files_refused_with_their_path(tmp_path):
    fifo_tree = tmp_path / "fifo"
    fifo_tree.mkdir()
    os.mkfifo(fifo_tree / "pipe")
    with pytest.raises(InputError, match=r"fifo/pipe: FIFO cannot be stored"):
        scan_layer_input(LayerInput(sources=(TreeSource(str(fifo_tree)),)))
    sock_tree = tmp_path / "sock"
    sock_tree.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_tree / "s"))
    try:
        with pytest.raises(InputError, match=r"sock/s: socket cannot be stored"):
            scan_layer_input(LayerInput(sources=(TreeSource(str(sock_tree)),)))
    finally:
        server.close()
    dev_tree = tmp_path / "dev"
    dev_tree.mkdir()
    os.mknod(dev_tree / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(InputError, match=r"dev/null: character device cannot be stored"):
        scan_layer_input(LayerInput(sources=(TreeSource(str(dev_tree)),)))


def test_names_that_cannot_be_stored_are_refused(tmp_path):
    tree = tmp_path / "t"
    tree.mkdir()
    fd = os.open(os.fsencode(tree) + b"/bad\xff", os.O_CREAT | os.O_WRONLY)
    os.close(fd)
    with pytest.raises(InputError, match=r"not valid UTF-8"):
        scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),)))


def test_missing_tree_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        scan_layer_input(LayerInput(sources=(TreeSource(str(tmp_path / "nope")),)))


@pytest.fixture
def world_traversable_dir():
    # pytest's tmp_path lives under a 0700 directory that an unprivileged user cannot enter
    path = Path(tempfile.mkdtemp(prefix="sparkflake-oci-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_unreadable_file_refused_for_an_unprivileged_user(world_traversable_dir):
    work = world_traversable_dir / "w"
    tree = work / "tree"
    tree.mkdir(parents=True)
    (tree / "secret").write_bytes(b"s")
    (tree / "secret").chmod(0o000)
    spec = work / "spec.json"
    spec.write_text('{"layers": [{"tree": "tree"}]}')
    spec.chmod(0o644)
    for path in (work, tree):
        path.chmod(0o777)
    completed = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            str(Path(os.sys.executable)),
            "-m",
            "sparkflake.cli",
            "image",
            "build",
            str(spec),
            "-o",
            str(work / "out"),
            "--cache",
            str(work / "cache"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(work)},
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert f"{tree / 'secret'}: file is not readable" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_cache_hit_skips_tar_and_compression(tmp_path, monkeypatch):
    tree = _tree(tmp_path / "t")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(tree), str(copy)], check=True)
    store = tmp_path / "s"
    first = _build(LayerInput(sources=(TreeSource(str(tree)),)), store)
    assert not first.from_cache

    import sparkflake.oci.layer as layer_module

    def no_tar(*args, **kwargs):
        raise AssertionError("an unchanged tree must not be re-tarred")

    monkeypatch.setattr(layer_module, "write_layer_blob", no_tar)
    again = _build(LayerInput(sources=(TreeSource(str(tree)),)), store)
    elsewhere = _build(LayerInput(sources=(TreeSource(str(copy)),)), store)
    assert again.from_cache and elsewhere.from_cache
    assert again.digest == elsewhere.digest == first.digest
    monkeypatch.undo()

    (tree / "etc" / "conf").write_bytes(b"changed")
    changed = _build(LayerInput(sources=(TreeSource(str(tree)),)), store)
    assert not changed.from_cache and changed.digest != first.digest
    other_options = _build(LayerInput(sources=(TreeSource(str(copy)),)), store, "zstd")
    assert not other_options.from_cache


def test_same_length_rewrite_with_restored_mtime_is_noticed(tmp_path):
    tree = _tree(tmp_path / "t")
    store = tmp_path / "s"
    first = _build(LayerInput(sources=(TreeSource(str(tree)),)), store)
    conf = tree / "etc" / "conf"
    before = conf.stat()
    conf.write_bytes(b"CONF")
    os.utime(conf, ns=(before.st_atime_ns, before.st_mtime_ns))
    second = _build(LayerInput(sources=(TreeSource(str(tree)),)), store)
    assert second.diff_id != first.diff_id


def test_layer_digests_match_the_blob(tmp_path):
    import hashlib

    tree = _tree(tmp_path / "t")
    for compression in ("gzip", "zstd", "none"):
        layer = _build(
            LayerInput(sources=(TreeSource(str(tree)),)), tmp_path / "s", compression, cache=False
        )
        blob = layer.blob_path.read_bytes()
        assert layer.digest == "sha256:" + hashlib.sha256(blob).hexdigest()
        assert layer.size == len(blob)
        plain = subprocess.run(
            {"gzip": ["gzip", "-dc"], "zstd": ["zstd", "-dc"], "none": ["cat"]}[compression]
            + [str(layer.blob_path)],
            capture_output=True,
            check=True,
        ).stdout
        assert layer.diff_id == "sha256:" + hashlib.sha256(plain).hexdigest()
        assert layer.uncompressed_size == len(plain)
        with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
            assert [m.name for m in tar.getmembers()][:2] == ["bin", "bin/run"]


@settings(max_examples=30)
@given(spec=tree_specs(max_leaves=10), seeds=st.tuples(st.integers(0, 99), st.integers(0, 99)))
def test_cache_key_is_the_content_not_the_copy(tmp_path_factory, spec, seeds):
    work = tmp_path_factory.mktemp("key")
    keys = []
    trees = []
    for n, seed in enumerate(seeds):
        variant = TreeVariant(seed, reverse_order=bool(n), group_other_bits=0o022 >> n, owner=n)
        tree = work / f"copy{n}"
        files = materialize_tree(tree, spec, variant)
        trees.append((tree, files))
        cache = LayerCache(work / f"cache{n}")
        options = LayerOptions(Compression("gzip")).as_record()
        keys.append(cache.key(scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),))), options))
    assert keys[0] == keys[1]
    tree, files = trees[0]
    if files:
        victim = sorted(files)[0]
        victim.write_bytes(victim.read_bytes() + b"!")
        cache = LayerCache(work / "cache0")
        options = LayerOptions(Compression("gzip")).as_record()
        changed = cache.key(scan_layer_input(LayerInput(sources=(TreeSource(str(tree)),))), options)
        assert changed != keys[0]
    other = LayerCache(work / "cache1").key(
        scan_layer_input(LayerInput(sources=(TreeSource(str(trees[1][0])),))),
        LayerOptions(Compression("zstd")).as_record(),
    )
    assert other != keys[1]


_MUTATIONS = ["none", "rewrite-same-size", "append", "add", "remove", "rename", "chmod-x", "symlink", "hardlink", "touch-mtime-back"]


# bin/fuzz found a second "symlink" beside a dangling first one (exists() follows the link)
@example(files={"d/e": b"\x00"}, mutations=["symlink", "symlink"])
@settings(max_examples=40, deadline=None)
@given(
    files=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d/e", "d/f", "g/h/i"]), st.binary(min_size=1, max_size=300), min_size=1
    ),
    mutations=st.lists(st.sampled_from(_MUTATIONS), min_size=1, max_size=3),
)
def test_fingerprint_route_never_serves_a_stale_layer(tmp_path_factory, files, mutations):
    """After any change to the tree, the cached build (fingerprint route first, then the
    content key) gives the layer a fresh build without any cache gives. The racy window
    is closed here so that fingerprints of just-written trees are recorded and the route
    is exercised (this kernel stamps ctime finely enough; the window is tested below)."""
    from sparkflake.oci import layer_cache

    saved, layer_cache.RACY_WINDOW_NS = layer_cache.RACY_WINDOW_NS, -(10**12)
    try:
        _fingerprint_case(tmp_path_factory, files, mutations)
    finally:
        layer_cache.RACY_WINDOW_NS = saved


def _fingerprint_case(tmp_path_factory, files, mutations):
    root = tmp_path_factory.mktemp("fp")
    tree = root / "tree"
    for name, content in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(content)
    layer_input = LayerInput(sources=(TreeSource(str(tree), "/srv"),))
    first = _build(layer_input, root / "cached")
    again = _build(layer_input, root / "cached")
    assert again.from_cache and again.digest == first.digest
    victim = tree / sorted(files)[0]
    for mutation in mutations:
        if not victim.exists():
            break
        status = victim.stat()
        if mutation == "rewrite-same-size":
            data = victim.read_bytes()
            victim.write_bytes(bytes([data[0] ^ 1]) + data[1:])
        elif mutation == "touch-mtime-back":
            data = victim.read_bytes()
            victim.write_bytes(bytes([data[0] ^ 2]) + data[1:])
            os.utime(victim, ns=(status.st_atime_ns, status.st_mtime_ns))  # mtime restored, ctime not
        elif mutation == "append":
            with open(victim, "ab") as handle:
                handle.write(b"+")
        elif mutation == "add":
            (tree / "new-file").write_bytes(b"new")
        elif mutation == "remove":
            victim.unlink()
        elif mutation == "rename":
            victim.rename(victim.with_name(victim.name + "-renamed"))
        elif mutation == "chmod-x":
            victim.chmod(0o755)
        elif mutation == "symlink" and not os.path.lexists(tree / "link"):  # the link may dangle
            (tree / "link").symlink_to(victim.name)
        elif mutation == "hardlink" and not (tree / "hard").exists():
            os.link(victim, tree / "hard")
    cached = _build(layer_input, root / "cached")
    fresh = _build(layer_input, root / f"fresh-{len(list(root.iterdir()))}", cache=False)
    assert cached.digest == fresh.digest and cached.diff_id == fresh.diff_id


def test_unchanged_input_is_served_without_a_scan(tmp_path, monkeypatch):
    from sparkflake.oci import layer as layer_module
    from sparkflake.oci import layer_cache

    tree = _tree(tmp_path / "t")
    layer_input = LayerInput(sources=(TreeSource(str(tree), "/srv/x"),))
    # A tree written just now is inside the racy window: no fingerprint is recorded.
    _build(layer_input, tmp_path / "s")
    assert not (tmp_path / "s" / "fingerprints").exists()
    monkeypatch.setattr(layer_cache, "RACY_WINDOW_NS", -(10**12))
    first = _build(layer_input, tmp_path / "s")
    assert len(list((tmp_path / "s" / "fingerprints").iterdir())) == 1

    def no_scan(_layer_input):
        raise AssertionError("scanned although the input fingerprint is recorded")

    monkeypatch.setattr(layer_module, "scan_layer_input", no_scan)
    second = _build(layer_input, tmp_path / "s")
    assert second.from_cache and second.digest == first.digest
    (tree / "etc" / "conf").write_bytes(b"changed\n")
    with pytest.raises(AssertionError, match="scanned"):
        _build(layer_input, tmp_path / "s")


def test_a_walk_handed_on_stands_for_the_first_walk_only(tmp_path):
    """A tree source may carry the walk its validator just took: the fingerprint uses it
    instead of walking; the check after the key is computed walks afresh, so a walk that
    does not match the tree is never recorded as the tree's fingerprint."""
    from sparkflake.oci import layer_cache
    from sparkflake.oci.layer_input import TreeWalk, walk_tree

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_bytes(b"content")
    options = LayerOptions(Compression("gzip")).as_record()
    cache = LayerCache(tmp_path / "cache")
    plain = LayerInput(sources=(TreeSource(str(tree)),))
    handed = LayerInput(sources=(TreeSource(str(tree), walk=walk_tree(tree)),))
    assert cache.input_fingerprint(handed, options) == cache.input_fingerprint(plain, options)
    stale = LayerInput(sources=(TreeSource(str(tree), walk=TreeWalk("0" * 64, 0)),))
    assert cache.input_fingerprint(stale, options) != cache.input_fingerprint(plain, options)
    assert cache.input_fingerprint(stale, options, fresh=True) == cache.input_fingerprint(plain, options)
    saved, layer_cache.RACY_WINDOW_NS = layer_cache.RACY_WINDOW_NS, -(10**12)
    try:
        layer = build_layer(stale, LayerOptions(Compression("gzip")), BlobStore(tmp_path / "store"), cache)
        stale_digest = cache.input_fingerprint(stale, options).digest
        assert cache.key_for_fingerprint(stale_digest) is None  # not recorded
        again = build_layer(handed, LayerOptions(Compression("gzip")), BlobStore(tmp_path / "store"), cache)
        assert again.digest == layer.digest and again.from_cache
        assert cache.key_for_fingerprint(cache.input_fingerprint(handed, options).digest) is not None
    finally:
        layer_cache.RACY_WINDOW_NS = saved
