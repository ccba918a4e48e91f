"""The build's caches: stat-keyed file hashes and the assembled-tree cache."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from fixtures.locks import flock_waiters
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.compose.tree_cache import TreeCache
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.core.file_hashes import FileHashes, stat_identity
from sparkflake.oci.layer_input import walk_tree
from sparkflake.workflows.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "profiles" / "fixture"


def test_file_hashes_rehash_after_rewrite_with_same_mtime(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"one")
    hashes = FileHashes(tmp_path / "table.json", racy_window_ns=0)
    assert hashes.sha256(target) == hashlib.sha256(b"one").hexdigest()
    hashes.save()
    assert str(target) in (tmp_path / "table.json").read_text()
    status = target.stat()
    target.write_bytes(b"two")
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))  # mtime restored, ctime not
    again = FileHashes(tmp_path / "table.json", racy_window_ns=0)
    assert again.sha256(target) == hashlib.sha256(b"two").hexdigest()


def _table_with_planted_digest(tmp_path: Path, planted: object) -> tuple[Path, Path]:
    """A file ``f`` (b"content") remembered in ``table.json``, its digest replaced by
    ``planted``: (the file, the table)."""
    target = tmp_path / "f"
    target.write_bytes(b"content")
    table = tmp_path / "table.json"
    settled = FileHashes(table, racy_window_ns=0)
    settled.sha256(target)
    settled.save()
    document = json.loads(table.read_text())
    document["files"][str(target)][-1] = planted
    table.write_text(json.dumps(document))
    return target, table


def test_file_hashes_trust_the_table_only_for_the_same_identity(tmp_path: Path) -> None:
    """A remembered digest is returned without reading the file while the identity is
    the same (shown by planting another digest in the table); a fresh file (changed
    within the racy window) is neither looked up nor remembered."""
    target, table = _table_with_planted_digest(tmp_path, "planted")
    assert FileHashes(table, racy_window_ns=0).sha256(target) == "planted"
    fresh = FileHashes(table)  # default window: the file was written just now
    assert fresh.sha256(target) == hashlib.sha256(b"content").hexdigest()
    table.unlink()
    fresh.sha256(target)
    fresh.save()
    assert not table.exists()  # nothing new was remembered, nothing written


@pytest.mark.parametrize("planted", [12345, None, ["a"], {"sha256": "x"}])
def test_file_hashes_read_the_file_when_the_remembered_digest_is_no_string(tmp_path: Path, planted: object) -> None:
    """The table is JSON on disk: a record whose identity matches but whose digest is not
    a string (a damaged or hand-edited table) is no digest; the file is read, and the
    sha256 is a string (mypy: the table's values are Any)."""
    target, table = _table_with_planted_digest(tmp_path, planted)
    assert FileHashes(table, racy_window_ns=0).sha256(target) == hashlib.sha256(b"content").hexdigest()


def test_file_hashes_never_remember_a_build_s_work_tree(tmp_path: Path) -> None:
    """Files under a directory given to never_remember are hashed (right) but leave no
    record, so the table is not rewritten; a file beside that directory is remembered."""
    work = tmp_path / "work"
    (work / "deep").mkdir(parents=True)
    inside, beside = work / "deep" / "f", tmp_path / "work-sibling"
    inside.write_bytes(b"scratch")
    beside.write_bytes(b"kept")
    table = tmp_path / "table.json"
    hashes = FileHashes(table, racy_window_ns=0)
    hashes.never_remember(work)
    assert hashes.sha256(inside) == hashlib.sha256(b"scratch").hexdigest()
    hashes.save()
    assert not table.exists()
    assert hashes.sha256(beside) == hashlib.sha256(b"kept").hexdigest()
    hashes.save()
    assert set(json.loads(table.read_bytes())["files"]) == {str(beside)}


def test_file_hashes_name_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing: cannot read: No such file"):
        FileHashes(None).sha256(tmp_path / "missing")


def test_tree_cache_reuses_intact_and_rebuilds_changed(tmp_path: Path) -> None:
    cache = TreeCache(tmp_path / "trees")
    builds = []

    def build(tree: Path) -> dict:
        builds.append(tree)
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "file").write_text("content")
        os.symlink("sub/file", tree / "link")
        return {"files": 1}

    first = cache.get_or_build({"kind": "t", "inputs": ["a"]}, build)
    assert not first.reused and first.manifest == {"files": 1}
    second = cache.get_or_build({"kind": "t", "inputs": ["a"]}, build)
    assert second.reused and second.tree == first.tree and len(builds) == 1
    (second.tree / "sub" / "file").write_text("CONTENT")
    third = cache.get_or_build({"kind": "t", "inputs": ["a"]}, build)
    assert not third.reused and len(builds) == 2
    assert (third.tree / "sub" / "file").read_text() == "content"
    (third.tree / "extra").write_text("x")
    assert not cache.get_or_build({"kind": "t", "inputs": ["a"]}, build).reused
    other = cache.get_or_build({"kind": "t", "inputs": ["b"]}, build)
    assert other.tree != third.tree
    assert other.walk == walk_tree(other.tree)  # handed on: the walk that recorded it
    assert cache.get_or_build({"kind": "t", "inputs": ["b"]}, build).walk == other.walk


def test_tree_cache_checks_an_entry_of_the_earlier_format_once(tmp_path: Path) -> None:
    """Entries written before the walk digest list every path's identity: such an entry
    is checked against its list, then given its digest; a list that no longer matches
    discards the entry."""
    import json

    from sparkflake.compose.tree_cache import ENTRY_FILE, _listed_identity

    cache = TreeCache(tmp_path / "trees")
    builds = []

    def build(tree: Path) -> dict:
        builds.append(tree)
        tree.mkdir(parents=True)
        (tree / "file").write_text("content")
        return {}

    entry = cache.get_or_build({"kind": "t"}, build)
    entry_file = entry.tree.parent / ENTRY_FILE
    entry_file.write_text(json.dumps({"identity": _listed_identity(entry.tree)}))
    again = cache.get_or_build({"kind": "t"}, build)
    assert again.reused and len(builds) == 1
    assert json.loads(entry_file.read_text()) == {"walk": walk_tree(entry.tree).digest}
    stale = _listed_identity(entry.tree)
    stale["file"][1] += 1  # another size than the tree has
    entry_file.write_text(json.dumps({"identity": stale}))
    assert not cache.get_or_build({"kind": "t"}, build).reused and len(builds) == 2


def test_walk_tree_changes_with_every_kind_of_change(tmp_path: Path) -> None:
    """The walk digest is stable while nothing changes and differs after each change a
    cache must notice, including a rewrite that restores size and mtime."""
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"12345")
    os.symlink("d/f", root / "link")
    seen = {walk_tree(root).digest}
    assert walk_tree(root).digest in seen

    def changed() -> None:
        digest = walk_tree(root).digest
        assert digest not in seen
        seen.add(digest)

    status = (root / "d" / "f").stat()
    (root / "d" / "f").write_bytes(b"54321")
    os.utime(root / "d" / "f", ns=(status.st_atime_ns, status.st_mtime_ns))
    changed()
    (root / "d" / "f").chmod(0o600)
    changed()
    (root / "d" / "g").write_bytes(b"")
    changed()
    os.link(root / "d" / "g", tmp_path / "outside")  # a hard link from outside the tree
    changed()
    os.rename(root / "d" / "g", root / "d" / "h")
    changed()
    os.unlink(root / "link")
    os.symlink("d/h", root / "link")
    changed()
    (root / "d" / "h").unlink()
    changed()


def test_build_reuses_trees_and_refuses_nothing_when_intact(tmp_path: Path) -> None:
    request = BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "o", cache_root=tmp_path / "c", offline=True, keep_work=True)
    first = build_profile(request)
    assert first.assembly is not None and not any(first.assembly.trees_reused.values())
    second = build_profile(request)
    assert second.assembly is not None and all(second.assembly.trees_reused.values())
    assert second.image.manifest_digest == first.image.manifest_digest
    # A cached tree changed behind the build's back is assembled again, not trusted.
    so = second.assembly.vllm_tree / "opt/venv/lib/python3.11/site-packages/vllm/_C.abi3.so"
    so.write_bytes(so.read_bytes() + b"\0")
    third = build_profile(request)
    assert third.assembly is not None and third.assembly.trees_reused["vllm"] is False
    assert third.image.manifest_digest == first.image.manifest_digest


def test_cached_trees_keep_their_elf_facts_and_lose_them_when_changed(tmp_path: Path) -> None:
    """A validated cached tree is not re-read for the ELF check (the machines are kept
    beside the entry); its layer is a layer-cache hit; a changed tree loses its facts with
    its entry; a layer record whose blob left the store is not trusted."""
    request = BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "o", cache_root=tmp_path / "c", offline=True, keep_work=True)
    first = build_profile(request)
    assert first.assembly is not None
    # the retained-native manifest from the vllm tree's kept facts is the one read from it
    from sparkflake.compose.assembly import package_elf_files
    from sparkflake.compose.source_overlay import retained_native_manifest

    site = first.assembly.vllm_tree / "opt/venv/lib/python3.11/site-packages"
    kept = package_elf_files(site / "vllm", first.assembly.cached_trees)
    assert kept is not None and len(kept) > 0
    assert retained_native_manifest(site, "vllm", wheel_filename="w", wheel_sha256="s", elf_files=kept) == \
        retained_native_manifest(site, "vllm", wheel_filename="w", wheel_sha256="s")
    assert package_elf_files(site / "vllm", {}) is None
    facts = sorted(p.name for p in (tmp_path / "c" / "trees").glob("*/fact-*.json"))
    lower = len(first.image.layers) - 1
    # the vllm tree and the extracted source also keep which files start with the ELF magic
    assert facts == ["fact-elf-machines.json"] * lower + ["fact-elf-magic.json"] * 2, facts
    second = build_profile(request)
    assert [layer.from_cache for layer in second.image.layers[:-1]] == [True] * lower
    assert second.image.manifest_digest == first.image.manifest_digest
    # The vllm tree changes behind the build's back: entry and facts are gone, the tree
    # is assembled again (so back to its true bytes) and its layer comes out the same.
    assert second.assembly is not None
    vllm_entry = second.assembly.vllm_tree.parent
    so = second.assembly.vllm_tree / "opt/venv/lib/python3.11/site-packages/vllm/_C.abi3.so"
    so.write_bytes(so.read_bytes() + b"\0")
    marker = vllm_entry / "fact-marker.json"
    marker.write_text('{"value": 1}')
    third = build_profile(request)
    assert not marker.exists()
    assert third.image.manifest_digest == first.image.manifest_digest
    # A layer record whose blob was removed from the store is rebuilt, not trusted.
    blob = third.image.layers[0].blob_path
    blob.unlink()
    fourth = build_profile(request)
    assert fourth.image.layers[0].from_cache is False
    assert fourth.image.layers[0].digest == first.image.layers[0].digest


@settings(max_examples=40, deadline=None)
@given(files=st.dictionaries(
    st.sampled_from(["a", "b.so", "d/c", "d/e/f.so", "g"]),
    st.one_of(st.binary(max_size=8), st.binary(max_size=8).map(lambda tail: b"\x7fELF" + tail),
              st.sampled_from([b"\x7fEL", b"\x7fELF", b"\x7fELF\x02\x01"]),
              st.just("link")),
))
def test_elf_magic_of_a_cached_tree_equals_reading_each_file(tmp_path_factory, files) -> None:
    """The kept elf-magic fact answers as reading the first bytes would, for every path
    of the tree (symlinks are not files); a file outside the tree is read."""
    from sparkflake.compose.assembly import elf_magic_lookup
    from sparkflake.compose.source_overlay import is_elf_file

    root = tmp_path_factory.mktemp("cache")

    def build(tree: Path) -> dict:
        tree.mkdir()
        for name, content in files.items():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if content == "link":
                target.symlink_to("/bin/sh")  # an ELF file elsewhere: a symlink is no ELF file here
            else:
                target.write_bytes(content)
        return {}

    entry = TreeCache(root).get_or_build({"kind": "test"}, build)
    outside = root / "outside"
    outside.write_bytes(b"\x7fELF-outside")
    for answers in (elf_magic_lookup([entry]), elf_magic_lookup([TreeCache(root).get_or_build({"kind": "test"}, build)])):
        for name, content in files.items():
            expected = content != "link" and is_elf_file(entry.tree / name)
            assert answers(entry.tree / name) is expected, name
        assert answers(outside) is True


def _reference_elf_walk(root):
    """The walk iter_elf_files used to do (os.walk, sorted, lstat, relpath): the order the
    retained-native manifest records, which must not change."""
    import os
    import stat as stat_module

    from sparkflake.compose.elf import parse_header

    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            full = os.path.join(dirpath, filename)
            status = os.lstat(full)
            if not stat_module.S_ISREG(status.st_mode) or status.st_size < 20:
                continue
            with open(full, "rb") as handle:
                header = parse_header(handle.read(20))
            if header is not None:
                found.append((os.path.relpath(full, root), status.st_size, header.machine))
    return found


_ELF_AARCH64 = bytes.fromhex("7f454c460201010000000000000000000300b700") + b"\0" * 44
_ELF_X86_64 = bytes.fromhex("7f454c4602010100000000000000000003003e00") + b"\0" * 44


def _layouts(names: list[str], kinds: list[str]) -> st.SearchStrategy:
    """Trees as (path as a list of names, kind) pairs: nested directories, links."""
    return st.lists(st.tuples(st.lists(st.sampled_from(names), min_size=1, max_size=4), st.sampled_from(kinds)), max_size=25)


def _placeable(root: Path, parts: list[str]) -> bool:
    """No ancestor of the path is a link or a file, and nothing is there yet."""
    ancestors = [root.joinpath(*parts[:i]) for i in range(1, len(parts))]
    return not any(a.is_symlink() or (a.exists() and not a.is_dir()) for a in ancestors) and not os.path.lexists(root.joinpath(*parts))


@settings(max_examples=40, deadline=None)
@given(layout=_layouts(["a", "b", "a-b", "a.b", "Z", "_"], ["aarch64", "x86_64", "text", "short", "link", "dirlink"]))
def test_elf_walk_keeps_the_os_walk_order_and_the_machines(tmp_path_factory, layout):
    import hashlib
    import os

    from sparkflake.compose.elf import check_machine, elf_machines, iter_elf_files

    root = tmp_path_factory.mktemp("elf")
    for parts, kind in layout:
        path = root.joinpath(*parts)
        if not _placeable(root, parts):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            os.symlink("a", path)
        elif kind == "dirlink":
            os.symlink(".", path)
        else:
            content = {"aarch64": _ELF_AARCH64, "x86_64": _ELF_X86_64, "text": b"#!/bin/sh\n" * 5, "short": b"\x7fELF"}[kind]
            path.write_bytes(content)
    listed = list(iter_elf_files(root, with_sha256=True))
    assert [(e.path, e.size, e.machine) for e in listed] == _reference_elf_walk(root)
    for elf in listed:
        assert elf.sha256 == hashlib.sha256((root / elf.path).read_bytes()).hexdigest()
    assert elf_machines(root) == [[e.path, e.machine] for e in listed]
    x86 = [e.path for e in listed if e.machine != 183]
    if x86:
        with pytest.raises(CheckFailed, match="elf-machine|not AArch64") as refused:
            check_machine(root, "linux/arm64")
        assert x86[0] in str(refused.value)
    else:
        assert check_machine(root, "linux/arm64") == len(listed)
        assert check_machine(root, "linux/arm64", elf_machines(root)) == len(listed)


@settings(max_examples=40, deadline=None)
@given(layout=_layouts(["pkg", "a", "b", "a-b", "a.b", "Z"], ["file", "file", "executable", "link", "dirlink", "danglinglink"]))
def test_the_validating_walk_lists_and_hashes_as_the_file_system_would(tmp_path_factory, layout) -> None:
    """Listing a package of a cached tree from the walk that validated it gives what
    walking it now gives (files, refusals); the file hash taken under the walk's
    identity is the file's sha256; outside the walked trees nothing is answered."""
    from sparkflake.compose.assembly import hash_walked
    from sparkflake.compose.source_overlay import package_files
    from sparkflake.compose.tree_cache import WalkedTrees

    root = tmp_path_factory.mktemp("walked")

    def build(tree: Path) -> dict:
        (tree / "pkg").mkdir(parents=True)
        for parts, kind in layout:
            path = tree.joinpath(*parts)
            if not _placeable(tree, parts):
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind in ("file", "executable"):
                path.write_bytes("/".join(parts).encode())
                path.chmod(0o755 if kind == "executable" else 0o644)
            else:
                os.symlink({"link": "/bin/sh", "dirlink": ".", "danglinglink": "nowhere"}[kind], path)
        return {}

    TreeCache(root / "cache").get_or_build({"kind": "walked"}, build)
    entry = TreeCache(root / "cache").get_or_build({"kind": "walked"}, build)  # reused: validated by its walk
    assert entry.reused
    walked = WalkedTrees([entry])
    hashes = FileHashes(root / "table.json", racy_window_ns=0)
    for directory in [entry.tree / "pkg", *(p for p in (entry.tree / "pkg").rglob("*") if p.is_dir() and not p.is_symlink())]:
        listing = walked.under(directory)
        assert listing is not None
        try:
            expected = package_files(directory)
        except InputError as refused:
            with pytest.raises(InputError) as also:
                package_files(directory, listing)
            assert "symlinks are not accepted" in also.value.message and "symlinks are not accepted" in refused.message
            continue
        assert package_files(directory, listing) == expected
        for path in expected.values():
            assert stat_identity(walked.status(path)) == stat_identity(os.lstat(path))  # not atime: reading moves it
            assert hash_walked(hashes, walked, path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert walked.under(root) is None and walked.status(root / "table.json") is None
    assert walked.under(entry.tree / "pkg" / "absent") is None


def test_scratch_on_the_memory_file_system_is_private_and_cleaned(tmp_path: Path, monkeypatch) -> None:
    """The patched-source scratch goes to /dev/shm (a copy across file systems works),
    is gone after the build, and a killed build's leftover is removed by the next one."""
    from sparkflake.compose.source_overlay import _copy_file
    from sparkflake.workflows import build as build_module

    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(build_module, "MEMORY_SCRATCH", shm)
    from sparkflake.core.atomic_write import generated_name

    leftover = shm / generated_name("sparkflake-fixture", pid=999999999)
    (leftover / "patched-source").mkdir(parents=True)
    mine = shm / generated_name("sparkflake-fixture")
    mine.mkdir()
    request = BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "o", cache_root=tmp_path / "c", offline=True)
    result = build_profile(request)
    assert result.image.manifest_digest
    assert sorted(p.name for p in shm.iterdir()) == [mine.name]  # ours cleaned, the dead one too
    real_shm = Path("/dev/shm")
    assert real_shm.is_dir(), "CI machines have /dev/shm"
    source = real_shm / f"sparkflake-test-{os.getpid()}"
    source.write_bytes(os.urandom(3 << 20) + b"tail")
    try:
        _copy_file(str(source), str(tmp_path / "copied"))  # tmpfs -> disk: another file system
        assert (tmp_path / "copied").read_bytes() == source.read_bytes()
    finally:
        source.unlink()


@settings(max_examples=30, deadline=None)
@given(size=st.integers(0, 3 << 20), asked_more=st.integers(0, 5000))
def test_copy_bytes_within_and_across_file_systems(tmp_path_factory, size, asked_more):
    """The shared copy: kernel copy on one file system, plain reads/writes from tmpfs to
    disk (copy_file_range refused); asking for more than the source holds returns what
    was there."""
    from sparkflake.core.atomic_write import copy_bytes

    content = os.urandom(size)
    disk = tmp_path_factory.mktemp("copy")
    for source_dir in (disk, Path("/dev/shm")):
        source = source_dir / f"sparkflake-copy-test-{os.getpid()}"
        source.write_bytes(content)
        target = disk / "target"
        try:
            with open(source, "rb") as reader, open(target, "wb") as writer:
                assert copy_bytes(reader.fileno(), writer.fileno(), size + asked_more) == size
            assert target.read_bytes() == content
        finally:
            source.unlink()


def _bytes_read() -> int:
    with open("/proc/self/io") as report:
        return int(dict(line.split(": ") for line in report.read().splitlines())["rchar"])


def test_an_input_fetched_by_this_run_is_hashed_once_and_a_cached_one_again(tmp_path: Path) -> None:
    """The build's stage 2 re-hashed every input after fetching it: a wheel imported (or
    downloaded) and hashed on its way in was read and hashed again moments later, by the
    same run. Read once now; an input that was already in the cache is still re-hashed
    (and refused when altered)."""
    import dataclasses

    from sparkflake.compose.composition import load_composition
    from sparkflake.compose.inputs import fetch_inputs
    from sparkflake.core.blob_cache import BlobCache
    from sparkflake.lock.pins import WheelPin

    content = os.urandom(32 << 20)
    supplied = tmp_path / "supplied"
    supplied.mkdir()
    wheel = supplied / "bigpkg-1.0-py3-none-any.whl"
    wheel.write_bytes(content)
    pin = WheelPin(name="bigpkg", version="1.0", filename=wheel.name, sha256=hashlib.sha256(content).hexdigest(),
                   size=len(content), tags=("py3-none-any",), urls=(f"https://files.example/{wheel.name}",))
    composition = load_composition(str(FIXTURE))
    composition = dataclasses.replace(composition, wheels=(*composition.wheels, pin))
    cache = BlobCache(tmp_path / "cache")
    before = _bytes_read()
    fetched = fetch_inputs(composition, cache, from_dirs=[supplied], offline=True,
                           hashes=FileHashes(tmp_path / "table.json"))
    read = _bytes_read() - before
    assert fetched.paths["bigpkg"].read_bytes() == content
    assert read < 1.5 * len(content), f"fetching and verifying read {read / len(content):.2f}x the input"
    before = _bytes_read()
    fetch_inputs(composition, cache, offline=True)
    assert _bytes_read() - before >= len(content)  # in the cache before this run: hashed again
    entry = cache.blob_path(pin.sha256)
    entry.chmod(0o644)
    entry.write_bytes(content[:-1] + bytes([content[-1] ^ 1]))
    with pytest.raises(CheckFailed, match="bigpkg"):
        fetch_inputs(composition, cache, offline=True)


def test_two_builds_of_one_tree_at_once_build_it_once(tmp_path: Path) -> None:
    """Two builds sharing a cache asked for the same tree while the first was still making
    it both made it: the second removed the first's entry (swapped in, entry.json not yet
    written) and swapped its own over it, and one of them failed ("No such file or
    directory" on its .entry.json partial); seen with two `sparkflake build`s of the fixture
    on an empty cache, 3 runs in 10. Now the second waits for the first and reuses its entry."""
    import threading

    from sparkflake.compose.tree_cache import recipe_key

    cache = TreeCache(tmp_path / "trees")
    recipe = {"kind": "t", "inputs": ["shared"]}
    first_building, second_building, release_first = threading.Event(), threading.Event(), threading.Event()
    builds: list[Path] = []
    results: dict[str, object] = {}

    def build(tree: Path) -> dict:
        builds.append(tree)
        (second_building if first_building.is_set() else first_building).set()
        tree.mkdir(parents=True)
        (tree / "file").write_text("content")
        if len(builds) == 1:
            release_first.wait(60)
        return {"files": 1}

    def run(name: str) -> None:
        try:
            results[name] = cache.get_or_build(recipe, build)
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            results[name] = exc

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert first_building.wait(60)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    # the second is either building too (the old way) or waiting for the first's lock
    lock = tmp_path / "locks" / recipe_key(recipe)
    deadline = time.monotonic() + 60
    while not second_building.is_set() and flock_waiters(lock) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    release_first.set()
    first.join(60)
    second.join(60)
    assert len(builds) == 1, "the tree was made twice at once"
    made, reused = results["first"], results["second"]
    assert not isinstance(made, BaseException) and not isinstance(reused, BaseException), results
    assert reused.reused and reused.tree == made.tree
    assert walk_tree(made.tree) == made.walk == reused.walk
