"""The Python environment tree: every locked wheel installed with pypa/installer.

Layout (image paths): a virtual environment at ``/opt/venv`` over the base's CPython —
``bin/python`` → ``/usr/bin/python3.11``, ``pyvenv.cfg`` with ``home = /usr/bin``,
packages in ``lib/python3.11/site-packages``, console scripts in ``bin/`` with the shebang
``#!/opt/venv/bin/python``. Each distribution's ``RECORD`` is written by installer and
``INSTALLER`` says ``sparkflake``. Bytecode is absent: compiling would need a CPython
3.11 on the build machine to match the target's magic number, and ``.pyc`` files embed
source mtimes; without them the tree is the same on every machine.

Each wheel is checked before and while it is installed: its tags must fit the target;
its RECORD must list every member (installer's structural validation) and every member's
bytes must hash to its RECORD entry, checked in the same pass that writes them. Wheels
install into separate staging trees (in parallel), then merge: two distributions may
write the same path only with identical bytes. The whole tree appears atomically or not
at all.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import stat
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.records import Hash, RecordEntry
from installer.sources import WheelContentElement, WheelFile
from installer.utils import Scheme, copyfileobj_with_hashing
from packaging.utils import canonicalize_name, parse_wheel_filename

from ..core.atomic_write import NamedWrites, atomic_directory, write_new_file
from ..core.errors import CheckFailed
from ..core.progress import ProgressCallback
from ..core.worker_processes import worker_pool
from ..lock.target import DEBIAN_BOOKWORM_ARM64, InstallTarget, wheel_tags
from .elf import check_machine
from .wheel_archive import WHEEL_ARCHIVE_ERRORS

DEFAULT_PREFIX = "/opt/venv"
INSTALLER_NAME = b"sparkflake\n"


@dataclass(frozen=True)
class WheelInput:
    """One locked wheel and the verified file holding it (blobs are named by hash)."""

    name: str
    version: str
    filename: str
    path: Path


@dataclass(frozen=True)
class RecordWaiver:
    """An upstream wheel whose RECORD is wrong for one member, accepted for exact bytes only:
    the wheel (by sha256), the member, and the member's actual sha256 and size."""

    wheel: str
    wheel_sha256: str
    path: str
    actual_sha256: str
    actual_size: int
    reason: str = ""


@dataclass(frozen=True)
class CollisionRule:
    """Two wheels ship one path with different bytes (an upstream packaging defect): the
    profile decides which wheel's file the image keeps (``keep`` None: neither)."""

    path: str  # image path, e.g. /opt/venv/lib/python3.11/site-packages/b12x/__init__.py
    keep: str | None
    drop: tuple[str, ...]
    reason: str = ""

    @property
    def wheels(self) -> tuple[str, ...]:
        return ((self.keep,) if self.keep else ()) + self.drop


@dataclass
class EnvManifest:
    prefix: str
    distributions: list[dict[str, object]] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)  # image path -> wheel filename
    shared_identical: list[dict[str, object]] = field(default_factory=list)
    waived: list[dict[str, object]] = field(default_factory=list)
    collisions: list[dict[str, object]] = field(default_factory=list)
    elf_files: int = 0


def scheme_for(prefix: str, target: InstallTarget, distribution: str) -> dict[str, str]:
    site = f"{prefix}/lib/python{target.python_minor}/site-packages"
    return {
        "purelib": site,
        "platlib": site,
        "scripts": f"{prefix}/bin",
        "data": prefix,
        "headers": f"{prefix}/include/site/python{target.python_minor}/{distribution}",
    }


def check_wheel_fits(wheel: WheelInput, target: InstallTarget) -> None:
    try:
        tags = wheel_tags(wheel.filename)
        name, version, _build, _tags = parse_wheel_filename(wheel.filename)
    except ValueError as exc:
        raise CheckFailed(f"{wheel.filename}: not a wheel file name: {exc}", check_id="wheel-tags") from exc
    if target.wheel_rank(tags) is None:
        raise CheckFailed(
            f"{wheel.filename}: tags {', '.join(sorted(str(t) for t in tags))} do not fit "
            f"{target.platform} {target.python_tag} (manylinux up to {target.glibc[0]}.{target.glibc[1]})",
            check_id="wheel-tags",
        )
    if canonicalize_name(wheel.name) != name or str(version) != wheel.version:
        raise CheckFailed(
            f"{wheel.filename}: lock says {wheel.name} {wheel.version}, the file is {name} {version}",
            check_id="wheel-identity",
        )


class _RecordCheckedStream(io.RawIOBase):
    """Passes a member's bytes through and refuses at EOF if they disagree with RECORD."""

    def __init__(self, stream: BinaryIO, record: RecordEntry, wheel: str, waiver: RecordWaiver | None = None) -> None:
        self._stream = stream
        self._record = record
        self._wheel = wheel
        self._waiver = waiver
        self._hasher = hashlib.new(record.hash_.name) if record.hash_ else None
        self._sha256 = hashlib.sha256() if waiver is not None else None
        self._size = 0
        self._checked = False

    def readable(self) -> bool:
        return True

    @property
    def algorithm(self) -> str | None:
        return self._record.hash_.name if self._record.hash_ else None

    def content_digest(self) -> tuple[str, int]:
        """(urlsafe base64 digest, size) of the bytes read, in RECORD's algorithm."""
        assert self._hasher is not None
        return base64.urlsafe_b64encode(self._hasher.digest()).decode("ascii").rstrip("="), self._size

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        if chunk:
            self._size += len(chunk)
            if self._hasher is not None:
                self._hasher.update(chunk)
            if self._sha256 is not None:
                self._sha256.update(chunk)
        if not chunk or size is None or size < 0:
            self._verify()
        return chunk

    def _verify(self) -> None:
        if self._checked:
            return
        self._checked = True
        record = self._record
        if record.hash_ is None or record.size is None or self._hasher is None:
            raise CheckFailed(
                f"{self._wheel}: RECORD has no hash/size for {record.path}", check_id="wheel-record"
            )
        digest = base64.urlsafe_b64encode(self._hasher.digest()).decode("ascii").rstrip("=")
        if digest == record.hash_.value and self._size == record.size:
            return
        waiver = self._waiver
        if waiver is not None and self._sha256 is not None:
            if self._sha256.hexdigest() == waiver.actual_sha256 and self._size == waiver.actual_size:
                return
        actual = self._sha256.hexdigest() if self._sha256 is not None else None
        raise CheckFailed(
            f"{self._wheel}: {record.path} does not match its RECORD entry "
            f"({record.hash_.name}={record.hash_.value}, size {record.size}; "
            f"content has {record.hash_.name}={digest}, size {self._size})"
            + (f"; the waiver expects sha256 {waiver.actual_sha256} size {waiver.actual_size}, content has {actual}" if waiver else "")
            + "; an upstream defect can be accepted for these exact bytes with a [[waiver]] "
            "in the lock's .assembly-policy.toml (docs/inputs.md)",
            check_id="wheel-record",
        )


class _CheckedWheel(WheelFile):
    waivers: dict[str, RecordWaiver] = {}  # member path -> waiver, for this wheel

    def get_contents(self) -> Iterator[WheelContentElement]:
        record_path = f"{self.dist_info_dir}/RECORD"
        wheel = Path(self._zipfile.filename or "").name
        for elements, stream, is_executable in super().get_contents():
            if elements[0] == record_path:
                yield elements, stream, is_executable
                continue
            entry = RecordEntry.from_elements(*elements)
            checked = _RecordCheckedStream(stream, entry, wheel, self.waivers.get(entry.path))
            # installer only reads it (read(), readinto()), what a RawIOBase offers
            yield elements, cast(BinaryIO, checked), is_executable


class _TreeDestination(SchemeDictionaryDestination):
    """installer's scheme destination with fixed modes, named refusals, one hash per file.

    Paths are joined as strings and checked against the scheme root (installer's pathlib
    version costs more than the write for small files); directories made are remembered;
    files are created exclusively (O_EXCL), so a path written twice is an error, not a
    silent overwrite.
    """

    wheel_name: str = ""

    def prepare(self, wheel_name: str) -> None:
        self.wheel_name = wheel_name
        self.written: list[str] = []  # image paths, in write order
        self._made: set[str] = set()
        self._roots = {
            scheme: os.path.normpath(str(self.destdir) + "/" + root.lstrip("/"))
            for scheme, root in self.scheme_dict.items()
        }
        self._stage = os.path.normpath(str(self.destdir))
        umask = os.umask(0)
        os.umask(umask)
        self._umask_keeps_modes = (0o755 & ~umask) == 0o755

    def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
        root = self._roots[scheme]
        target = os.path.normpath(os.path.join(root, path))
        if not target.startswith(root + "/"):
            raise CheckFailed(f"{self.wheel_name}: member {path!r} escapes the target", check_id="path-escape")
        parent = os.path.dirname(target)
        if parent not in self._made:
            os.makedirs(parent, mode=0o755, exist_ok=True)
            self._made.add(parent)
        mode = 0o755 if is_executable else 0o644
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:
            raise CheckFailed(f"{self.wheel_name}: {path} is written twice", check_id="path-conflict") from None
        except OSError as exc:
            raise self._cannot_write(target, exc) from exc
        try:
            with NamedWrites(fd, target, closefd=True) as handle:
                if isinstance(stream, _RecordCheckedStream) and stream.algorithm == self.hash_algorithm:
                    # the RECORD check already hashes these bytes: reuse that digest
                    while chunk := stream.read(_CHUNK):
                        handle.write(chunk)
                    digest, size = stream.content_digest()
                else:
                    digest, size = copyfileobj_with_hashing(stream, handle, self.hash_algorithm)
                if not self._umask_keeps_modes:
                    os.fchmod(handle.fileno(), mode)
        except OSError as exc:
            if exc.filename != target:
                raise  # reading the wheel: install_wheel reports it as the wheel's
            raise self._cannot_write(target, exc) from exc
        self.written.append(target[len(self._stage) :])
        return RecordEntry(path, Hash(self.hash_algorithm, digest), size)

    def _cannot_write(self, target: str, exc: OSError) -> CheckFailed:
        """Writing the tree failed (a full disk): the tree's error, with the path, never the
        wheel's (``wheel-install``)."""
        return CheckFailed(f"{self.wheel_name}: cannot write {target} in the Python environment tree: "
                           f"{exc.strerror or exc}", check_id="env-tree-write")

    def write_file(
        self, scheme: Scheme, path: str | os.PathLike[str], stream: BinaryIO, is_executable: bool
    ) -> RecordEntry:
        if scheme == "scripts":
            # fix_shebang seeks; read (and RECORD-check) the script first.
            stream = io.BytesIO(stream.read())
        return super().write_file(scheme, path, stream, is_executable)


_CHUNK = 1 << 20


def install_wheel(
    wheel_path: str,
    filename: str,
    stage: str,
    prefix: str,
    target: InstallTarget,
    waivers: tuple[RecordWaiver, ...] = (),
) -> tuple[str, list[str]]:
    """Install one wheel into ``stage`` (an empty directory standing for the image root);
    returns the wheel's name and the image paths it wrote."""
    name = parse_wheel_filename(filename)[0]
    destination = _TreeDestination(
        scheme_dict=scheme_for(prefix, target, str(name)),
        interpreter=f"{prefix}/bin/python",
        script_kind="posix",
        destdir=stage,
    )
    destination.prepare(filename)
    try:
        with zipfile.ZipFile(wheel_path) as archive:
            archive.filename = filename  # blobs are named by hash; installer reads the name
            for info in archive.infolist():
                if info.filename.startswith("/") or ".." in info.filename.split("/"):
                    raise CheckFailed(f"{filename}: member {info.filename!r} escapes the target", check_id="path-escape")
            source = _CheckedWheel(archive)
            source.waivers = {w.path: w for w in waivers if w.wheel == filename}
            source.validate_record(validate_contents=False)
            with warnings.catch_warnings():
                # installer skips __pycache__ members a wheel ships (numpy does) and warns;
                # skipping is what we want, and only the CLI prints.
                warnings.simplefilter("ignore", RuntimeWarning)
                install(source, destination, {"INSTALLER": INSTALLER_NAME})
    except CheckFailed:
        raise
    except (InstallerError, ValueError, KeyError, *WHEEL_ARCHIVE_ERRORS) as exc:
        raise CheckFailed(f"{filename}: cannot install: {exc}", check_id="wheel-install") from exc
    return filename, destination.written


def _same_bytes(left: Path, right: Path) -> bool:
    if left.stat().st_size != right.stat().st_size:
        return False
    return _sha256(left) == _sha256(right)


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def _resolve_shared_paths(
    written: dict[str, list[str]],
    stages: dict[str, Path],
    order: Sequence[str],
    rules: Sequence[CollisionRule],
    manifest: EnvManifest,
) -> None:
    """Decide every path more than one wheel wrote, before any tree is merged.

    Identical bytes (and mode): the first wheel by name keeps it. Different bytes: only a
    collision rule naming exactly those wheels decides; otherwise both wheels are named.
    Losing copies are deleted from their staging trees, so the merge never overwrites.
    """
    writers: dict[str, list[str]] = {}
    for wheel in order:
        for path in written[wheel]:
            writers.setdefault(path, []).append(wheel)
            manifest.owners.setdefault(path, wheel)
    by_path = {rule.path: rule for rule in rules}
    for declared in rules:
        actual = writers.get(declared.path, [])
        if set(actual) != set(declared.wheels) or len(actual) < 2:
            raise CheckFailed(
                f"collision rule for {declared.path} names {', '.join(declared.wheels)}, but "
                f"{', '.join(sorted(actual)) or 'none of them'} wrote it; "
                "a rule must match the locked wheels exactly (remove or update it)",
                check_id="path-conflict",
            )
    for path, wheels in writers.items():
        if len(wheels) < 2:
            continue
        copies = {wheel: Path(str(stages[wheel]) + path) for wheel in wheels}
        rule = by_path.get(path)
        if rule is not None:
            for wheel in wheels:
                if wheel != rule.keep:
                    copies[wheel].unlink()
            if rule.keep is None:
                del manifest.owners[path]
            else:
                manifest.owners[path] = rule.keep
            manifest.collisions.append({"path": rule.path, "keep": rule.keep, "drop": list(rule.drop), "reason": rule.reason})
            continue
        first = wheels[0]
        for other in wheels[1:]:
            same_mode = stat.S_IMODE(copies[first].stat().st_mode) == stat.S_IMODE(copies[other].stat().st_mode)
            if not (same_mode and _same_bytes(copies[first], copies[other])):
                raise CheckFailed(
                    f"{path} is written by {first} and by {other} with different bytes; "
                    "if this is an upstream packaging defect, name the wheel to keep with a [[collision]] "
                    "in the lock's .assembly-policy.toml (docs/inputs.md)",
                    check_id="path-conflict",
                )
            copies[other].unlink()
        manifest.shared_identical.append({"path": path, "wheels": wheels})


def _merge_tree(source: str, destination: str, wheel: str, stage_root: str) -> None:
    """Move a staging tree into the image tree: a directory the image lacks moves whole
    (one rename), a directory it has is merged entry by entry."""
    with os.scandir(source) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            target = os.path.join(destination, entry.name)
            try:
                existing = os.lstat(target)
            except FileNotFoundError:
                os.rename(entry.path, target)
                continue
            if entry.is_dir(follow_symlinks=False) and stat.S_ISDIR(existing.st_mode):
                _merge_tree(entry.path, target, wheel, stage_root)
                continue
            raise CheckFailed(
                f"{entry.path[len(stage_root):]} from {wheel} collides with a "
                f"{'directory' if stat.S_ISDIR(existing.st_mode) else 'file'} another wheel installed",
                check_id="path-conflict",
            )


def _venv_skeleton(root: Path, prefix: str, target: InstallTarget, python_home: str) -> None:
    base = root / prefix.strip("/")
    (base / "bin").mkdir(parents=True, exist_ok=True)
    (base / f"lib/python{target.python_minor}/site-packages").mkdir(parents=True, exist_ok=True)
    (base / "include").mkdir(exist_ok=True)
    python = base / "bin/python"
    if not os.path.lexists(python):
        os.symlink(f"{python_home}/python{target.python_minor}", python)
    for alias in ("python3", f"python{target.python_minor}"):
        if not os.path.lexists(base / "bin" / alias):
            os.symlink("python", base / "bin" / alias)
    if not os.path.lexists(base / "lib64"):
        os.symlink("lib", base / "lib64")
    write_new_file(base / "pyvenv.cfg", (
        f"home = {python_home}\n"
        "include-system-site-packages = false\n"
        f"version = {target.python_full_version}\n"
        f"executable = {python_home}/python{target.python_minor}\n"
    ).encode())


def assemble_python_env(
    wheels: Sequence[WheelInput],
    output: str | os.PathLike[str],
    *,
    target: InstallTarget = DEBIAN_BOOKWORM_ARM64,
    prefix: str = DEFAULT_PREFIX,
    python_home: str = "/usr/bin",
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    waivers: Sequence[RecordWaiver] = (),
    collisions: Sequence[CollisionRule] = (),
) -> EnvManifest:
    """Install ``wheels`` into a tree at ``output`` whose root stands for the image root.

    ``waivers`` accept named upstream RECORD defects for exact member bytes (and are listed
    in the manifest); everything else that disagrees with RECORD is refused.
    """
    ordered = sorted(wheels, key=lambda w: canonicalize_name(w.name))
    for wheel in ordered:
        check_wheel_fits(wheel, target)
    manifest = EnvManifest(prefix=prefix)
    workers = workers or min(4, os.cpu_count() or 1)
    with atomic_directory(output) as root:
        os.chmod(root, 0o755)
        staging = root / ".sparkflake-wheels"
        stages = {wheel.filename: staging / f"{position:04d}" for position, wheel in enumerate(ordered)}
        for stage in stages.values():
            stage.mkdir(parents=True)
        done = 0
        written: dict[str, list[str]] = {}
        total = sum(w.path.stat().st_size for w in ordered)
        sizes = {w.filename: w.path.stat().st_size for w in ordered}
        # Larger wheels first so the pool's last task is small.
        schedule = sorted(ordered, key=lambda w: -sizes[w.filename])
        if workers > 1 and len(ordered) > 1:
            with worker_pool(workers) as pool:
                futures = [
                    pool.submit(install_wheel, str(w.path), w.filename, str(stages[w.filename]), prefix, target, tuple(waivers))
                    for w in schedule
                ]
                for future in futures:
                    finished, paths = future.result()
                    written[finished] = paths
                    done += sizes[finished]
                    if progress:
                        progress(done, total, finished)
        else:
            for wheel in schedule:
                finished, paths = install_wheel(
                    str(wheel.path), wheel.filename, str(stages[wheel.filename]), prefix, target, tuple(waivers)
                )
                written[finished] = paths
                done += sizes[wheel.filename]
                if progress:
                    progress(done, total, wheel.filename)
        order = [w.filename for w in ordered]
        _resolve_shared_paths(written, stages, order, collisions, manifest)
        for wheel in ordered:
            stage = stages[wheel.filename]
            _merge_tree(str(stage), str(root), wheel.filename, str(stage))
            manifest.distributions.append(
                {
                    "name": canonicalize_name(wheel.name),
                    "version": wheel.version,
                    "wheel": wheel.filename,
                    "files": len(written[wheel.filename]),
                }
            )
        shutil.rmtree(staging)
        installed = {w.filename for w in ordered}
        manifest.waived = [
            {"wheel": w.wheel, "path": w.path, "actual_sha256": w.actual_sha256, "reason": w.reason}
            for w in waivers
            if w.wheel in installed
        ]
        _venv_skeleton(root, prefix, target, python_home)
        manifest.elf_files = check_machine(root, target.platform)
    return manifest
