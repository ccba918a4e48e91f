"""`sparkflake build PROFILE`: fetch what is missing, assemble, verify, write the image.

Stages (each a function over plain data, so tests can stop between them):

1. ``load_composition`` — the profile, its locks, the input that plays each role, the
   patch set; a role naming an input the lock lacks is refused here.
2. ``fetch_inputs`` — missing inputs fetched (or imported from the profile's ``inputs/``
   and ``--from`` directories); every input re-hashed from the cache (link ``inputs``).
3. ``assemble`` — layer trees: OS base, the Python environment split in groups (CUDA
   libraries, torch, the rest, vLLM), the source overlay with its anchored patches;
   both manifests.
4. ``build_lower_layers`` — the layer blobs below the top layer (layer cache: an
   unchanged tree is never re-tarred or re-compressed); ``build_profile`` takes those
   the layer cache holds as soon as stage 3 has their trees, before it plans the
   overlay, and makes the others after it.
5. ``prepare_top`` — labels, the in-image receipt, ``/etc/sparkflake/*``.
6. ``verify_composition`` — the verification chain (``compose.verification``); refuses
   before anything is written to the output.
7. ``finish`` — top layer, config, manifest, full receipt; ``write_outputs`` writes
   ``out/PROFILE/`` atomically. (``build_profile`` stages the output directory before
   stage 3 and takes the cached lower layers as soon as their trees exist, so in a
   rebuild the archive and the OCI layout copy their blobs while the overlay is planned
   and the chain runs; a refusal removes the staging directory and leaves the previous output.)

Layer order puts the big, stable parts below (OS base, CUDA libraries, torch), so a
change of the source overlay or a patch rebuilds only the top layer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from .. import __version__
from ..atomic_write import (
    atomic_directory,
    check_output_parent,
    check_replaceable_output,
    make_run_directory,
    remove_tree,
    write_bytes_atomic,
)
from ..builder_identity import builder_identity
from ..digest import git_tree_id, nar_hash, sha256_file
from ..errors import CheckFailed, InputError, SparkflakeError
from ..fetch import Artifact, BlobCache, default_cache_root, fetch_all, offline_opener
from ..fetch.git import GitCache, fetch_git_inputs
from ..file_hashes import FileHashes
from ..lock import DebPin, GitPin, Lock, Pin, SdistPin, WheelPin
from ..oci.archive import CombinedArchiveWriter, write_archives
from ..oci.artifact import ReferringArtifact, referring_artifact
from ..oci.blob_store import BlobStore
from ..oci.compression import Compression
from ..oci.config import Platform, RuntimeConfig, rfc3339
from ..oci.image import ImageSpec, LayerSpec, assemble_image
from ..oci.image_model import BuiltImage
from ..oci.layer import Layer, LayerOptions, build_layer, layer_by_fingerprint
from ..oci.layer_cache import LayerCache
from ..oci.layer_tree import LayerInput, TreeSource
from ..oci.layout import LayoutWriter, add_artifact_blobs, write_oci_layout
from ..oci.media_types import CREATED_ANNOTATION
from ..profile import Profile, check_against_locks, profile_path, profile_to_dict, read_profile
from ..resolve.target import Target
from . import generated, receipt, sbom
from .debian_base import DebInput, assemble_base
from .elf import check_machine, elf_machines, iter_elf_files
from .locked_inputs import load_policy, policy_path_for
from .native_interface import (
    missing_ops,
    native_names,
    python_module_imports,
    python_op_uses,
    unresolved_imports,
)
from .patches import PatchSet, load_patch_set
from .python_env import DEFAULT_PREFIX, CollisionRule, RecordWaiver, WheelInput, assemble_python_env
from .source_overlay import (
    compare_overlay,
    compare_retained_native,
    extract_sdist_package,
    overlay_manifest,
    package_files,
    package_tree_hashes,
    plan_overlay,
    retained_native_manifest,
    wheel_native_files,
    write_overlay_tree,
    write_patched_source,
)
from .source_packages import (
    SOURCE_PACKAGES,
    PackageOverlay,
    SourcePackageRole,
    overlay_package,
    source_packages_document,
)
from .tree_cache import CachedTree, TreeCache
from .verification import PASSED, Link, LinkResult, require_no_problems, run_chain

ProgressCallback = Callable[[int, int, str], None]

OVERLAY_PACKAGE = "vllm"
REPO_PATCH_SET = ("overlays", "vllm")
PROFILE_PATCH_SET = "patches"
PROFILE_INPUTS = "inputs"
LICENSES = "Apache-2.0"
DEFAULT_REPOSITORY = "localhost/sparkflake"
DEFAULT_ENV = (
    f"PATH={DEFAULT_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"VIRTUAL_ENV={DEFAULT_PREFIX}",
    "LANG=C.UTF-8",
    "PYTHONDONTWRITEBYTECODE=1",
)

# Python environment layers, bottom to top: name, predicate over a normalized name.
PYTHON_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("python-cuda", lambda name: name.startswith(("nvidia-", "cuda-"))),
    ("python-torch", lambda name: name in ("torch", "triton")),
    ("python-env", lambda name: name != OVERLAY_PACKAGE),
    ("vllm", lambda name: name == OVERLAY_PACKAGE),
)


# --------------------------------------------------------------------------- stage 1


@dataclass(frozen=True)
class Composition:
    profile: Profile
    locks: tuple[Lock, ...]
    lock_paths: tuple[Path, ...]
    roles: Mapping[str, Pin]
    wheels: tuple[WheelPin, ...]
    debs: tuple[DebPin, ...]
    source: SdistPin | GitPin
    patch_set: PatchSet
    patch_set_dir: Path
    patch_set_name: str  # e.g. overlays/vllm or profiles/fixture/patches (location-free)
    waivers: tuple[RecordWaiver, ...] = ()  # upstream RECORD defects accepted for exact bytes
    collisions: tuple[CollisionRule, ...] = ()  # upstream path collisions and the wheel kept
    # pure-Python packages laid over their wheels from git sources (b12x, sparkcache)
    package_sources: tuple[tuple[SourcePackageRole, WheelPin, GitPin], ...] = ()

    def git_pins(self) -> list[GitPin]:
        pins = [self.source] if isinstance(self.source, GitPin) else []
        return pins + [source for _role, _wheel, source in self.package_sources]

    @property
    def platform(self) -> str:
        return self.profile.platform


def find_repo_root(start: Path) -> Path:
    for directory in (start, *start.parents):
        if (directory / Path(*REPO_PATCH_SET) / "patches.toml").is_file():
            return directory
    raise InputError(f"no {'/'.join(REPO_PATCH_SET)}/patches.toml above {start}: not inside a sparkflake checkout")


def load_composition(name_or_path: str | os.PathLike[str], profiles_dir: str | os.PathLike[str] | None = None) -> Composition:
    """The profile, its locks and every input it builds from, checked against each other."""
    path = profile_path(name_or_path, profiles_dir)
    profile = read_profile(path)
    locks = profile.load_locks()
    check_against_locks(profile, locks)
    roles = {role: profile.input_for(role, locks) for role in profile.inputs}
    for role in ("vllm_wheel", "vllm_source", *{r for r in generated.ROLE_LABELS.values()}):
        if role not in roles:
            raise InputError(f"{path}: inputs.{role}: the composition needs this role")
    vllm_wheel = roles["vllm_wheel"]
    source = roles["vllm_source"]
    if not isinstance(vllm_wheel, WheelPin):
        raise InputError(f"{path}: inputs.vllm_wheel: {vllm_wheel.name} is a {vllm_wheel.kind} input, expected a wheel")
    if not isinstance(source, (SdistPin, GitPin)):
        raise InputError(f"{path}: inputs.vllm_source: {source.name} is a {source.kind} input, expected an sdist or git input")
    if isinstance(source, SdistPin) and source.version != vllm_wheel.version:
        raise InputError(
            f"{path}: inputs.vllm_source: sdist version {source.version} differs from the wheel's {vllm_wheel.version}"
        )
    package_sources = []
    for package_role in SOURCE_PACKAGES:
        if package_role.source_role not in roles:
            continue
        over, under = roles[package_role.source_role], roles.get(package_role.wheel_role)
        if not isinstance(over, GitPin):
            raise InputError(f"{path}: inputs.{package_role.source_role}: {over.name} is a {over.kind} input, expected a git input")
        if not isinstance(under, WheelPin):
            raise InputError(f"{path}: inputs.{package_role.wheel_role}: the {package_role.package} source is laid over this role's wheel")
        package_sources.append((package_role, under, over))
    wheels: dict[str, WheelPin] = {}
    debs: dict[str, DebPin] = {}
    for lock in locks:
        for pin in lock.inputs:
            if isinstance(pin, WheelPin):
                wheels.setdefault(str(canonicalize_name(pin.name)), pin)
            elif isinstance(pin, DebPin):
                debs.setdefault(pin.package, pin)
    absent = {str(canonicalize_name(name)) for name in profile.absent.distributions}
    locked_absent = sorted(absent & set(wheels))
    if locked_absent:
        raise CheckFailed(
            f"{path}: absent.distributions names {', '.join(locked_absent)} but the lock pins "
            "them; the image would contain them",
            check_id="absences",
        )
    # The lock's assembly policy (docs/inputs.md): RECORD waivers and collision rules.
    policies = [load_policy(policy_path_for(lock_path), lock) for lock, lock_path in zip(locks, profile.lock_paths(), strict=True)]
    profile_dir = profile.directory
    local_patches = profile_dir / PROFILE_PATCH_SET
    if (local_patches / "patches.toml").is_file():
        patch_set_dir, patch_set_name = local_patches, f"profiles/{profile.name}/{PROFILE_PATCH_SET}"
    else:
        patch_set_dir = find_repo_root(profile_dir.resolve()).joinpath(*REPO_PATCH_SET)
        patch_set_name = "/".join(REPO_PATCH_SET)
    return Composition(
        profile=profile,
        locks=locks,
        lock_paths=profile.lock_paths(),
        roles=roles,
        wheels=tuple(sorted(wheels.values(), key=lambda w: w.name)),
        debs=tuple(sorted(debs.values(), key=lambda d: d.package)),
        source=source,
        patch_set=load_patch_set(patch_set_dir),
        patch_set_dir=patch_set_dir,
        patch_set_name=patch_set_name,
        waivers=tuple(waiver for policy in policies for waiver in policy.waivers),
        collisions=tuple(rule for policy in policies for rule in policy.collisions),
        package_sources=tuple(package_sources),
    )


# --------------------------------------------------------------------------- stage 2


def _artifact(pin: Pin) -> Artifact:
    if isinstance(pin, WheelPin | SdistPin):
        return Artifact(pin.name, pin.filename, pin.sha256, pin.size, tuple(pin.urls))
    if isinstance(pin, DebPin):
        filename = f"{pin.package}_{pin.version.split(':')[-1]}_{pin.architecture}.deb"
        return Artifact(pin.name, filename, pin.sha256, pin.size, tuple(pin.urls))
    raise InputError(f"{pin.name}: {pin.kind} inputs are not fetched as files by the build")


def _verified(cache: BlobCache, artifact: Artifact, hashes: FileHashes | None) -> Path:
    if hashes is None:
        return cache.verified_path(artifact)
    path = cache.blob_path(artifact.sha256)
    if path.is_file() and path.stat().st_size == artifact.size and hashes.sha256(path) == artifact.sha256:
        return path
    return cache.verified_path(artifact)  # re-hashes, evicts and names an altered entry


@dataclass(frozen=True)
class FetchedInputs:
    paths: Mapping[str, Path]  # input name -> verified cache path
    downloaded: int
    imported: int
    link: LinkResult
    git_trees: Mapping[str, Path] = field(default_factory=dict)  # git input name -> verified checkout


def fetch_inputs(
    composition: Composition,
    cache: BlobCache,
    *,
    from_dirs: Sequence[Path] = (),
    offline: bool = False,
    progress: ProgressCallback | None = None,
    hashes: FileHashes | None = None,
    git_mirrors: Mapping[str, Sequence[str]] | None = None,
    skip_git: Sequence[str] = (),
) -> FetchedInputs:
    """Every file input in the cache, then verified (link ``inputs``): re-hashed, or --
    with ``hashes`` -- re-hashed only when the cache file's stat identity changed since
    it was last hashed. Git sources (but those named in ``skip_git``) are fetched by commit
    (offline: only from the cache and from ``from_dirs`` that are repositories) and their
    checkouts re-hashed by tree id. When inputs are missing, one error names each."""
    pins: list[Pin] = [*composition.debs, *composition.wheels]
    if isinstance(composition.source, SdistPin):
        pins.append(composition.source)
    artifacts = [_artifact(pin) for pin in pins]
    missing = [a for a in artifacts if not cache.contains(a.sha256)]
    directories = list(from_dirs)
    profile_inputs = composition.profile.directory / PROFILE_INPUTS
    if profile_inputs.is_dir():
        directories.append(profile_inputs)
    downloaded = imported = 0
    unfetched: list[str] = []
    if missing:
        kwargs = {"opener": offline_opener} if offline else {}
        try:
            report = fetch_all(missing, cache, from_dirs=directories, progress=progress, **kwargs)
        except InputError as exc:
            unfetched.append(exc.message)
        except SparkflakeError as exc:
            raise type(exc)(exc.message, check_id="inputs") from exc
        else:
            downloaded = sum(1 for o in report.outcomes if o.source == "download")
            imported = sum(1 for o in report.outcomes if o.source == "import")
    git_pins = [pin for pin in composition.git_pins() if pin.name not in skip_git]
    unknown = sorted(set(git_mirrors or {}) - {pin.name for pin in composition.git_pins()})
    if unknown:
        raise InputError(f"--git-mirror {', '.join(unknown)}: not a git source of {composition.profile.name}")
    git_cache = GitCache(cache.root)
    try:
        fetch_git_inputs(git_pins, git_cache, mirrors=git_mirrors, local_repositories=directories, offline=offline)
    except InputError as exc:
        unfetched.append(exc.message)
    except SparkflakeError as exc:
        raise type(exc)(exc.message, check_id="inputs") from exc
    if unfetched:
        raise InputError("\n".join(unfetched), check_id="inputs")
    paths: dict[str, Path] = {}
    problems: list[str] = []
    for position, artifact in enumerate(artifacts):
        if progress:
            progress(position, len(artifacts), f"verify {artifact.name}")
        try:
            paths[artifact.name] = _verified(cache, artifact, hashes)
        except SparkflakeError as exc:
            problems.append(exc.message)
    git_trees: dict[str, Path] = {}
    for pin in git_pins:
        try:
            git_trees[pin.name] = git_cache.verified_tree(pin)
        except SparkflakeError as exc:
            problems.append(exc.message)
    if problems:
        raise CheckFailed("; ".join(problems), check_id="inputs")
    total = sum(a.size or 0 for a in artifacts)
    message = f"{len(artifacts)} inputs ({total} bytes) in the cache, every sha256 equal to the lock"
    if git_trees:
        message += f"; {len(git_trees)} git checkouts, every tree id equal to the lock"
    link = LinkResult("inputs", PASSED, message)
    return FetchedInputs(paths, downloaded, imported, link, git_trees)


# --------------------------------------------------------------------------- stage 3


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
    retained_native: Mapping[str, object]
    retained_native_bytes: bytes
    overlay: Mapping[str, object]
    overlay_bytes: bytes
    source_identity: Mapping[str, object]
    nccl_library_sha256: str
    env_distributions: tuple[Mapping[str, object], ...]
    hashes: FileHashes | None = None
    trees_reused: Mapping[str, bool] = field(default_factory=dict)
    cached_trees: Mapping[Path, CachedTree] = field(default_factory=dict)  # tree -> its cache entry
    package_overlays: tuple[PackageOverlay, ...] = ()

    def hash_file(self, path: Path) -> str:
        return self.hashes.sha256(path) if self.hashes is not None else sha256_file(path)

    def lower_layers(self) -> list[LayerTree]:
        return lower_layer_trees(self.base_tree, self.python_trees, self.cached_trees)


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


def _target_for(lock: Lock) -> Target:
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(lock.target.architecture, lock.target.architecture)
    major, minor = (int(part) for part in lock.target.python.split(".")[:2])
    glibc = tuple(int(part) for part in lock.target.glibc.split("."))
    full = lock.target.python if lock.target.python.count(".") == 2 else Target().python_full_version
    if (major, minor) != Target().python_version:
        full = f"{major}.{minor}"
    return Target(
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
        groups = {group_of.get(wheel) for wheel in rule.wheels}
        if None in groups:
            continue  # the rule names a wheel this composition does not install
        if len(groups) != 1:
            raise InputError(
                f"collision rule for {rule.path} names wheels in different layers "
                f"({', '.join(f'{w}: {group_of[w]}' for w in rule.wheels)}); the build layers "
                "the Python environment by group and cannot apply it"
            )
        by_group[groups.pop()].append(rule)  # type: ignore[index]
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
    hash_file = hashes or sha256_file
    reused: dict[str, bool] = {}
    entries: dict[Path, CachedTree] = {}

    def cached(name: str, recipe: dict[str, object], build: Callable[[Path], Mapping[str, object]]) -> tuple[Path, Mapping[str, object]]:
        if tree_cache is None:
            tree = work_dir / name
            return tree, build(tree)
        entry = tree_cache.get_or_build(recipe, build)
        reused[name] = entry.reused
        entries[entry.tree] = entry
        return entry.tree, entry.manifest

    debs = [DebInput(d.package, d.version, d.architecture, fetched.paths[d.name]) for d in composition.debs]
    architecture = composition.debs[0].architecture if composition.debs else "arm64"
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
    distributions: list[Mapping[str, object]] = []
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
        tree, manifest = cached(
            group,
            recipe,
            lambda tree, wheels=groups[group], group_rules=rules[group]: dataclasses.asdict(
                assemble_python_env(
                    wheels, tree, target=target, progress=progress, waivers=composition.waivers, collisions=group_rules
                )
            ),
        )
        distributions.extend(manifest["distributions"])  # type: ignore[arg-type]
        for image_path, wheel in manifest["owners"].items():  # type: ignore[union-attr]
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
        source_identity: dict[str, object] = {
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
    plan = plan_overlay(vllm_site, source_root, OVERLAY_PACKAGE, composition.patch_set, hash_file)
    patched_root = (scratch_dir or work_dir) / "patched-source"
    patched_package = write_patched_source(source_root, OVERLAY_PACKAGE, plan, patched_root)
    overlay_tree = work_dir / "overlay"
    overlay_tree.mkdir()
    deleted = write_overlay_tree(plan, overlay_tree)

    wheel_pin = composition.roles["vllm_wheel"]
    assert isinstance(wheel_pin, WheelPin)
    retained = retained_native_manifest(
        vllm_site, OVERLAY_PACKAGE, wheel_filename=wheel_pin.filename, wheel_sha256=wheel_pin.sha256,
        hash_file=hash_file,
    )
    overlay = overlay_manifest(
        plan,
        source_identity=source_identity,
        patch_set_sha256=composition.patch_set.patch_set_sha256,
        patched_tree_git=git_tree_id(patched_package),
        patched_tree_nar_hash=nar_hash(patched_package).sri,
        install_prefix=site_packages,
    )
    package_overlays = [
        overlay_package(role, wheel, pin, fetched.git_trees[pin.name], python_trees, site_packages, overlay_tree, hash_file)
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
        retained_native_bytes=generated.json_file_bytes(retained),
        overlay=overlay,
        overlay_bytes=generated.json_file_bytes(overlay),
        source_identity=source_identity,
        nccl_library_sha256=nccl_library,
        env_distributions=tuple(distributions),
        hashes=hashes,
        trees_reused=reused,
        cached_trees=entries,
        package_overlays=tuple(package_overlays),
    )


def source_packages_document_of(assembly: Assembly) -> dict[str, object]:
    vllm_site = assembly.vllm_tree / assembly.site_packages.lstrip("/")
    return source_packages_document(
        OVERLAY_PACKAGE, vllm_site / OVERLAY_PACKAGE, assembly.patched_source, assembly.source_identity,
        assembly.overlay["entries"], assembly.package_overlays,  # type: ignore[arg-type]
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
        write_bytes_atomic(memo, json.dumps(shipped, sort_keys=True).encode())
    return shipped


@dataclass(frozen=True)
class WheelInterface:
    """The installed vLLM wheel's side of the native-interface check."""

    op_uses: dict[tuple[str, str], str]  # torch ops its own Python calls
    imports: dict[str, str]  # vllm.* modules its own Python imports
    registered: frozenset[str]  # names its extensions' read-only data holds
    files: tuple[str, ...]  # its files under site-packages (vllm/...)
    libraries: int


def wheel_interface(package_dir: Path, wheel_sha256: str, hashes: FileHashes | None) -> WheelInterface:
    """Remembered per wheel sha256 beside the file-hash table (the installed package is
    the verified wheel's, so its interface is a property of those bytes)."""
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
    found = WheelInterface(python_op_uses(files), python_module_imports(files, package_dir.name),
                           native_names(libraries), tuple(sorted(files)), len(libraries))
    if memo is not None:
        record = {"op_uses": sorted([*key, path] for key, path in found.op_uses.items()), "imports": found.imports,
                  "registered": sorted(found.registered), "files": list(found.files), "libraries": found.libraries}
        write_bytes_atomic(memo, json.dumps(record, sort_keys=True).encode())
    return found


def _nccl_library_sha256(composition: Composition, fetched: FetchedInputs, hashes: FileHashes | None) -> str:
    """sha256 of ``libnccl.so*`` shipped by the input playing the ``nccl`` role."""
    pin = composition.roles["nccl"]
    if not isinstance(pin, WheelPin):
        return pin.sha256  # type: ignore[union-attr]  # a file input is the library itself
    libraries = {
        path: digest
        for path, (_size, digest) in wheel_native(fetched.paths[pin.name], pin.sha256, "nvidia", hashes).items()
        if PurePosixPath(path).name.startswith("libnccl.so")
    }
    if len(libraries) != 1:
        raise InputError(f"{pin.filename}: expected exactly one libnccl.so* under nvidia/, found {sorted(libraries)}")
    return next(iter(libraries.values()))


# --------------------------------------------------------------------------- stage 4


@dataclass(frozen=True)
class ImageOptions:
    compression: Compression = Compression("gzip")
    source_date_epoch: int = 1
    repository: str = DEFAULT_REPOSITORY
    tag: str | None = None  # default: the profile name


def build_lower_layers(
    trees: Sequence[LayerTree],
    options: ImageOptions,
    store: BlobStore,
    layer_cache: LayerCache | None,
    progress: ProgressCallback | None = None,
    on_layer: Callable[[Layer], None] | None = None,
) -> list[Layer]:
    """One layer per lower tree; an unchanged tree is a layer-cache hit found by its input
    fingerprint (one lstat walk, see ``oci.layer_cache``). ``on_layer`` gets each layer
    as soon as it is made."""
    layer_options = LayerOptions(options.compression, options.source_date_epoch)
    built = []
    for tree in trees:
        def layer_progress(done: int, total: int, what: str, name: str = tree.name) -> None:
            if progress:
                progress(done, total, f"{name}: {what}")

        built.append(build_layer(tree.layer_input, layer_options, store, layer_cache, layer_progress))
        if on_layer is not None:
            on_layer(built[-1])
    return built


def cached_lower_layers(
    trees: Sequence[LayerTree], options: ImageOptions, store: BlobStore, layer_cache: LayerCache | None
) -> list[Layer]:
    """The first of ``trees`` whose layers the layer cache already holds (found by input
    fingerprint, nothing scanned or compressed), in order, up to the first it lacks."""
    if layer_cache is None:
        return []
    layer_options = LayerOptions(options.compression, options.source_date_epoch)
    found: list[Layer] = []
    for tree in trees:
        layer = layer_by_fingerprint(tree.layer_input, layer_options, store, layer_cache)
        if layer is None:
            break
        found.append(layer)
    return found


# --------------------------------------------------------------------------- stage 5


@dataclass(frozen=True)
class PreparedTop:
    labels: Mapping[str, str]
    in_image_receipt: Mapping[str, object]
    in_image_receipt_bytes: bytes
    profile_bytes: bytes
    top_input: LayerInput
    base_digest: str
    resolved: tuple[receipt.ResolvedDependency, ...]


def _platform(profile: Profile) -> Platform:
    platform = Platform.parse(profile.platform)
    if platform.architecture == "arm64" and not platform.variant:
        platform = Platform.parse("linux/arm64/v8")
    return platform


def _spec(profile: Profile, options: ImageOptions, layers: Sequence[LayerTree], runtime: RuntimeConfig) -> ImageSpec:
    return ImageSpec(
        layers=tuple(LayerSpec(tree.layer_input, tree.created_by) for tree in layers),
        platform=_platform(profile),
        runtime=runtime,
        compression=options.compression,
        source_date_epoch=options.source_date_epoch,
        tag=options.tag or profile.name,
        repository=options.repository,
    )


def resolved_dependencies(composition: Composition, assembly: Assembly) -> tuple[receipt.ResolvedDependency, ...]:
    role_of = {pin.name: role for role, pin in composition.roles.items()}
    dependencies: list[receipt.ResolvedDependency] = []
    pins: list[Pin] = [*composition.debs, *composition.wheels, composition.source,
                       *(source for _role, _wheel, source in composition.package_sources)]
    for pin in sorted(pins, key=lambda p: (p.kind, p.name)):
        annotations: dict[str, object] = {"kind": pin.kind}
        if pin.name in role_of:
            annotations["role"] = role_of[pin.name]
        version = getattr(pin, "version", None)
        if version:
            annotations["version"] = version
        dependencies.append(
            receipt.ResolvedDependency(
                name=pin.name,
                uri=pin.urls[0] if isinstance(pin, GitPin) else (pin.urls[0] if getattr(pin, "urls", ()) else ""),  # type: ignore[union-attr]
                digest=(
                    {"gitCommit": pin.rev, "gitTree": pin.tree}
                    if isinstance(pin, GitPin)
                    else {"sha256": pin.sha256}  # type: ignore[union-attr]
                ),
                annotations=annotations,
            )
        )
    dependencies.append(
        receipt.ResolvedDependency(
            name=f"patch-set:{composition.patch_set_name}",
            uri="",
            digest={"sha256": composition.patch_set.patch_set_sha256},
            annotations={"kind": "patch-set", "patches": [p.name for p in composition.patch_set.patches]},
        )
    )
    return tuple(dependencies)


def claim_records(profile: Profile, fetched_git: Sequence[GitPin] = ()) -> list[dict[str, object]]:
    """The profile's claims as receipt records. A git claim whose commit and tree are those
    of a git input this build fetched and checked (and whose source sha256, if it states
    one, the input pins and the build checked) is recorded as ``verified``."""
    bound = {(pin.rev, pin.tree): pin for pin in fetched_git}
    records = []
    for claim in profile.claims:
        record: dict[str, object] = {
            "name": claim.name,
            "kind": claim.kind,
            "subject": claim.subject,
            "status": claim.status,
            "source": claim.source,
        }
        for key in ("rev", "tree", "source_sha256", "sha256", "reference", "manifest_digest", "config_digest"):
            value = getattr(claim, key)
            if value is not None:
                record[key] = value
        pin = bound.get((claim.rev, claim.tree)) if claim.kind == "git" else None
        if pin is not None and claim.source_sha256 in (None, pin.source_sha256):
            record["status"] = "verified"
            record["verifiedBy"] = pin.name
        records.append(record)
    return records


def prepare_top(
    composition: Composition,
    assembly: Assembly,
    lower: Sequence[Layer],
    options: ImageOptions,
    store: BlobStore,
) -> PreparedTop:
    profile = composition.profile
    lower_trees = assembly.lower_layers()
    # base.digest: the manifest digest of the OS base layer alone as an image.
    base_image = assemble_image(
        _spec(profile, options, lower_trees[:1], RuntimeConfig()), [lower[0]], store
    )
    role_sha = {role: getattr(pin, "sha256", "") for role, pin in composition.roles.items()}
    source = assembly.source_identity
    facts = generated.LabelFacts(
        profile_name=profile.name,
        status=profile.status,
        served_model_name=profile.served_model_name,
        cache_root=profile.cache_root,
        jit_root=profile.jit_root,
        source_url=str(source["uri"]),
        revision=str(source["rev"]) if source["kind"] == "git" else f"sha256:{source['sha256']}",
        version=str(source["version"]),
        created=rfc3339(options.source_date_epoch),
        licenses=LICENSES,
        base_digest=base_image.manifest_digest,
        role_sha256=role_sha,
        vllm_source_identity=(
            f"git:{source['uri']}@{source['rev']}:tree:{source['tree']}"
            if source["kind"] == "git"
            else f"sdist:{source['filename']}:sha256:{source['sha256']}"
        ),
        nccl_library_sha256=assembly.nccl_library_sha256,
        patch_set_sha256=composition.patch_set.patch_set_sha256,
        retained_native_sha256=receipt.sha256_hex(assembly.retained_native_bytes),
        overlay_sha256=receipt.sha256_hex(assembly.overlay_bytes),
    )
    labels = generated.composition_labels(facts, profile.labels)
    resolved = resolved_dependencies(composition, assembly)
    profile_document = profile_to_dict(profile)
    profile_bytes = generated.json_file_bytes(profile_document)
    byproducts = [
        {
            "name": receipt.RETAINED_NATIVE,
            "uri": f"file://{generated.RETAINED_NATIVE_PATH}",
            "digest": {"sha256": receipt.sha256_hex(assembly.retained_native_bytes)},
            "mediaType": "application/json",
        },
        {
            "name": receipt.OVERLAY,
            "uri": f"file://{generated.OVERLAY_PATH}",
            "digest": {"sha256": receipt.sha256_hex(assembly.overlay_bytes)},
            "mediaType": "application/json",
        },
        {
            "name": receipt.PATCH_SET,
            "digest": {"sha256": composition.patch_set.patch_set_sha256},
            "annotations": composition.patch_set.identity(),
        },
        {
            "name": "profile",
            "uri": f"file://{generated.PROFILE_PATH}",
            "digest": {"sha256": receipt.sha256_hex(profile_bytes)},
            "mediaType": "application/json",
        },
    ]
    source_packages = None
    provenance: dict[str, object] = {}
    if assembly.package_overlays:
        document = source_packages_document_of(assembly)
        source_packages = generated.json_file_bytes(document)
        # which files came from which source, per package (the lists: source-packages.json)
        provenance["sourcePackages"] = [
            {"package": entry["package"], "source": entry["source"],
             "filesFromSource": len(entry["files_from_source"]), "filesFromWheel": len(entry["files_from_wheel"])}
            for entry in document["packages"]  # type: ignore[union-attr]
        ]
        byproducts.append({
            "name": "source-packages",
            "uri": f"file://{generated.SOURCE_PACKAGES_PATH}",
            "digest": {"sha256": receipt.sha256_hex(source_packages)},
            "mediaType": "application/json",
        })
    predicate = receipt.provenance_predicate(
        external_parameters={
            "profile": profile.name,
            "platform": profile.platform,
            "compression": options.compression.as_record(),
            "source_date_epoch": options.source_date_epoch,
            "locks": {
                path.name: sha256_file(path) for path in composition.lock_paths
            },
        },
        internal_parameters={
            "status": profile.status,
            "labels": labels,
            "entrypoint": list(generated.ENTRYPOINT),
            "env": list(DEFAULT_ENV),
            "layers": [tree.name for tree in lower_trees] + ["composition"],
            "upstreamClaims": claim_records(profile, composition.git_pins()),
            "patchedSource": assembly.overlay["patched_source"],
            **provenance,
        },
        resolved_dependencies=resolved,
        byproducts=byproducts,
        builder_version=__version__,
    )
    in_image = receipt.in_image_statement(lower_diff_ids=[layer.diff_id for layer in lower], predicate=predicate)
    in_image_bytes = receipt.canonical_bytes(in_image)
    top_input = _top_input(assembly, in_image_bytes, profile_bytes, source_packages)
    return PreparedTop(labels, in_image, in_image_bytes, profile_bytes, top_input, base_image.manifest_digest, resolved)


def _top_input(assembly: Assembly, in_image_bytes: bytes, profile_bytes: bytes, source_packages: bytes | None) -> LayerInput:
    files = generated.generated_files(
        receipt=in_image_bytes,
        profile_document=profile_bytes,
        retained_native=assembly.retained_native_bytes,
        overlay=assembly.overlay_bytes,
        source_packages=source_packages,
    )
    deleted = [*assembly.overlay_deletions, *(path for overlay in assembly.package_overlays for path in overlay.deletions)]
    deletions = tuple(f"{assembly.site_packages}/{path}" for path in deleted)
    sources = (TreeSource(str(assembly.overlay_tree), assembly.site_packages),) if any(assembly.overlay_tree.iterdir()) else ()
    return LayerInput(sources=sources, files=files, deletions=deletions)


# --------------------------------------------------------------------------- stage 6


def verification_links(
    composition: Composition,
    fetched: FetchedInputs,
    assembly: Assembly,
    prepared: PreparedTop,
) -> list[Link]:
    profile = composition.profile
    site = assembly.site_packages.lstrip("/")
    vllm_site = assembly.vllm_tree / site

    def retained_native() -> str:
        wheel = composition.roles["vllm_wheel"]
        shipped = wheel_native(fetched.paths[wheel.name], wheel.sha256, OVERLAY_PACKAGE, assembly.hashes)  # type: ignore[union-attr]
        current = retained_native_manifest(
            vllm_site, OVERLAY_PACKAGE, wheel_filename=wheel.filename, wheel_sha256=wheel.sha256,  # type: ignore[union-attr]
            hash_file=assembly.hash_file,
        )
        require_no_problems(compare_retained_native(current, shipped), "retained native files differ from the wheel", "retained-native")
        require_no_problems(
            compare_retained_native(assembly.retained_native, shipped),
            "retained-native manifest differs from the wheel",
            "retained-native",
        )
        overlaid_elf = [
            entry["path"] for entry in assembly.overlay["entries"]  # type: ignore[index, union-attr]
            if entry["path"] in shipped
        ]
        require_no_problems([f"{p}: overlaid" for p in overlaid_elf], "overlay touches compiled extensions", "retained-native")
        return f"{len(shipped)} ELF files of {wheel.filename} retained byte for byte"  # type: ignore[union-attr]

    def overlay() -> str:
        before = {
            f"{OVERLAY_PACKAGE}/{p}": h
            for p, h in package_tree_hashes(vllm_site / OVERLAY_PACKAGE, assembly.hash_file).items()
        }
        after = dict(before)
        overlay_package = assembly.overlay_tree / OVERLAY_PACKAGE
        if overlay_package.is_dir():
            for path, digest in package_tree_hashes(overlay_package).items():
                after[f"{OVERLAY_PACKAGE}/{path}"] = digest
        for path in assembly.overlay_deletions:
            after.pop(path, None)
        require_no_problems(compare_overlay(assembly.overlay, before, after), "overlay differs from its manifest", "overlay")
        entries = assembly.overlay["entries"]  # type: ignore[index]
        return f"{len(entries)} overlay changes equal the manifest; every other file of {OVERLAY_PACKAGE}/ unchanged"

    def patches() -> str:
        problems = []
        source_files = package_tree_hashes(assembly.source_root / OVERLAY_PACKAGE, assembly.hash_file)
        base_files = package_tree_hashes(vllm_site / OVERLAY_PACKAGE, assembly.hash_file)
        final: dict[str, str] = {}
        first: dict[str, str] = {}
        for patch in composition.patch_set.patches:
            for anchor in patch.anchors:
                first.setdefault(anchor.path, anchor.pre_sha256)
                final[anchor.path] = anchor.post_sha256
        for path, pre in first.items():
            relative = path.removeprefix(f"{OVERLAY_PACKAGE}/")
            actual = source_files.get(relative, base_files.get(relative, ""))
            if actual != pre:
                problems.append(f"{path}: pre-image sha256 expected {pre or 'absent'}, source has {actual or 'absent'}")
        overlay_by_path = {e["path"]: e for e in assembly.overlay["entries"]}  # type: ignore[index, union-attr]
        for path, post in final.items():
            patched_file = assembly.patched_source / path.removeprefix(f"{OVERLAY_PACKAGE}/")
            actual = sha256_file(patched_file) if patched_file.is_file() else ""
            if actual != post:
                problems.append(f"{path}: post-image sha256 expected {post or 'absent'}, patched source has {actual or 'absent'}")
            entry = overlay_by_path.get(path)
            if entry is not None and entry["target_sha256"] != post:
                problems.append(f"{path}: overlay target {entry['target_sha256']} is not the post-image {post}")
        require_no_problems(problems, "patch anchors", "patches")
        # The patched tree's git tree id and NAR hash were taken from this tree when the
        # overlay manifest was made; the image holds the overlay tree, checked above.
        tree = assembly.overlay["patched_source"]["git_tree"]  # type: ignore[index]
        count = sum(len(p.anchors) for p in composition.patch_set.patches)
        return f"{len(composition.patch_set.patches)} patches, {count} anchors: pre- and post-images match; patched tree git {tree}"

    def native_interface() -> str:
        wheel = composition.roles["vllm_wheel"]
        retained = wheel_interface(vllm_site / OVERLAY_PACKAGE, wheel.sha256, assembly.hashes)  # type: ignore[union-attr]
        final_files = {f"{OVERLAY_PACKAGE}/{p}": path for p, path in package_files(assembly.patched_source).items()}
        final_uses = python_op_uses(final_files)
        final_imports = python_module_imports(final_files, OVERLAY_PACKAGE)
        image_paths = (set(retained.files) | set(final_files)) - set(assembly.overlay_deletions)
        problems = [
            f"{use.path} calls torch.ops.{use.namespace}.{use.op}, which no retained extension registers"
            for use in missing_ops(final_uses, retained.op_uses, retained.registered)
        ] + [
            f"{path} imports {module}, which no file of the image provides (no .py, package or compiled module)"
            for module, path in unresolved_imports(final_imports, retained.imports, image_paths)
        ]
        require_no_problems(problems, "the overlaid Python needs native code the retained extensions lack", "native-interface")
        added_ops = len(set(final_uses) - set(retained.op_uses))
        added_imports = len(set(final_imports) - set(retained.imports))
        return (f"{len(final_uses)} torch.ops uses and {len(final_imports)} vllm imports of the overlaid Python; "
                f"the {added_ops} ops and {added_imports} imports the wheel's Python lacks are provided "
                f"({retained.libraries} retained ELF files)")

    def source_packages() -> str:
        problems = []
        for overlay in assembly.package_overlays:
            site_dir = overlay.tree / site / overlay.package
            before = {f"{overlay.package}/{p}": h for p, h in package_tree_hashes(site_dir, assembly.hash_file).items()}
            after = dict(before)
            written = assembly.overlay_tree / overlay.package
            if written.is_dir():
                after.update({f"{overlay.package}/{p}": h for p, h in package_tree_hashes(written).items()})
            for path in overlay.deletions:
                after.pop(path, None)
            problems += compare_overlay(overlay.manifest, before, after)
        require_no_problems(problems, "a source package differs from its manifest", "source-packages")
        return ", ".join(
            f"{o.package}: {len(o.manifest['files_from_source'])} files from {o.manifest['source']['rev'][:12]}, "  # type: ignore[index]
            f"{len(o.manifest['files_from_wheel'])} from {o.manifest['wheel']['filename']}"  # type: ignore[index]
            for o in assembly.package_overlays
        )

    def absences() -> str:
        wanted = {str(canonicalize_name(name)) for name in profile.absent.distributions}
        found = []
        for group, tree in assembly.python_trees.items():
            site_dir = tree / site
            if not site_dir.is_dir():
                continue
            for entry in sorted(site_dir.iterdir()):
                stem = entry.name
                if stem.endswith(".dist-info"):
                    stem = stem[: -len(".dist-info")].rsplit("-", 1)[0]
                if str(canonicalize_name(stem)) in wanted:
                    found.append(f"{group}: {assembly.site_packages}/{entry.name}")
        require_no_problems(found, "required absences present", "absences")
        return f"absent: {', '.join(sorted(wanted)) or 'nothing required'}"

    def elf_machine() -> str:
        # A cached tree's ELF machines are read once per cache entry and kept beside it
        # (the entry was validated path by path this build); other trees are read now.
        def machines(tree: Path) -> list[list] | None:
            entry = assembly.cached_trees.get(tree)
            return None if entry is None else entry.fact("elf-machines", elf_machines)  # type: ignore[return-value]

        count = check_machine(assembly.base_tree, profile.platform, machines(assembly.base_tree))
        for tree in assembly.python_trees.values():
            count += check_machine(tree, profile.platform, machines(tree))
        count += check_machine(assembly.overlay_tree, profile.platform)
        return f"{count} ELF files, all for {profile.platform}"

    def labels() -> str:
        current = dict(prepared.labels)
        missing = generated.missing_labels(current)
        require_no_problems([f"{key}: missing or empty" for key in missing], "labels incomplete", "labels")
        recorded = prepared.in_image_receipt["predicate"]["buildDefinition"]["internalParameters"]["labels"]  # type: ignore[index]
        problems = [
            f"{key}: label {current.get(key)!r}, receipt {recorded.get(key)!r}"
            for key in sorted(set(current) | set(recorded))
            if current.get(key) != recorded.get(key)
        ]
        deps = {dep.name: dep for dep in prepared.resolved}
        for key, role in generated.ROLE_LABELS.items():
            pin = composition.roles[role]
            if deps[pin.name].digest.get("sha256") != current.get(key):
                problems.append(f"{key}: {current.get(key)} != resolved dependency {pin.name} sha256")
        checks = {
            generated.RETAINED_NATIVE_LABEL: receipt.sha256_hex(assembly.retained_native_bytes),
            generated.OVERLAY_LABEL: receipt.sha256_hex(assembly.overlay_bytes),
            generated.PATCH_SET_LABEL: composition.patch_set.patch_set_sha256,
            generated.STATUS_LABEL: profile.status,
            generated.PROFILE_LABEL: profile.name,
            generated.NCCL_LIBRARY_LABEL: assembly.nccl_library_sha256,
            f"{generated.OCI}.base.digest": prepared.base_digest,
        }
        for key, expected in checks.items():
            if current.get(key) != expected:
                problems.append(f"{key}: label {current.get(key)!r}, expected {expected!r}")
        require_no_problems(problems, "labels differ from the receipt", "labels")
        return f"{len(current)} labels complete and equal to the receipt"

    def claims() -> str:
        recorded = prepared.in_image_receipt["predicate"]["buildDefinition"]["internalParameters"]["upstreamClaims"]  # type: ignore[index]
        expected = claim_records(profile, composition.git_pins())
        problems = []
        if recorded != expected:
            problems.append("receipt's upstreamClaims differ from the profile's claims")
        from ..profile import CLAIM_STATUSES

        problems += [f"{c['name']}: status {c.get('status')!r} not in {CLAIM_STATUSES}" for c in recorded if c.get("status") not in CLAIM_STATUSES]
        require_no_problems(problems, "upstream claims", "claims")
        summary = ", ".join(f"{c['name']}={c['status']}" for c in recorded)
        return f"{len(recorded)} upstream identities recorded as claims: {summary}"

    return [
        Link("retained-native", "retained native manifest equals what the wheel shipped", retained_native),
        Link("overlay", "the overlay changed exactly what its manifest says", overlay),
        Link("patches", "patch pre- and post-images", patches),
        Link("native-interface", "the retained extensions register every op the overlaid Python adds", native_interface),
        *([Link("source-packages", "packages from git sources changed exactly what their manifests say", source_packages)]
          if assembly.package_overlays else []),
        Link("absences", "required absences", absences),
        Link("elf-machine", "ELF architecture of every file", elf_machine),
        Link("labels", "labels complete and equal to the receipt", labels),
        Link("claims", "the seeds' upstream identities recorded as claims", claims),
    ]


def verify_composition(
    composition: Composition, fetched: FetchedInputs, assembly: Assembly, prepared: PreparedTop
) -> list[LinkResult]:
    results = run_chain(verification_links(composition, fetched, assembly, prepared))
    return [fetched.link, *results]


# --------------------------------------------------------------------------- stage 7


@dataclass(frozen=True)
class BuildResult:
    profile: str
    image: BuiltImage
    full_receipt: Mapping[str, object]
    chain: tuple[LinkResult, ...]
    layer_names: tuple[str, ...]
    layers_from_cache: tuple[bool, ...]
    assembly: Assembly | None = None
    sbom_bytes: bytes | None = None  # OUT/sbom.spdx.json
    sbom_artifact: ReferringArtifact | None = None  # the SBOM as an OCI artifact whose subject is the image
    extra: Mapping[str, object] = field(default_factory=dict)


def image_sbom(composition: Composition, fetched: FetchedInputs, image: BuiltImage,
               assembly: Assembly | None = None) -> tuple[bytes, ReferringArtifact]:
    """The SPDX SBOM of the image (compose.sbom) and the OCI artifact that carries it; both
    digests follow from the lock and the image, so they are known at build time. With the
    assembly, wheel licenses are read from the METADATA files it installed."""
    pins: list[Pin] = [*composition.debs, *composition.wheels, composition.source]
    layer_of = {pin.name: "os-base" for pin in composition.debs}
    layer_of.update({pin.name: python_group(pin.name) for pin in composition.wheels})
    layer_of[composition.source.name] = "composition"
    installed: dict[str, Path] = {}
    if assembly is not None:
        site = assembly.site_packages.lstrip("/")
        for wheel in composition.wheels:
            tree = assembly.python_trees.get(layer_of[wheel.name])
            if tree is not None:
                installed[wheel.name] = tree / site / sbom.dist_info_name(wheel) / "METADATA"
    document = sbom.sbom_document(
        profile_name=composition.profile.name,
        image=sbom.ImageIdentity(image.repository, image.tag, image.manifest_digest, image.platform.architecture),
        pins=pins,
        source_date_epoch=image.source_date_epoch,
        tool_version=__version__,
        licenses=sbom.stated_licenses(pins, fetched.paths, installed),
        layer_of=layer_of,
        roles={pin.name: role for role, pin in composition.roles.items()},
        patch_set=(f"patch-set:{composition.patch_set_name}", composition.patch_set.patch_set_sha256),
        source_name=composition.source.name,
    )
    content = receipt.canonical_bytes(document)
    artifact = referring_artifact(
        artifact_type=sbom.SPDX_MEDIA_TYPE, blob=content, title=SBOM_FILE,
        subject_digest=image.manifest_digest, subject_size=len(image.manifest_bytes),
        annotations={CREATED_ANNOTATION: rfc3339(image.source_date_epoch)},
    )
    return content, artifact


def finish(
    composition: Composition,
    fetched: FetchedInputs,
    assembly: Assembly,
    lower: Sequence[Layer],
    prepared: PreparedTop,
    chain: Sequence[LinkResult],
    options: ImageOptions,
    store: BlobStore,
    layer_cache: LayerCache | None,
) -> BuildResult:
    profile = composition.profile
    top_tree = LayerTree("composition", prepared.top_input,
                         "sparkflake: vLLM source overlay, anchored patches, generated files", (assembly.overlay_tree,))
    top = build_layer(prepared.top_input, LayerOptions(options.compression, options.source_date_epoch), store, layer_cache)
    layers = [*lower, top]
    runtime = RuntimeConfig(
        env=DEFAULT_ENV,
        entrypoint=generated.ENTRYPOINT,
        labels=prepared.labels,
        working_dir="/",
    )
    trees = [*assembly.lower_layers(), top_tree]
    image = assemble_image(_spec(profile, options, trees, runtime), layers, store)
    full = receipt.full_statement(
        prepared.in_image_receipt,
        image_name=f"{image.repository}:{image.tag}",
        manifest_digest=image.manifest_digest,
        config_digest=image.config_digest,
        layers=[layer.as_record() for layer in layers],
        builder_versions=builder_identity(),
    )
    full["predicate"]["runDetails"]["metadata"] = {  # type: ignore[index]
        "verification": [result.as_record() for result in chain],
    }
    sbom_content, sbom_artifact = image_sbom(composition, fetched, image, assembly)
    receipt.add_sbom_byproducts(full, sbom_content, sbom_artifact.manifest_digest, SBOM_FILE)
    return BuildResult(
        profile=profile.name,
        image=image,
        full_receipt=full,
        chain=tuple(chain),
        layer_names=tuple(tree.name for tree in trees),
        layers_from_cache=tuple(layer.from_cache for layer in layers),
        assembly=assembly,
        sbom_bytes=sbom_content,
        sbom_artifact=sbom_artifact,
    )


OUTPUT_FORMATS = ("oci", "oci-archive", "docker-archive")
SBOM_FILE = "sbom.spdx.json"


def check_formats(formats: Sequence[str]) -> None:
    unknown = set(formats) - set(OUTPUT_FORMATS)
    if unknown or not formats:
        raise InputError(f"--formats {','.join(formats)}: expected some of {', '.join(OUTPUT_FORMATS)}")


def write_outputs(
    result: BuildResult, out_dir: Path, formats: Sequence[str] = OUTPUT_FORMATS, *, force: bool = False
) -> Path:
    """``out_dir``: oci/ (layout, blobs copied from the store), oci-archive.tar,
    docker-archive.tar (each only if in ``formats``), digests.json, receipt.json,
    retained-native.json, source-overlay.json; written beside and swapped in at once."""
    check_formats(formats)
    with atomic_directory(out_dir, owned_output=True, force=force) as staging:
        write_outputs_into(staging, result, formats)
    return out_dir


def start_archive(staging: Path, formats: Sequence[str], options: ImageOptions) -> CombinedArchiveWriter | None:
    """The combined archive (oci-archive and docker-archive in one file) started in the
    staging directory: each layer handed to it (``add_layer``) is copied on a background
    thread while the next layers are made and the chain is verified. None when no archive
    is asked for or the layers are zstd (then ``write_outputs_into`` writes the archives
    at the end)."""
    names = [f"{kind}.tar" for kind in ("oci-archive", "docker-archive") if kind in formats]
    if not names or options.compression.algorithm == "zstd":
        return None
    return CombinedArchiveWriter(staging / names[0], options.source_date_epoch)


def start_layout(staging: Path, formats: Sequence[str]) -> LayoutWriter | None:
    """The OCI layout started in the staging directory (each layer handed to it,
    ``add_layer``, is copied on a background thread), or None when it is not asked for."""
    return LayoutWriter(staging / "oci") if "oci" in formats else None


def write_outputs_into(
    staging: Path,
    result: BuildResult,
    formats: Sequence[str],
    combined: CombinedArchiveWriter | None = None,
    layout: LayoutWriter | None = None,
) -> None:
    """The files of ``write_outputs`` into a staging directory; ``combined`` and
    ``layout`` are the archive and the layout ``start_archive`` and ``start_layout``
    began there (finished here)."""
    if "oci" in formats:
        if layout is not None:
            layout.finish(result.image)
        else:
            write_oci_layout(result.image, staging / "oci")
        if result.sbom_artifact is not None:
            # beside the image in blobs/, reachable from the image through the artifact's
            # subject; index.json keeps the image alone (its digest, and tools that take
            # oci:DIR without a tag, stay as they were)
            add_artifact_blobs(staging / "oci", result.sbom_artifact)
    # One file for both archives when the layers allow it (gzip or none): the
    # oci-archive that is also a docker-archive, the second name a hard link.
    write_archives(
        result.image,
        staging / "oci-archive.tar" if "oci-archive" in formats else None,
        staging / "docker-archive.tar" if "docker-archive" in formats else None,
        combined,
    )
    write_bytes_atomic(staging / "receipt.json", receipt.canonical_bytes(result.full_receipt))
    if result.sbom_bytes is not None:
        write_bytes_atomic(staging / SBOM_FILE, result.sbom_bytes)
    if result.assembly is not None:
        write_bytes_atomic(staging / "retained-native.json", result.assembly.retained_native_bytes)
        write_bytes_atomic(staging / "source-overlay.json", result.assembly.overlay_bytes)
        if result.assembly.package_overlays:
            write_bytes_atomic(staging / "source-packages.json",
                               generated.json_file_bytes(source_packages_document_of(result.assembly)))
    digests = result.image.digests_record()
    digests["profile"] = result.profile
    digests["layer_names"] = list(result.layer_names)
    write_bytes_atomic(staging / "digests.json", (json.dumps(digests, indent=2, sort_keys=True) + "\n").encode())


# --------------------------------------------------------------------------- all stages


@dataclass(frozen=True)
class BuildRequest:
    profile: str
    output_dir: Path | None = None
    cache_root: Path | None = None
    layer_cache_root: Path | None = None  # blob store + layer cache (default CACHE/oci)
    from_dirs: tuple[Path, ...] = ()
    offline: bool = False
    options: ImageOptions = ImageOptions()
    use_layer_cache: bool = True
    use_tree_cache: bool = True
    keep_work: bool = False
    force: bool = False  # replace the output path even if sparkflake did not write it
    profiles_dir: Path | None = None
    source_tree: Path | None = None  # checkout of a git vllm_source
    git_mirrors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # git input -> URLs tried first
    formats: tuple[str, ...] = OUTPUT_FORMATS


MEMORY_SCRATCH = Path("/dev/shm")


def memory_scratch_dir(prefix: str) -> Path | None:
    """A private directory on the memory file system for short-lived scratch trees, or
    None (then the work directory is used) when there is none or it is not writable.
    Directories a killed build left behind (its pid is gone) are removed first."""
    if not MEMORY_SCRATCH.is_dir() or not os.access(MEMORY_SCRATCH, os.W_OK | os.X_OK):
        return None
    try:
        return make_run_directory(MEMORY_SCRATCH, f"sparkflake-{prefix}")
    except OSError:
        return None


def default_output_dir(profile_name: str) -> Path:
    # not "result": that is where `nix build` puts its link, in the same checkout
    return Path("out") / profile_name


def build_profile(request: BuildRequest, progress: ProgressCallback | None = None) -> BuildResult:
    """All stages; nothing is written to the output unless the chain passed."""
    check_formats(request.formats)
    composition = load_composition(request.profile, request.profiles_dir)
    out_dir = request.output_dir or default_output_dir(composition.profile.name)
    check_output_parent(out_dir)  # refused now, not after the fetch and the layers
    check_replaceable_output(out_dir, force=request.force)
    root = request.cache_root or default_cache_root()
    cache = BlobCache(root)
    oci_root = request.layer_cache_root or root / "oci"
    store = BlobStore(oci_root)
    layer_cache = LayerCache(oci_root) if request.use_layer_cache else None
    hashes = FileHashes(root / "compose" / "file-sha256.json")
    tree_cache = TreeCache(root / "trees") if request.use_tree_cache else None
    timings: dict[str, float] = {}
    clock = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[stage] = round(now - clock, 3)
        clock = now

    fetched = fetch_inputs(
        composition, cache, from_dirs=request.from_dirs, offline=request.offline, progress=progress, hashes=hashes,
        git_mirrors=request.git_mirrors,
        skip_git=[composition.source.name] if request.source_tree is not None else [],
    )
    lap("fetch_and_verify_inputs")
    # work/PROFILE.<host>.pid<N>.<random>: a killed build's directory is removed by the next
    # build (its pid is gone); a concurrent build's, or another host's, is left alone
    work_dir = make_run_directory(root / "work", composition.profile.name)
    scratch_dir = None if request.keep_work else memory_scratch_dir(composition.profile.name)
    try:
        # The output is staged beside out_dir and swapped in only when every stage
        # passed. The lower layers are made as soon as their trees exist, before the
        # overlay is planned, and the archive and the OCI layout take each layer's blob
        # as soon as the layer is made (a refused chain removes the staging directory,
        # archive, layout and all).
        with atomic_directory(out_dir, owned_output=True, force=request.force) as staging:
            combined: CombinedArchiveWriter | None = None
            layout: LayoutWriter | None = None

            def on_layer(layer: Layer) -> None:
                for writer in (combined, layout):
                    if writer is not None:
                        writer.add_layer(layer)

            lower: list[Layer] = []
            to_make: list[LayerTree] = []

            def take_cached_lower_layers(trees: list[LayerTree]) -> None:
                # Layers the layer cache already has (a rebuild: all of them) are taken
                # now, so the archive and the layout copies start early; the others are made after the overlay
                # is planned, so a patch that does not apply is refused before any of
                # them is compressed.
                lap("assemble_lower_trees")
                cached = cached_lower_layers(trees, request.options, store, layer_cache)
                lower.extend(cached)
                for layer in cached:
                    on_layer(layer)
                to_make.extend(trees[len(cached) :])

            try:
                combined = start_archive(staging, request.formats, request.options)
                layout = start_layout(staging, request.formats)
                assembly = assemble(
                    composition, fetched, work_dir / "trees", progress=progress, tree_cache=tree_cache, hashes=hashes,
                    source_tree=request.source_tree, scratch_dir=scratch_dir, on_lower_trees=take_cached_lower_layers,
                )
                lap("assemble_overlay")
                lower.extend(build_lower_layers(to_make, request.options, store, layer_cache, progress, on_layer))
                lap("lower_layers")
                prepared = prepare_top(composition, assembly, lower, request.options, store)
                chain = verify_composition(composition, fetched, assembly, prepared)
                lap("verify")
                result = finish(composition, fetched, assembly, lower, prepared, chain, request.options, store, layer_cache)
                lap("top_layer_and_image")
                write_outputs_into(staging, result, request.formats, combined, layout)
            except BaseException:
                for writer in (combined, layout):
                    if writer is not None:
                        writer.abort()
                raise
        lap("write_outputs")
        result = dataclasses.replace(
            result, extra={"timings": timings, "evicted": [str(eviction) for eviction in store.evicted]}
        )
        if not request.keep_work:
            result = dataclasses.replace(result, assembly=None)
        return result
    finally:
        hashes.save()
        if not request.keep_work:
            remove_tree(work_dir)
        if scratch_dir is not None:
            remove_tree(scratch_dir)
