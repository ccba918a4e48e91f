"""Checkpoint pins: the sizes and sha256 of a checkpoint's identity-bearing files, recorded
at one site by ``sparkflake checkpoint pin`` and checked by every launch that names them.

The profile says *which* files identify a checkpoint (``[checkpoints.ROLE] pin``: names, or
patterns of top-level names such as ``*.safetensors``); the site's pins file says what
they held when the operator pinned them. So the committed profile stays the same for
every site, and a rank refuses a checkpoint whose files changed since they were pinned.

A pins file (JSON, written atomically, one per service)::

    {"schema": "sparkflake.checkpoint-pins/v1", "profile": "glm53-dflash7",
     "checkpoints": {"target": {"pinned_from": "/srv/models/…",
                                "files": [{"path": "config.json", "sha256": "…", "size": 1234}]},
                     "draft": {…}}}
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..core.atomic_write import regular_output, write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.digest import file_digest
from ..core.directory_lock import updating_file
from ..core.documents import file_kind, objects_of_array, parse_json_object, read_regular_file
from ..core.errors import InputError
from ..core.file_hashes import stat_identity
from ..profile.model import CheckpointFile

PINS_SCHEMA = "sparkflake.checkpoint-pins/v1"
ROLES = ("target", "draft")
MAX_PINS_FILE_BYTES = 1 << 20
_GLOB_CHARACTERS = frozenset("*?[")

# (bytes hashed so far, bytes of this file, the file's path relative to the checkpoint)
FileProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class PinnedCheckpoint:
    pinned_from: str  # the directory it was pinned from (for the operator; not compared)
    files: tuple[CheckpointFile, ...]


@dataclass(frozen=True)
class CheckpointPins:
    profile: str
    checkpoints: Mapping[str, PinnedCheckpoint] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoints", MappingProxyType(dict(self.checkpoints)))

    def with_role(self, role: str, pinned: PinnedCheckpoint) -> CheckpointPins:
        return CheckpointPins(self.profile, {**self.checkpoints, role: pinned})

    def as_record(self) -> dict[str, Any]:
        return {
            "schema": PINS_SCHEMA,
            "profile": self.profile,
            "checkpoints": {
                role: {
                    "pinned_from": pinned.pinned_from,
                    "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in pinned.files],
                }
                for role, pinned in sorted(self.checkpoints.items())
            },
        }


def is_pattern(entry: str) -> bool:
    return any(char in _GLOB_CHARACTERS for char in entry)


def select_files(directory: str, patterns: Sequence[str], where: str) -> list[str]:
    """The checkpoint's files the profile's ``pin`` list names, sorted, relative to
    ``directory``. Every name must exist and every pattern must match at least one
    top-level entry; ``where`` names the list in errors (``checkpoints.target.pin``)."""
    if not patterns:
        raise InputError(f"{where}: the profile names no identity-bearing files to pin")
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.lexists(directory) else "is not a directory"
        raise InputError(f"{directory}: {what}; expected a checkpoint directory")
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise InputError(f"{directory}: cannot list: {exc.strerror}") from None
    chosen: set[str] = set()
    missing = []
    for pattern in patterns:
        if is_pattern(pattern):
            matched = fnmatch.filter(names, pattern)
            if not matched:
                missing.append(f"file matching {pattern}")
            chosen.update(matched)
        elif os.path.lexists(os.path.join(directory, pattern)):
            chosen.add(pattern)
        else:
            missing.append(pattern)
    if missing:
        raise InputError(
            f"{directory}: the checkpoint has no {', '.join(missing)} (named by the profile's {where})"
        )
    return sorted(chosen)


# Linux's own bound on symlinks followed while resolving one path (MAXSYMLINKS, ELOOP)
_MAX_SYMLINKS = 40


def resolve_in_checkpoint(directory: str, relative: str) -> str:
    """The path ``relative`` names inside the checkpoint ``directory``, its symlinks followed
    as the container follows them: only ``directory`` is mounted, at another path, so a
    symlink to an absolute path, or one whose target climbs out of the directory, leads
    elsewhere there (or nowhere) than on the host; both are refused by name (InputError),
    and the bytes pinned and verified are the bytes vLLM loads. A component that does not
    exist ends the walk (the caller's stat says what is missing)."""
    root = os.path.realpath(directory)
    pending = [part for part in relative.split("/") if part not in ("", ".")]
    inside: list[str] = []
    followed = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            if not inside:
                raise InputError(f"{relative}: leads out of the checkpoint directory {directory}; "
                                 "the container mounts only the directory")
            inside.pop()
            continue
        candidate = os.path.join(root, *inside, name)
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:
            return os.path.join(root, *inside, name, *pending)
        if not is_link:
            inside.append(name)
            continue
        followed += 1
        link = os.path.join(*inside, name)
        target = os.readlink(candidate)
        if followed > _MAX_SYMLINKS:
            raise InputError(f"{relative}: more than {_MAX_SYMLINKS} symlinks followed (a loop at {link}?)")
        if os.path.isabs(target):
            raise InputError(
                f"{relative}: {link} is a symlink to the absolute path {target}; the container mounts only "
                f"{directory}, where that path is not this file: pin a file inside the directory"
            )
        pending = [part for part in target.split("/") if part not in ("", ".")] + pending
        if _climbs_out(inside, pending):
            raise InputError(
                f"{relative}: {link} is a symlink to {target}, outside the checkpoint directory {directory}; "
                "the container mounts only the directory"
            )
    return os.path.join(root, *inside)


def _climbs_out(inside: list[str], pending: list[str]) -> bool:
    """Whether the leading ``..`` steps of ``pending`` climb above the directory."""
    depth = len(inside)
    for part in pending:
        if part != "..":
            return False
        depth -= 1
        if depth < 0:
            return True
    return False


def hash_pinned_file(directory: str, relative: str, progress: FileProgress | None = None) -> CheckpointFile:
    """Size and sha256 of one regular file, streamed once; a symlink is followed only
    inside the checkpoint directory (``resolve_in_checkpoint``).

    The file is stat'ed before and after it is read: a file that changed meanwhile, or
    whose byte count differs from its size, is refused (its pin would record neither
    version). FIFOs, devices and sockets are refused before they are read.
    """
    try:
        path = resolve_in_checkpoint(directory, relative)
    except InputError as exc:
        raise InputError(f"{directory}: {exc.message}") from None
    try:
        before = os.stat(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(before.st_mode):
        kind = "a directory" if stat.S_ISDIR(before.st_mode) else file_kind(before.st_mode)
        raise InputError(f"{path}: is {kind}; a pinned checkpoint file must be a regular file")
    report = (lambda done: progress(done, before.st_size, relative)) if progress else None
    digest = file_digest(path, "sha256", progress=report)
    try:
        after = os.stat(path)
    except OSError as exc:
        raise InputError(f"{path}: vanished while it was hashed ({exc.strerror}); nothing recorded") from None
    if stat_identity(after) != stat_identity(before) or digest.size != before.st_size:
        raise InputError(f"{path}: changed while it was hashed; nothing recorded, pin again when it is settled")
    return CheckpointFile(relative, digest.file_hash.base16, digest.size)


def pin_checkpoint(
    directory: str, patterns: Sequence[str], where: str, progress: FileProgress | None = None
) -> PinnedCheckpoint:
    """Every identity-bearing file of the checkpoint at ``directory``, hashed."""
    files = tuple(hash_pinned_file(directory, name, progress) for name in select_files(directory, patterns, where))
    return PinnedCheckpoint(os.path.abspath(directory), files)


def read_pins(path: str | os.PathLike[str]) -> CheckpointPins:
    """A pins file, read with a size bound (regular files only) and checked field by field."""
    shown = os.fspath(path)
    if not os.path.lexists(shown):
        raise InputError(
            f"{shown}: cannot read the checkpoint pins file: No such file or directory; write it with "
            f"`sparkflake checkpoint pin MODEL_DIR --role target -o {shown}` (and --role draft for the draft "
            "checkpoint), or copy the site's pins file there"
        )
    return parse_pins(read_regular_file(path, "the checkpoint pins file", MAX_PINS_FILE_BYTES), shown)


def pins_of_profile(path: str | os.PathLike[str], profile: str) -> CheckpointPins:
    """The pins file at ``path`` (empty when absent), refused when it pins another profile."""
    pins = read_pins(path) if os.path.lexists(path) else CheckpointPins(profile)
    if pins.profile != profile:
        raise InputError(f"{os.fspath(path)}: pins checkpoints for profile {pins.profile}, not {profile}; "
                         "use another -o FILE")
    return pins


def update_pins(path: str | os.PathLike[str], profile: str, role: str, pinned: PinnedCheckpoint) -> CheckpointPins:
    """Record ``pinned`` as ``role`` in the pins file at ``path`` (made if absent), read and
    written under its update lock: concurrent runs pinning into one file all stay."""
    target = regular_output(path)
    with updating_file(target):
        updated = pins_of_profile(target, profile).with_role(role, pinned)
        write_bytes_atomic(target, readable_json_bytes(updated.as_record()))
    return updated


def parse_pins(raw: bytes, shown: str) -> CheckpointPins:
    document = parse_json_object(raw, shown)
    _known_keys(document, {"schema", "profile", "checkpoints"}, shown, "$")
    if document.get("schema") != PINS_SCHEMA:
        raise InputError(f"{shown}: $.schema: expected {PINS_SCHEMA!r}, got {document.get('schema')!r}")
    profile = document.get("profile")
    if not isinstance(profile, str) or not profile:
        raise InputError(f"{shown}: $.profile: expected the profile name")
    checkpoints = document.get("checkpoints")
    if not isinstance(checkpoints, dict):
        raise InputError(f"{shown}: $.checkpoints: expected an object with target and/or draft")
    pinned: dict[str, PinnedCheckpoint] = {}
    for role, entry in checkpoints.items():
        place = f"$.checkpoints.{role}"
        if role not in ROLES:
            raise InputError(f"{shown}: {place}: unknown role (expected target or draft)")
        if not isinstance(entry, dict):
            raise InputError(f"{shown}: {place}: expected an object with pinned_from and files")
        _known_keys(entry, {"pinned_from", "files"}, shown, place)
        pinned_from = entry.get("pinned_from")
        if not isinstance(pinned_from, str):
            raise InputError(f"{shown}: {place}.pinned_from: expected a path")
        files = []
        for at, row in objects_of_array(entry.get("files"), shown, f"{place}.files", "an object with path, sha256, size"):
            _known_keys(row, {"path", "sha256", "size"}, shown, at)
            path, sha256, size = row.get("path"), row.get("sha256"), row.get("size")
            if not isinstance(path, str) or not isinstance(sha256, str):
                raise InputError(f"{shown}: {at}: path and sha256 must be strings")
            if isinstance(size, bool) or not isinstance(size, int):
                raise InputError(f"{shown}: {at}.size: expected an integer")
            try:
                files.append(CheckpointFile(path, sha256, size))
            except InputError as exc:
                raise InputError(f"{shown}: {at}: {exc.message}") from None
        if len({f.path for f in files}) != len(files):
            raise InputError(f"{shown}: {place}.files: a path is pinned twice")
        pinned[role] = PinnedCheckpoint(pinned_from, tuple(files))
    return CheckpointPins(profile, pinned)


def _known_keys(mapping: Mapping[str, Any], known: set[str], shown: str, place: str) -> None:
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise InputError(f"{shown}: {place}: unknown key {unknown[0]!r} (expected {', '.join(sorted(known))})")


def pinned_files(
    pins_path: str, pins: CheckpointPins, profile: str, role: str, declared: Sequence[CheckpointFile]
) -> tuple[CheckpointFile, ...]:
    """The files a launch checks for ``role``: the profile's own ``files`` and the pins.

    A pins file made for another profile is refused (its ``pin`` lists may differ); a
    path both bind must be bound to the same bytes.
    """
    if pins.profile != profile:
        raise InputError(
            f"{pins_path}: pins checkpoints for profile {pins.profile}, this launch is {profile}; "
            f"pin with --profile {profile}"
        )
    pinned = pins.checkpoints.get(role)
    if pinned is None:
        return tuple(declared)
    by_path = {entry.path: entry for entry in declared}
    for entry in pinned.files:
        known = by_path.get(entry.path)
        if known is not None and known != entry:
            raise InputError(
                f"{pins_path}: {role} {entry.path} is pinned as sha256 {entry.sha256} size {entry.size}, "
                f"the profile's checkpoints.{role}.files binds sha256 {known.sha256} size {known.size}"
            )
        by_path[entry.path] = entry
    return tuple(by_path[name] for name in sorted(by_path))
