"""The profile's Python source laid over an installed package, compiled parts retained.

The installed package (from its wheel) stays the base. The overlay source (the sdist of
the same version, or a git tree) contributes only Python and data files: a file is added
when the package lacks it, replaced when its bytes differ, and deleted only when the
anchored patch set deletes it. ELF files (compiled extensions) are never touched: an
overlay source that carries one, or that would write over one, is refused.

Two manifests record the result:

- the retained-native manifest: every ELF file under the installed package (path, size,
  sha256, machine, the wheel it came from), which must equal what the wheel shipped;
- the overlay manifest: every path the overlay changes (operation add|replace|delete,
  base sha256, target sha256), the source's identity, the patch set's sha256, and the
  git tree id and NAR hash of the patched source package.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.atomic_write import copy_bytes, open_new_file, write_new_file
from ..core.digest import sha256_file
from ..core.errors import CheckFailed, InputError
from ..oci.layer_input import walk_lstat
from .elf import ELF_MAGIC, ElfFile, iter_elf_files, parse_header
from .patches import ABSENT, FileReader, PatchedFile, PatchSet, apply_patch_set
from .wheel_archive import WHEEL_ARCHIVE_ERRORS

RETAINED_NATIVE_SCHEMA = "https://sparkflake.dev/retained-native/v1"
OVERLAY_SCHEMA = "https://sparkflake.dev/source-overlay/v1"

ADD = "add"
REPLACE = "replace"
DELETE = "delete"


@dataclass(frozen=True)
class OverlayEntry:
    path: str  # relative to the site-packages root, e.g. vllm/envs.py
    operation: str  # add | replace | delete
    base_sha256: str  # "" when the base lacks the path
    target_sha256: str  # "" for delete
    mode: int  # file mode written (0 for delete)


@dataclass(frozen=True)
class OverlayPlan:
    package: str
    entries: tuple[OverlayEntry, ...]
    unchanged: int
    source_files: dict[str, Path]  # path -> file in the source tree (for add/replace not patched)
    patched: dict[str, PatchedFile]


def is_elf_bytes(prefix: bytes) -> bool:
    return prefix.startswith(ELF_MAGIC)


def is_elf_file(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as handle:
        return is_elf_bytes(handle.read(4))


def elf_magic_paths(root: str | os.PathLike[str]) -> list[str]:
    """Relative paths of the regular files under ``root`` that start with the ELF magic
    (what ``is_elf_file`` says of each), sorted: a fact small enough to keep beside a
    cached tree."""
    return sorted(
        relative for relative, host_path, status in walk_lstat(root)
        if stat.S_ISREG(status.st_mode) and status.st_size >= len(ELF_MAGIC) and is_elf_file(host_path)
    )


# --------------------------------------------------------------------------- sources


def extract_sdist_package(
    sdist: str | os.PathLike[str], package: str, destination: str | os.PathLike[str]
) -> Path:
    """Extract ``<top>/<package>/**`` of an sdist (.tar.gz) to ``destination/<package>``.

    Only regular files and directories are taken; links, devices and paths escaping the
    package are refused with the member named. Modes are normalized (0644, 0755 when any
    execute bit is set) so the result does not depend on the sdist builder's umask.
    """
    sdist_path = Path(sdist)
    root = Path(destination)
    taken = 0
    try:
        with tarfile.open(sdist_path, mode="r:*") as archive:
            for member in archive:
                parts = PurePosixPath(member.name).parts
                if len(parts) < 2 or parts[1] != package:
                    continue
                relative = PurePosixPath(*parts[1:])
                if ".." in relative.parts or relative.is_absolute():
                    raise InputError(f"{sdist_path}: member {member.name!r} escapes the package")
                target = root / relative
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise InputError(
                        f"{sdist_path}: member {member.name!r} is not a regular file "
                        "(links and devices are not accepted in an overlay source)"
                    )
                target.parent.mkdir(parents=True, exist_ok=True)
                source = archive.extractfile(member)
                assert source is not None
                try:
                    with source, open_new_file(target) as handle:
                        shutil.copyfileobj(source, handle, 1 << 20)
                except OSError as exc:
                    if exc.filename != str(target):
                        raise  # reading the sdist
                    # writing the tree (a full disk): not the sdist's error
                    raise InputError(f"{sdist_path}: cannot write {target}: {exc.strerror or exc}") from exc
                os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
                taken += 1
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"{sdist_path}: cannot read sdist: {exc}") from exc
    if taken == 0:
        raise InputError(f"{sdist_path}: no files under <top>/{package}/ (is it the {package} sdist?)")
    return root / package


def package_files(
    root: str | os.PathLike[str], listing: Mapping[str, os.stat_result] | None = None
) -> dict[str, Path]:
    """Regular files under ``root`` by relative POSIX path (links and others refused).
    ``listing``: every path below ``root`` with its lstat from a walk already taken this
    build (``tree_cache.WalkedTrees.under``), else ``root`` is walked now."""
    return _walk_files(Path(root), listing)


def _walk_files(root: Path, listing: Mapping[str, os.stat_result] | None = None) -> dict[str, Path]:
    """Regular files under ``root`` keyed by POSIX path relative to ``root``, as os.walk
    finds them: a symlink to a directory is not followed (and not a file), any other
    symlink or non-regular file is refused."""
    base = os.fspath(root)
    if listing is None:
        listing = _lstat_files(base)
    files: dict[str, Path] = {}
    for relative, status in listing.items():
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            continue
        full = os.path.join(base, relative)
        if stat.S_ISLNK(mode):
            if os.path.isdir(full):  # os.walk lists it among the directories and does not enter it
                continue
            raise InputError(f"{full}: symlinks are not accepted in an overlay source")
        if not stat.S_ISREG(mode):
            raise InputError(f"{full}: not a regular file")
        files[relative] = Path(full)
    return files


def _lstat_files(base: str) -> dict[str, os.stat_result]:
    """The non-directory entries os.walk lists under ``base``, with their lstat."""
    found: dict[str, os.stat_result] = {}
    cut = len(os.path.join(base, ""))
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            found[full[cut:].replace(os.sep, "/")] = os.lstat(full)
    return found


# --------------------------------------------------------------------------- manifests


def retained_native_manifest(
    site_packages: str | os.PathLike[str],
    package: str,
    *,
    wheel_filename: str,
    wheel_sha256: str,
    hash_file: Callable[[Path], str] = sha256_file,
    elf_files: Iterable[ElfFile] | None = None,
) -> dict[str, Any]:
    """Every ELF file under ``site_packages/package`` with its size, sha256 and machine;
    ``elf_files``: those files as ``iter_elf_files`` finds them, when already known (a
    validated cached tree's kept fact), else the package is read."""
    package_dir = Path(site_packages) / package
    if not package_dir.is_dir():
        raise InputError(f"{package_dir}: installed package {package!r} not found")
    files = [
        {
            "path": f"{package}/{elf.path}",
            "size": elf.size,
            "sha256": hash_file(package_dir / elf.path),
            "machine": elf.machine_name,
            "wheel": wheel_filename,
            "wheel_sha256": wheel_sha256,
        }
        for elf in (iter_elf_files(package_dir) if elf_files is None else elf_files)
    ]
    return {"schema": RETAINED_NATIVE_SCHEMA, "package": package, "files": files}


def wheel_native_files(wheel: str | os.PathLike[str], package: str) -> dict[str, tuple[int, str]]:
    """ELF members of a wheel under ``package/``: path -> (size, sha256), read from the zip."""
    wheel_path = Path(wheel)
    shipped: dict[str, tuple[int, str]] = {}
    try:
        with zipfile.ZipFile(wheel_path) as archive:
            for member in archive.infolist():
                if member.is_dir() or not member.filename.startswith(f"{package}/"):
                    continue
                with archive.open(member) as handle:
                    head = handle.read(20)
                    if parse_header(head) is None:
                        continue
                    hasher = hashlib.sha256(head)
                    while chunk := handle.read(1 << 20):
                        hasher.update(chunk)
                shipped[member.filename] = (member.file_size, hasher.hexdigest())
    except WHEEL_ARCHIVE_ERRORS as exc:
        raise InputError(f"{wheel_path}: cannot read wheel: {exc}") from exc
    return shipped


def compare_retained_native(
    manifest: Mapping[str, Any], shipped: Mapping[str, tuple[int, str]]
) -> list[str]:
    """Differences between a retained-native manifest and a wheel's ELF members."""
    recorded = {entry["path"]: (entry["size"], entry["sha256"]) for entry in manifest["files"]}
    problems: list[str] = []
    for path in sorted(set(recorded) | set(shipped)):
        if path not in shipped:
            problems.append(f"{path}: in the image but not shipped by the wheel")
        elif path not in recorded:
            problems.append(f"{path}: shipped by the wheel but missing from the image")
        elif recorded[path] != shipped[path]:
            size, digest = shipped[path]
            got_size, got_digest = recorded[path]
            problems.append(
                f"{path}: wheel has size {size} sha256 {digest}, image has size {got_size} sha256 {got_digest}"
            )
    return problems


# --------------------------------------------------------------------------- planning


def plan_overlay(
    site_packages: str | os.PathLike[str],
    source_root: str | os.PathLike[str],
    package: str,
    patch_set: PatchSet | None = None,
    hash_file: Callable[[Path], str] = sha256_file,
    is_elf: Callable[[Path], bool] = is_elf_file,
    *,
    source_listing: Mapping[str, os.stat_result] | None = None,
    lstat: Callable[[Path], os.stat_result] = os.lstat,
) -> OverlayPlan:
    """Decide, path by path, what the overlay adds, replaces and deletes.

    ``source_root`` holds ``<package>/``; ``site_packages`` holds the installed
    ``<package>/``. Patches apply over the source first (falling back to the installed
    file for paths the source lacks); only their outcome and the source files that differ
    from the installed package become overlay entries. ``hash_file`` hashes the source
    and installed files (a stat-keyed cache in a build); ``is_elf`` says whether a file
    starts with the ELF magic (in a build, a validated cached tree's kept fact);
    ``source_listing`` and ``lstat`` give the source package's paths and an installed
    path's lstat (in a build, from the walk that validated the cached tree).
    """
    base_root = Path(site_packages)
    source_package = Path(source_root) / package
    if not source_package.is_dir():
        raise InputError(f"{source_package}: overlay source has no {package}/ directory")
    source_files = {
        f"{package}/{relative}": path for relative, path in _walk_files(source_package, source_listing).items()
    }
    patched: dict[str, PatchedFile] = {}
    if patch_set is not None and patch_set.patches:
        patched = apply_patch_set(patch_set, FileReader(source_root, base_root))
    entries: list[OverlayEntry] = []
    unchanged = 0
    for path in sorted(set(source_files) | set(patched)):
        base_file = base_root / path
        try:
            base_exists = stat.S_ISREG(lstat(base_file).st_mode)
            if not base_exists:  # a symlink, directory or other kind
                raise CheckFailed(f"{base_file}: overlay target is not a regular file", check_id="overlay.elf")
        except (FileNotFoundError, NotADirectoryError):
            base_exists = False
        if base_exists and is_elf(base_file):
            raise CheckFailed(
                f"overlay would touch ELF file {path} (compiled extensions are retained from the wheel)",
                check_id="overlay.elf",
            )
        if path in patched:
            outcome = patched[path]
            content = outcome.content
            if content is not None and is_elf_bytes(content[:4]):
                raise CheckFailed(f"patch result {path} is an ELF file", check_id="overlay.elf")
            target_sha = outcome.target_sha256
        else:
            source_file = source_files[path]
            if is_elf(source_file):
                raise CheckFailed(
                    f"overlay source {source_file} is an ELF file: only Python and data files may be overlaid",
                    check_id="overlay.elf",
                )
            target_sha = hash_file(source_file)
        base_sha = hash_file(base_file) if base_exists else ABSENT
        if target_sha == ABSENT:
            if base_exists:
                entries.append(OverlayEntry(path, DELETE, base_sha, ABSENT, 0))
            continue
        if base_sha == target_sha:
            unchanged += 1
            continue
        mode = _overlay_mode(base_file if base_exists else source_files.get(path))
        operation = REPLACE if base_exists else ADD
        entries.append(OverlayEntry(path, operation, base_sha, target_sha, mode))
    return OverlayPlan(package, tuple(entries), unchanged, source_files, patched)


def _overlay_mode(reference: Path | None) -> int:
    if reference is None:
        return 0o644
    return 0o755 if reference.stat().st_mode & 0o111 else 0o644


def write_patched_source(
    source_root: str | os.PathLike[str],
    package: str,
    plan: OverlayPlan,
    destination: str | os.PathLike[str],
) -> Path:
    """The patched source package as a tree (``destination/<package>``), for its git tree
    id and NAR hash: the source files with every patch outcome applied."""
    root = Path(destination)
    made: set[str] = set()
    for path, source_file in plan.source_files.items():
        copied = os.path.join(root, path)
        parent = os.path.dirname(copied)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        _copy_file(os.fspath(source_file), copied)
    for path, outcome in plan.patched.items():
        target = root / path
        if outcome.content is None:
            if target.exists():
                target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        reference = Path(source_root) / path
        write_new_file(target, outcome.content)
        os.chmod(target, _overlay_mode(reference if reference.is_file() else None))
    return root / package


def _copy_file(source: str, target: str) -> None:
    """Copy bytes in the kernel (copy_file_range) with the overlay mode (0755 if the source
    is executable by anyone, else 0644); no Python file objects: the patched source is a
    few thousand small files on every build."""
    source_fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        status = os.fstat(source_fd)
        mode = 0o755 if status.st_mode & 0o111 else 0o644
        target_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            if copy_bytes(source_fd, target_fd, status.st_size) != status.st_size:
                raise InputError(f"{source}: changed size while it was being copied")
            os.fchmod(target_fd, mode)
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)


def write_overlay_tree(plan: OverlayPlan, destination: str | os.PathLike[str]) -> list[str]:
    """Write the added and replaced files under ``destination`` (paths as in the plan).

    Returns the deleted paths: the layer writer turns them into whiteouts. Each written
    file is hashed again and compared with the plan, so the tree is what the manifest says.
    """
    root = Path(destination)
    deleted: list[str] = []
    for entry in plan.entries:
        if entry.operation == DELETE:
            deleted.append(entry.path)
            continue
        target = root / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.path in plan.patched:
            content = plan.patched[entry.path].content
            assert content is not None
            write_new_file(target, content)
        else:
            shutil.copyfile(plan.source_files[entry.path], target)
        os.chmod(target, entry.mode)
        actual = sha256_file(target)
        if actual != entry.target_sha256:
            raise CheckFailed(
                f"{target}: written overlay file sha256 {actual} != planned {entry.target_sha256}",
                check_id="overlay.changes",
            )
    return deleted


def overlay_manifest(
    plan: OverlayPlan,
    *,
    source_identity: Mapping[str, Any],
    patch_set_sha256: str,
    patched_tree_git: str,
    patched_tree_nar_hash: str,
    install_prefix: str,
) -> dict[str, Any]:
    """The active Python overlay manifest (JSON-ready)."""
    return {
        "schema": OVERLAY_SCHEMA,
        "package": plan.package,
        "install_prefix": install_prefix,
        "source": dict(source_identity),
        "patch_set_sha256": patch_set_sha256,
        "patched_source": {"git_tree": patched_tree_git, "nar_hash": patched_tree_nar_hash},
        "unchanged_files": plan.unchanged,
        "entries": [
            {
                "path": entry.path,
                "operation": entry.operation,
                "base_sha256": entry.base_sha256,
                "target_sha256": entry.target_sha256,
            }
            for entry in plan.entries
        ],
    }


def package_tree_hashes(
    root: str | os.PathLike[str],
    hash_file: Callable[[Path], str] = sha256_file,
    listing: Mapping[str, os.stat_result] | None = None,
) -> dict[str, str]:
    """path -> sha256 for every regular file under ``root`` (relative POSIX paths);
    ``listing`` as for ``package_files``."""
    return {relative: hash_file(path) for relative, path in _walk_files(Path(root), listing).items()}


def compare_overlay(
    manifest: Mapping[str, Any],
    before: Mapping[str, str],
    after: Mapping[str, str],
) -> list[str]:
    """Check that ``after`` differs from ``before`` exactly as the manifest's entries say.

    ``before``/``after`` map site-packages-relative paths of the package to sha256 (the
    package without and with the overlay). Every path not in the manifest must be equal.
    """
    problems: list[str] = []
    declared = {entry["path"]: entry for entry in manifest["entries"]}
    for path in sorted(set(before) | set(after) | set(declared)):
        old, new = before.get(path, ABSENT), after.get(path, ABSENT)
        entry = declared.get(path)
        if entry is None:
            if old != new:
                problems.append(f"{path}: changed ({old or 'absent'} -> {new or 'absent'}) but not in the overlay manifest")
            continue
        if old != entry["base_sha256"]:
            problems.append(f"{path}: base sha256 expected {entry['base_sha256'] or 'absent'}, found {old or 'absent'}")
        if new != entry["target_sha256"]:
            problems.append(f"{path}: target sha256 expected {entry['target_sha256'] or 'absent'}, found {new or 'absent'}")
    return problems
