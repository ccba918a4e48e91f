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
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.records import Hash, RecordEntry
from installer.sources import WheelFile
from installer.utils import copyfileobj_with_hashing
from packaging.utils import canonicalize_name, parse_wheel_filename

from ..atomic_write import atomic_directory
from ..errors import CheckFailed
from ..resolve.target import DEBIAN_BOOKWORM_ARM64, Target, wheel_tags
from .elf import check_machine

ProgressCallback = Callable[[int, int, str], None]

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


def scheme_for(prefix: str, target: Target, distribution: str) -> dict[str, str]:
    site = f"{prefix}/lib/python{target.python_minor}/site-packages"
    return {
        "purelib": site,
        "platlib": site,
        "scripts": f"{prefix}/bin",
        "data": prefix,
        "headers": f"{prefix}/include/site/python{target.python_minor}/{distribution}",
    }


def check_wheel_fits(wheel: WheelInput, target: Target) -> None:
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

    def get_contents(self):  # noqa: ANN201 (installer's iterator type)
        record_path = f"{self.dist_info_dir}/RECORD"
        wheel = Path(self._zipfile.filename or "").name
        for elements, stream, is_executable in super().get_contents():
            if elements[0] == record_path:
                yield elements, stream, is_executable
                continue
            entry = RecordEntry.from_elements(*elements)
            yield elements, _RecordCheckedStream(stream, entry, wheel, self.waivers.get(entry.path)), is_executable


class _TreeDestination(SchemeDictionaryDestination):
    """installer's scheme destination with fixed modes and named refusals."""

    wheel_name: str = ""

    def write_to_fs(self, scheme, path, stream, is_executable):  # noqa: ANN001, ANN201
        try:
            target_path = self._path_with_destdir(scheme, path)
        except ValueError as exc:
            raise CheckFailed(f"{self.wheel_name}: member {path!r} escapes the target: {exc}", check_id="path-escape") from exc
        if os.path.lexists(target_path):
            raise CheckFailed(f"{self.wheel_name}: {path} is written twice", check_id="path-conflict")
        target_path.parent.mkdir(parents=True, exist_ok=True)
        with open(target_path, "wb") as handle:
            digest, size = copyfileobj_with_hashing(stream, handle, self.hash_algorithm)
        os.chmod(target_path, 0o755 if is_executable else 0o644)
        return RecordEntry(path, Hash(self.hash_algorithm, digest), size)

    def write_file(self, scheme, path, stream, is_executable):  # noqa: ANN001, ANN201
        if scheme == "scripts":
            # fix_shebang seeks; read (and RECORD-check) the script first.
            stream = io.BytesIO(stream.read())
        return super().write_file(scheme, path, stream, is_executable)


def install_wheel(
    wheel_path: str,
    filename: str,
    stage: str,
    prefix: str,
    target: Target,
    waivers: tuple[RecordWaiver, ...] = (),
) -> str:
    """Install one wheel into ``stage`` (an empty directory standing for the image root)."""
    name = parse_wheel_filename(filename)[0]
    destination = _TreeDestination(
        scheme_dict=scheme_for(prefix, target, str(name)),
        interpreter=f"{prefix}/bin/python",
        script_kind="posix",
        destdir=stage,
    )
    destination.wheel_name = filename
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
    except (InstallerError, zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError) as exc:
        raise CheckFailed(f"{filename}: cannot install: {exc}", check_id="wheel-install") from exc
    return filename


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


def _merge(
    stage: Path,
    root: Path,
    wheel: str,
    manifest: EnvManifest,
    rules: dict[str, CollisionRule],
    seen: dict[str, set[str]],
) -> int:
    count = 0
    for dirpath, dirnames, filenames in os.walk(stage):
        dirnames.sort()
        relative_dir = os.path.relpath(dirpath, stage)
        destination_dir = root if relative_dir == "." else root / relative_dir
        destination_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        for filename in sorted(filenames):
            source = Path(dirpath) / filename
            destination = destination_dir / filename
            image = "/" + (filename if relative_dir == "." else f"{relative_dir}/{filename}").replace(os.sep, "/")
            rule = rules.get(image)
            if rule is not None and wheel in rule.wheels:
                seen.setdefault(image, set()).add(wheel)
                if wheel != rule.keep:
                    continue
                os.replace(source, destination)
                manifest.owners[image] = wheel
                count += 1
                continue
            if os.path.lexists(destination):
                if _same_bytes(source, destination) and stat.S_IMODE(source.stat().st_mode) == stat.S_IMODE(destination.stat().st_mode):
                    manifest.shared_identical.append({"path": image, "wheels": [manifest.owners[image], wheel]})
                    continue
                raise CheckFailed(
                    f"{image} is written by {manifest.owners.get(image, 'another input')} and by {wheel} with different bytes; "
                    "if this is an upstream packaging defect, name the wheel to keep with a [[collision]] "
                    "in the lock's .assembly-policy.toml (docs/inputs.md)",
                    check_id="path-conflict",
                )
            os.replace(source, destination)
            manifest.owners[image] = wheel
            count += 1
    return count


def _venv_skeleton(root: Path, prefix: str, target: Target, python_home: str) -> None:
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
    (base / "pyvenv.cfg").write_text(
        f"home = {python_home}\n"
        "include-system-site-packages = false\n"
        f"version = {target.python_full_version}\n"
        f"executable = {python_home}/python{target.python_minor}\n",
        encoding="utf-8",
    )


def assemble_python_env(
    wheels: Sequence[WheelInput],
    output: str | os.PathLike[str],
    *,
    target: Target = DEBIAN_BOOKWORM_ARM64,
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
        total = sum(w.path.stat().st_size for w in ordered)
        sizes = {w.filename: w.path.stat().st_size for w in ordered}
        # Larger wheels first so the pool's last task is small.
        schedule = sorted(ordered, key=lambda w: -sizes[w.filename])
        if workers > 1 and len(ordered) > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [
                    pool.submit(install_wheel, str(w.path), w.filename, str(stages[w.filename]), prefix, target, tuple(waivers))
                    for w in schedule
                ]
                for future in futures:
                    finished = future.result()
                    done += sizes[finished]
                    if progress:
                        progress(done, total, finished)
        else:
            for wheel in schedule:
                install_wheel(str(wheel.path), wheel.filename, str(stages[wheel.filename]), prefix, target, tuple(waivers))
                done += sizes[wheel.filename]
                if progress:
                    progress(done, total, wheel.filename)
        rules = {rule.path: rule for rule in collisions}
        seen: dict[str, set[str]] = {}
        for wheel in ordered:
            files = _merge(stages[wheel.filename], root, wheel.filename, manifest, rules, seen)
            manifest.distributions.append(
                {"name": canonicalize_name(wheel.name), "version": wheel.version, "wheel": wheel.filename, "files": files}
            )
        shutil.rmtree(staging)
        for rule in collisions:
            if seen.get(rule.path, set()) != set(rule.wheels):
                raise CheckFailed(
                    f"collision rule for {rule.path} names {', '.join(rule.wheels)}, but "
                    f"{', '.join(sorted(seen.get(rule.path, ()))) or 'none of them'} wrote it; "
                    "a rule must match the locked wheels exactly (remove or update it)",
                    check_id="path-conflict",
                )
            manifest.collisions.append({"path": rule.path, "keep": rule.keep, "drop": list(rule.drop), "reason": rule.reason})
        installed = {w.filename for w in ordered}
        manifest.waived = [
            {"wheel": w.wheel, "path": w.path, "actual_sha256": w.actual_sha256, "reason": w.reason}
            for w in waivers
            if w.wheel in installed
        ]
        _venv_skeleton(root, prefix, target, python_home)
        manifest.elf_files = check_machine(root, target.platform)
    return manifest
