"""Pure-Python packages installed from their pinned git sources over their wheels.

vLLM's source overlay (``source_overlay``) is one case; B12X and SparkCache are the others:
a profile that names ``b12x_source`` / ``sparkcache_source`` (git inputs) gets the
package's Python from that commit laid over the wheel the lock pins (the wheel still
gives the distribution metadata and any compiled part, which is never replaced). For each
package the build records which files came from the source and which from the wheel.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import CheckFailed, InputError
from ..core.tree_digest import git_tree_id, nar_hash
from ..lock.pins import GitPin, WheelPin
from .source_overlay import (
    DELETE,
    OverlayPlan,
    overlay_manifest,
    package_files,
    plan_overlay,
    write_overlay_tree,
)

SOURCE_PACKAGES_SCHEMA = "https://sparkflake.dev/source-packages/v1"


@dataclass(frozen=True)
class SourcePackageRole:
    package: str  # the import package, a directory in site-packages and in the source
    wheel_role: str  # the profile role of the wheel installed underneath
    source_role: str  # the profile role of the git input laid over it


SOURCE_PACKAGES = (
    SourcePackageRole("b12x", "b12x", "b12x_source"),
    SourcePackageRole("sparkcache", "sparkcache", "sparkcache_source"),
)

# Where a repository keeps its import package: at the top (vLLM, SparkCache: SparkRing's
# builder takes the "vllm" and "sparkcache" subtrees) or in a src/ layout.
_PACKAGE_PARENTS = ("", "src")


def package_parent(tree: Path, package: str, name: str) -> Path:
    """The directory of ``tree`` that holds ``package/`` (its ``__init__.py``)."""
    found = [tree / parent for parent in _PACKAGE_PARENTS if (tree / parent / package / "__init__.py").is_file()]
    if len(found) != 1:
        where = " and ".join(str(f.relative_to(tree) / package) for f in found) or "neither"
        raise InputError(
            f"{name}: expected the package {package}/ (with __init__.py) at the top of the source "
            f"or under src/, found {where}"
        )
    return found[0]


# SparkRing's "deployable source SHA-256" (runtime/glm53-flash-jj-r8-gb10/build_image.py,
# sparkcache_source_sha256, in FujitsuPolycom/sparkring): over the package directory, every
# regular file in order of its relative POSIX path, skipping __pycache__, .pytest_cache and
# build directories and .pyc/.pyo files: the path's UTF-8 length (4 bytes, little endian),
# the path, and the sha256 of the content with CRLF read as LF.
_SOURCE_TREE_DOMAIN = b"sparkcache-source-tree/v1\x00"
_SKIPPED_PARTS = frozenset({"__pycache__", ".pytest_cache", "build"})


def source_tree_sha256(package_dir: Path) -> str:
    digest = hashlib.sha256(_SOURCE_TREE_DOMAIN)
    files: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames.sort()
        for filename in filenames:
            path = Path(dirpath, filename)
            relative = path.relative_to(package_dir).as_posix()
            if path.is_symlink() or not path.is_file():
                raise InputError(f"{path}: not a regular file (the source digest reads regular files only)")
            if _SKIPPED_PARTS & set(relative.split("/")) or path.suffix in (".pyc", ".pyo"):
                continue
            files.append((relative, path))
    if not files:
        raise InputError(f"{package_dir}: no files to digest")
    for relative, path in sorted(files):
        encoded = relative.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "little"))
        digest.update(encoded)
        digest.update(hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).digest())
    return digest.hexdigest()


def check_source_sha256(package_dir: Path, expected: str | None, name: str) -> str | None:
    if expected is None:
        return None
    actual = source_tree_sha256(package_dir)
    if actual != expected:
        raise CheckFailed(
            f"{name}: source digest (sparkcache-source-tree/v1) of {package_dir.name}/ is {actual}, "
            f"the lock says {expected}",
            check_id="inputs",
        )
    return actual


def file_provenance(plan: OverlayPlan, installed: list[str]) -> tuple[list[str], list[str]]:
    """(paths whose bytes in the image are the source's, paths kept from the wheel):
    ``installed`` lists the wheel's files of the package (site-packages relative)."""
    deleted = {entry.path for entry in plan.entries if entry.operation == DELETE}
    from_source = sorted(
        path for path in set(plan.source_files) | set(plan.patched)
        if path not in deleted and not (path in plan.patched and plan.patched[path].content is None)
    )
    chosen = set(from_source)
    from_wheel = sorted(path for path in installed if path not in chosen and path not in deleted)
    return from_source, from_wheel


@dataclass(frozen=True)
class PackageOverlay:
    """One pure-Python package's source laid over its wheel (``source_packages``)."""

    package: str
    tree: Path  # the Python layer tree holding the wheel's install of the package
    plan: OverlayPlan
    deletions: tuple[str, ...]
    manifest: Mapping[str, Any]  # overlay entries, files from source and from the wheel


def overlay_package(
    role: SourcePackageRole,
    wheel: WheelPin,
    pin: GitPin,
    checkout: Path,
    *,
    python_trees: Mapping[str, Path],
    site_packages: str,
    overlay_tree: Path,
    hash_file: Callable[[Path], str],
) -> PackageOverlay:
    package = role.package
    holders = [tree for tree in python_trees.values() if (tree / site_packages.lstrip("/") / package).is_dir()]
    if len(holders) != 1:
        raise InputError(f"{wheel.filename}: expected it to install {package}/ into one Python layer, found {len(holders)}")
    site = holders[0] / site_packages.lstrip("/")
    source_root = package_parent(checkout, package, pin.name)
    source_sha256 = check_source_sha256(source_root / package, pin.source_sha256, pin.name)
    plan = plan_overlay(site, source_root, package, None, hash_file)
    deletions = tuple(write_overlay_tree(plan, overlay_tree))
    from_source, from_wheel = file_provenance(plan, [f"{package}/{path}" for path in package_files(site / package)])
    source = {"kind": "git", "name": pin.name, "uri": pin.urls[0], "rev": pin.rev, "tree": pin.tree,
              "package_dir": (source_root / package).relative_to(checkout).as_posix()}
    if source_sha256 is not None:
        source["source_sha256"] = source_sha256
    manifest = {
        **overlay_manifest(plan, source_identity=source, patch_set_sha256="", patched_tree_git=git_tree_id(source_root / package),
                           patched_tree_nar_hash=nar_hash(source_root / package).sri, install_prefix=site_packages),
        "wheel": {"filename": wheel.filename, "sha256": wheel.sha256},
        "files_from_source": from_source,
        "files_from_wheel": from_wheel,
    }
    return PackageOverlay(package, holders[0], plan, deletions, manifest)


def source_packages_document(
    package: str,
    installed_package: Path,
    patched_package: Path,
    source_identity: Mapping[str, object],
    overlay_entries: Sequence[Mapping[str, object]],
    package_overlays: Sequence[PackageOverlay],
) -> dict[str, object]:
    """The in-image record of every package installed from source over its wheel, vLLM's
    (``package``: its installed and patched-source trees, identity and overlay entries)
    first: which files came from the source and which from the wheel."""
    deleted = {entry["path"] for entry in overlay_entries if entry["operation"] == DELETE}
    source_paths = {f"{package}/{p}" for p in package_files(patched_package)}
    first = {
        "package": package,
        "source": dict(source_identity),
        "files_from_source": sorted(source_paths),
        "files_from_wheel": sorted(
            f"{package}/{p}" for p in package_files(installed_package) if f"{package}/{p}" not in source_paths | deleted
        ),
    }
    packages = [first] + [
        {key: overlay.manifest[key] for key in ("package", "source", "wheel", "files_from_source", "files_from_wheel")}
        for overlay in package_overlays
    ]
    return {"schema": SOURCE_PACKAGES_SCHEMA, "packages": packages,
            "overlays": [overlay.manifest for overlay in package_overlays]}
