"""Stage 3 of a build: the layer trees. The OS base, the Python environment split in groups
(CUDA libraries, torch, the rest, vLLM), the source overlay with its anchored patches, the
source packages laid over their wheels; both manifests (retained native files, overlay).

Layer order puts the big, stable parts below (OS base, CUDA libraries, torch), so a change
of the source overlay or a patch rebuilds only the top layer."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import canonicalize_name

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes, readable_json_bytes
from ..core.digest import sha256_file
from ..core.errors import CheckFailed, InputError
from ..core.file_hashes import FileHashes, stat_identity
from ..core.progress import ProgressCallback
from ..core.tree_digest import git_tree_id, nar_digest_and_git_tree, nar_hash
from ..lock.pins import GitPin, Lock, SdistPin, WheelPin
from ..lock.target import InstallTarget
from ..oci.layer_input import LayerInput, TreeSource
from .composition import OVERLAY_PACKAGE, Composition
from .debian_base import DebInput, assemble_base
from .elf import ElfFile, elf_machines, iter_elf_files
from .inputs import FetchedInputs
from .native_interface import PythonScan, native_names, python_interface
from .python_env import DEFAULT_PREFIX, CollisionRule, WheelInput, assemble_python_env
from .source_overlay import (
    elf_magic_paths,
    extract_sdist_package,
    is_elf_file,
    overlay_manifest,
    package_files,
    plan_overlay,
    retained_native_manifest,
    wheel_native_files,
    write_overlay_tree,
    write_patched_source,
)
from .source_packages import PackageOverlay, overlay_package, source_packages_document
from .tree_cache import CachedTree, TreeCache, WalkedTrees

# Python environment layers, bottom to top: name, predicate over a normalized name.
PYTHON_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("python-cuda", lambda name: name.startswith(("nvidia-", "cuda-"))),
    ("python-torch", lambda name: name in ("torch", "triton")),
    ("python-env", lambda name: name != OVERLAY_PACKAGE),
    ("vllm", lambda name: name == OVERLAY_PACKAGE),
)


@dataclass(frozen=True)
class LayerTree:
    name: str
    layer_input: LayerInput
    created_by: str
    roots: tuple[Path, ...]  # host trees (for ELF checks)


@dataclass(frozen=True)
class Assembly:
    work_dir: Path
    base_tree: Path
    python_trees: Mapping[str, Path]  # group name -> tree whose root stands for "/"
    site_packages: str  # image path, e.g. /opt/venv/lib/python3.11/site-packages
    vllm_tree: Path
    source_root: Path  # holds vllm/ as extracted from the source
    patched_source: Path  # the patched source package tree (vllm/)
    overlay_tree: Path  # site-packages-relative files the overlay adds/replaces
    overlay_deletions: tuple[str, ...]
    retained_native: Mapping[str, Any]
    retained_native_bytes: bytes
    overlay: Mapping[str, Any]
    overlay_bytes: bytes
    source_identity: Mapping[str, Any]
    nccl_library_sha256: str
    env_distributions: tuple[Mapping[str, Any], ...]
    hashes: FileHashes | None = None
    trees_reused: Mapping[str, bool] = field(default_factory=dict)
    cached_trees: Mapping[Path, CachedTree] = field(default_factory=dict)  # tree -> its cache entry
    package_overlays: tuple[PackageOverlay, ...] = ()
    walked: WalkedTrees = field(default_factory=lambda: WalkedTrees(()))  # the cached trees' validating walks

    def hash_file(self, path: Path) -> str:
        return hash_walked(self.hashes, self.walked, path)

    def lower_layers(self) -> list[LayerTree]:
        return lower_layer_trees(self.base_tree, self.python_trees, self.cached_trees)


def hash_walked(hashes: FileHashes | None, walked: WalkedTrees, path: Path) -> str:
    """sha256 of ``path``: through the file-hash records when there are any, under the
    identity the cached tree's validating walk took when the path lies in one (see
    ``WalkedTrees``), else under one taken now."""
    if hashes is None:
        return sha256_file(path)
    status = walked.status(path)
    if status is None or not stat.S_ISREG(status.st_mode):  # a symlink's record is its target's
        return hashes.sha256(path)
    return hashes.sha256(path, stat_identity(status))


def lower_layer_trees(
    base_tree: Path, python_trees: Mapping[str, Path], cached_trees: Mapping[Path, CachedTree]
) -> list[LayerTree]:
    """One layer per tree, the OS base first; a tree from the tree cache hands on the walk
    that validated it, so the layer cache's input fingerprint does not walk it again."""
    def source(tree: Path) -> TreeSource:
        entry = cached_trees.get(tree)
        return TreeSource(str(tree), "/", walk=entry.walk if entry is not None else None)

    layers = [LayerTree("os-base", LayerInput(sources=(source(base_tree),)),
                        "sparkflake: OS base from Debian packages", (base_tree,))]
    for name, tree in python_trees.items():
        layers.append(
            LayerTree(name, LayerInput(sources=(source(tree),)), f"sparkflake: Python environment ({name})", (tree,))
        )
    return layers


def _target_for(lock: Lock) -> InstallTarget:
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(lock.target.architecture, lock.target.architecture)
    major, minor = (int(part) for part in lock.target.python.split(".")[:2])
    glibc = tuple(int(part) for part in lock.target.glibc.split("."))
    full = lock.target.python if lock.target.python.count(".") == 2 else InstallTarget().python_full_version
    if (major, minor) != InstallTarget().python_version:
        full = f"{major}.{minor}"
    return InstallTarget(
        platform=lock.target.platform,
        machine=machine,
        debian_architecture=lock.target.architecture,
        python_version=(major, minor),
        python_full_version=full,
        glibc=(glibc[0], glibc[1]),
    )


def checked_source_tree(pin: GitPin, source_tree: Path | None) -> Path:
    """A checkout of a git input, bound to the lock by its git tree id (and, for a tree
    without ``.git``, its NAR hash): what Nix's fetchGit would give for ``rev``."""
    if source_tree is None:
        raise InputError(
            f"{pin.name}: a git source ({pin.urls[0]} at {pin.rev}) is built from a checkout: pass "
            "--source-tree DIR (its git tree id must be the lock's tree)"
        )
    if not (source_tree / OVERLAY_PACKAGE).is_dir():
        raise InputError(f"--source-tree {source_tree}: no {OVERLAY_PACKAGE}/ directory")
    tree = git_tree_id(source_tree)
    if tree != pin.tree:
        raise CheckFailed(
            f"--source-tree {source_tree}: git tree {tree}, the lock's {pin.name} says {pin.tree} (rev {pin.rev})",
            check_id="inputs",
        )
    if not (source_tree / ".git").exists():
        nar = nar_hash(source_tree).sri
        if nar != pin.nar_hash:
            raise CheckFailed(
                f"--source-tree {source_tree}: NAR hash {nar}, the lock's {pin.name} says {pin.nar_hash}",
                check_id="inputs",
            )
    return source_tree


def _collision_rules_by_group(
    collisions: Sequence[CollisionRule], group_pins: Mapping[str, Sequence[WheelPin]]
) -> dict[str, tuple[CollisionRule, ...]]:
    """Each collision rule goes to the Python layer group holding all of its wheels; a rule
    whose wheels sit in different layers cannot be applied by one group's merge."""
    group_of = {pin.filename: group for group, pins in group_pins.items() for pin in pins}
    by_group: dict[str, list[CollisionRule]] = {group: [] for group in group_pins}
    for rule in collisions:
        if any(wheel not in group_of for wheel in rule.wheels):
            continue  # the rule names a wheel this composition does not install
        groups = {group_of[wheel] for wheel in rule.wheels}
        if len(groups) != 1:
            raise InputError(
                f"collision rule for {rule.path} names wheels in different layers "
                f"({', '.join(f'{w}: {group_of[w]}' for w in rule.wheels)}); the build layers "
                "the Python environment by group and cannot apply it"
            )
        by_group[groups.pop()].append(rule)
    return {group: tuple(found) for group, found in by_group.items()}


def python_group(name: str) -> str:
    normalized = str(canonicalize_name(name))
    for group, member in PYTHON_GROUPS:
        if member(normalized):
            return group
    raise InputError(f"{name}: no Python layer group")


def assemble(
    composition: Composition,
    fetched: FetchedInputs,
    work_dir: Path,
    *,
    progress: ProgressCallback | None = None,
    tree_cache: TreeCache | None = None,
    hashes: FileHashes | None = None,
    source_tree: Path | None = None,
    scratch_dir: Path | None = None,
    on_lower_trees: Callable[[list[LayerTree]], None] | None = None,
) -> Assembly:
    """All layer trees and both manifests. The OS base and Python trees come from
    ``tree_cache`` when it holds them intact; the overlay trees are made in ``work_dir``.
    ``scratch_dir`` (default ``work_dir``) takes the patched source copy, which is only
    hashed: a memory file system there saves creating thousands of files on disk.
    ``on_lower_trees`` gets the lower layers' trees as soon as they exist, before the
    overlay is planned (the build makes those layers and starts the archive there)."""
    profile = composition.profile
    target = _target_for(composition.locks[0])
    work_dir.mkdir(parents=True, exist_ok=True)
    reused: dict[str, bool] = {}
    entries: dict[Path, CachedTree] = {}
    walked = WalkedTrees(())

    def hash_file(path: Path) -> str:
        return hash_walked(hashes, walked, path)

    def cached(name: str, recipe: dict[str, Any], build: Callable[[Path], Mapping[str, Any]]) -> tuple[Path, Mapping[str, Any]]:
        if tree_cache is None:
            tree = work_dir / name
            return tree, build(tree)
        entry = tree_cache.get_or_build(recipe, build)
        reused[name] = entry.reused
        entries[entry.tree] = entry
        return entry.tree, entry.manifest

    debs = [DebInput(d.package, d.version, d.architecture, fetched.paths[d.name]) for d in composition.debs]
    # the lock's target, not a package's: an Architecture: all package (adduser, which
    # libibverbs1 depends on) may sort first
    architecture = composition.locks[0].target.architecture
    base_tree, _base_manifest = cached(
        "os-base",
        {"kind": "os-base", "platform": profile.platform, "debs": sorted([d.name, d.sha256] for d in composition.debs)},
        lambda tree: dataclasses.asdict(
            assemble_base(debs, tree, platform=profile.platform, architecture=architecture, progress=progress)
        ),
    )
    groups: dict[str, list[WheelInput]] = {}
    group_pins: dict[str, list[WheelPin]] = {}
    for pin in composition.wheels:
        group = python_group(pin.name)
        groups.setdefault(group, []).append(WheelInput(pin.name, pin.version, pin.filename, fetched.paths[pin.name]))
        group_pins.setdefault(group, []).append(pin)
    rules = _collision_rules_by_group(composition.collisions, group_pins)
    python_trees: dict[str, Path] = {}
    owners: dict[str, tuple[str, str]] = {}
    distributions: list[Mapping[str, Any]] = []
    for group, _member in PYTHON_GROUPS:
        if group not in groups:
            continue
        recipe = {
            "kind": "python-env",
            "group": group,
            "prefix": DEFAULT_PREFIX,
            "target": dataclasses.asdict(target),
            "wheels": sorted([pin.filename, pin.sha256] for pin in group_pins[group]),
            "waivers": sorted(dataclasses.astuple(w) for w in composition.waivers),
            "collisions": sorted(json.dumps(dataclasses.asdict(r), sort_keys=True) for r in rules[group]),
        }

        def build_env(
            tree: Path, wheels: list[WheelInput] = groups[group], group_rules: tuple[CollisionRule, ...] = rules[group]
        ) -> dict[str, Any]:
            return dataclasses.asdict(
                assemble_python_env(
                    wheels, tree, target=target, progress=progress, waivers=composition.waivers, collisions=group_rules
                )
            )

        tree, manifest = cached(group, recipe, build_env)
        distributions.extend(manifest["distributions"])
        for image_path, wheel in manifest["owners"].items():
            previous = owners.get(image_path)
            if previous is not None:
                other_tree = python_trees[previous[1]]
                same = hash_file(other_tree / image_path.lstrip("/")) == hash_file(tree / image_path.lstrip("/"))
                if not same:
                    raise CheckFailed(
                        f"{image_path} is written by {previous[0]} and by {wheel} with different bytes",
                        check_id="path-conflict",
                    )
            owners[image_path] = (wheel, group)
        python_trees[group] = tree
    if on_lower_trees is not None:
        on_lower_trees(lower_layer_trees(base_tree, python_trees, entries))
    site_packages = f"{DEFAULT_PREFIX}/lib/python{target.python_minor}/site-packages"
    vllm_tree = python_trees["vllm"]
    vllm_site = vllm_tree / site_packages.lstrip("/")

    # The overlay source and its patches.
    source = composition.source
    if isinstance(source, SdistPin):
        # The extracted package is kept like the other trees (keyed by the sdist's sha256)
        # and only read from here on: the patched copy is written in work_dir.
        sdist_path = fetched.paths[source.name]
        source_root, _ = cached(
            "source",
            {"kind": "sdist-package", "sdist_sha256": source.sha256, "package": OVERLAY_PACKAGE},
            lambda tree: {"package": str(extract_sdist_package(sdist_path, OVERLAY_PACKAGE, tree).name)},
        )
        source_identity: dict[str, Any] = {
            "kind": "sdist",
            "name": source.name,
            "filename": source.filename,
            "version": source.version,
            "sha256": source.sha256,
            "uri": source.urls[0],
        }
    else:
        source_root = checked_source_tree(source, source_tree) if source_tree is not None else fetched.git_trees[source.name]
        wheel = composition.roles["vllm_wheel"]
        source_identity = {
            "kind": "git",
            "name": source.name,
            "uri": source.urls[0],
            "rev": source.rev,
            "tree": source.tree,
            "nar_hash": source.nar_hash,
            "version": getattr(wheel, "version", ""),
        }
    is_elf = elf_magic_lookup([entries[tree] for tree in (vllm_tree, source_root) if tree in entries])
    # the vllm and source trees first: nearly every later lookup is inside one of them
    walked = WalkedTrees(sorted(entries.values(), key=lambda entry: entry.tree not in (vllm_tree, source_root)))
    plan = plan_overlay(
        vllm_site, source_root, OVERLAY_PACKAGE, composition.patch_set, hash_file, is_elf,
        source_listing=walked.under(source_root / OVERLAY_PACKAGE), lstat=lambda path: walked.status(path) or os.lstat(path),
    )
    patched_root = (scratch_dir or work_dir) / "patched-source"
    patched_package = write_patched_source(source_root, OVERLAY_PACKAGE, plan, patched_root)
    overlay_tree = work_dir / "overlay"
    overlay_tree.mkdir()
    deleted = write_overlay_tree(plan, overlay_tree)

    wheel_pin = composition.roles["vllm_wheel"]
    assert isinstance(wheel_pin, WheelPin)
    retained = retained_native_manifest(
        vllm_site, OVERLAY_PACKAGE, wheel_filename=wheel_pin.filename, wheel_sha256=wheel_pin.sha256,
        hash_file=hash_file, elf_files=package_elf_files(vllm_site / OVERLAY_PACKAGE, entries),
    )
    # one read of each patched file for both identities (the copy is new on every build)
    patched_nar, patched_git = nar_digest_and_git_tree(patched_package)
    overlay = overlay_manifest(
        plan,
        source_identity=source_identity,
        patch_set_sha256=composition.patch_set.patch_set_sha256,
        patched_tree_git=patched_git,
        patched_tree_nar_hash=patched_nar.nar_hash.sri,
        install_prefix=site_packages,
    )
    package_overlays = [
        overlay_package(role, wheel, pin, fetched.git_trees[pin.name], python_trees=python_trees,
                        site_packages=site_packages, overlay_tree=overlay_tree, hash_file=hash_file)
        for role, wheel, pin in composition.package_sources
    ]
    nccl_library = _nccl_library_sha256(composition, fetched, hashes)
    return Assembly(
        work_dir=work_dir,
        base_tree=base_tree,
        python_trees=python_trees,
        site_packages=site_packages,
        vllm_tree=vllm_tree,
        source_root=source_root,
        patched_source=patched_package,
        overlay_tree=overlay_tree,
        overlay_deletions=tuple(deleted),
        retained_native=retained,
        retained_native_bytes=readable_json_bytes(retained),
        overlay=overlay,
        overlay_bytes=readable_json_bytes(overlay),
        source_identity=source_identity,
        nccl_library_sha256=nccl_library,
        env_distributions=tuple(distributions),
        hashes=hashes,
        trees_reused=reused,
        cached_trees=entries,
        package_overlays=tuple(package_overlays),
        walked=walked,
    )


def elf_magic_lookup(cached: Sequence[CachedTree]) -> Callable[[Path], bool]:
    """``is_elf_file`` answered, for a file inside one of the ``cached`` trees, from that
    entry's kept ``elf-magic`` fact (``CachedTree.fact``: the entry was validated path by
    path this build -- every path's inode, size, mtime and ctime -- so the fact, taken
    from its bytes once, is as current as the tree); other files are read."""
    known = [(os.path.join(entry.tree, ""), frozenset(entry.fact("elf-magic", elf_magic_paths))) for entry in cached]

    def is_elf(path: Path) -> bool:
        text = os.fspath(path)
        for prefix, paths in known:
            if text.startswith(prefix):
                return text[len(prefix):] in paths
        return is_elf_file(path)

    return is_elf


def package_elf_files(package_dir: Path, assembly_trees: Mapping[Path, CachedTree]) -> list[ElfFile] | None:
    """The ELF files under ``package_dir`` as ``iter_elf_files`` finds them (same order:
    a subtree's files come together in the tree's walk), from the kept ``elf-machines``
    fact of the cached tree holding it, sizes from the walk that validated that tree this
    build (the fact is as current as the tree: see ``CachedTree.fact``). None when no
    cached tree holds ``package_dir``: it is read then."""
    text = os.fspath(package_dir)
    for tree, entry in assembly_trees.items():
        prefix = os.path.join(tree, "")
        if not text.startswith(prefix) or not entry.statuses:
            continue
        inside = text[len(prefix):] + "/"
        found = []
        for path, machine in entry.fact("elf-machines", elf_machines):
            if path.startswith(inside):
                status = entry.statuses.get(path)
                if status is None:  # a fact that does not match the walk: read the package
                    return None
                found.append(ElfFile(path[len(inside):], status.st_size, "", machine))
        return found
    return None


def source_packages_document_of(assembly: Assembly) -> dict[str, Any]:
    vllm_site = assembly.vllm_tree / assembly.site_packages.lstrip("/")
    return source_packages_document(
        OVERLAY_PACKAGE, vllm_site / OVERLAY_PACKAGE, assembly.patched_source, assembly.source_identity,
        assembly.overlay["entries"], assembly.package_overlays,
    )


def wheel_native(
    wheel: Path, wheel_sha256: str, package: str, hashes: FileHashes | None
) -> dict[str, tuple[int, str]]:
    """``wheel_native_files``, remembered per wheel sha256 beside the file-hash table (a
    verified wheel's members never change, so the memo is keyed by content)."""
    memo = None
    if hashes is not None and hashes.table_path is not None:
        memo = hashes.table_path.parent / "wheel-native" / f"{wheel_sha256}-{package}.json"
        try:
            return {path: (size, digest) for path, (size, digest) in json.loads(memo.read_bytes()).items()}
        except (FileNotFoundError, ValueError, TypeError):
            pass
    shipped = wheel_native_files(wheel, package)
    if memo is not None:
        write_bytes_atomic(memo, canonical_json_bytes(shipped))
    return shipped


@dataclass(frozen=True)
class WheelInterface:
    """The installed vLLM wheel's side of the native-interface check."""

    op_uses: dict[tuple[str, str], str]  # torch ops its own Python calls
    imports: dict[str, str]  # vllm.* modules its own Python imports
    registered: frozenset[str]  # names its extensions' read-only data holds
    files: tuple[str, ...]  # its files under site-packages (vllm/...)
    libraries: int


def wheel_interface(
    package_dir: Path, wheel_sha256: str, hashes: FileHashes | None, scan: Callable[[Path], PythonScan] | None = None
) -> WheelInterface:
    """Remembered per wheel sha256 beside the file-hash table (the installed package is
    the verified wheel's, so its interface is a property of those bytes). ``scan``: how
    each ``.py`` file is scanned (``python_interface``)."""
    memo = None
    if hashes is not None and hashes.table_path is not None:
        memo = hashes.table_path.parent / "native-interface" / f"{wheel_sha256}.json"
        try:
            known = json.loads(memo.read_bytes())
            return WheelInterface({(namespace, op): path for namespace, op, path in known["op_uses"]}, known["imports"],
                                  frozenset(known["registered"]), tuple(known["files"]), int(known["libraries"]))
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            pass
    libraries = [package_dir / elf.path for elf in iter_elf_files(package_dir)]
    files = {f"{package_dir.name}/{p}": path for p, path in package_files(package_dir).items()}
    python = python_interface(files, package_dir.name, scan)
    found = WheelInterface(python.op_uses, python.imports, native_names(libraries), tuple(sorted(files)), len(libraries))
    if memo is not None:
        record = {"op_uses": sorted([*key, path] for key, path in found.op_uses.items()), "imports": found.imports,
                  "registered": sorted(found.registered), "files": list(found.files), "libraries": found.libraries}
        write_bytes_atomic(memo, canonical_json_bytes(record))
    return found


def _nccl_library_sha256(composition: Composition, fetched: FetchedInputs, hashes: FileHashes | None) -> str:
    """sha256 of ``libnccl.so*`` shipped by the input playing the ``nccl`` role."""
    pin = composition.nccl
    if not isinstance(pin, WheelPin):
        return pin.sha256  # a file input is the library itself
    libraries = {
        path: digest
        for path, (_size, digest) in wheel_native(fetched.paths[pin.name], pin.sha256, "nvidia", hashes).items()
        if PurePosixPath(path).name.startswith("libnccl.so")
    }
    if len(libraries) != 1:
        raise InputError(f"{pin.filename}: expected exactly one libnccl.so* under nvidia/, found {sorted(libraries)}")
    return next(iter(libraries.values()))
