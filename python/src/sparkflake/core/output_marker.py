"""The marker of an output directory sparkflake wrote (``OUTPUT_MARKER``): every path written
there, each file with its size and modification time, and the decisions read from it:
whether a directory may be replaced by the next output (``check_replaceable_output``) and
whether a file sparkflake writes into an output may replace what stands at its name
(``check_written_entry``). Writing the marker is ``core.atomic_write``'s
(``atomic_directory``, ``record_written_entry``)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .canonical_json import readable_json_bytes
from .documents import file_kind, is_utf8_text, parse_json
from .errors import InputError

# An output directory sparkflake made carries this file: what it is and every path it
# wrote there (each file with its size and modification time). Only such a directory,
# holding nothing else and no file changed since, is replaced by the next output
# (``owned_output``); anything else at the path is refused unless forced.
OUTPUT_MARKER = ".sparkflake-output.json"
_OUTPUT_KIND = "sparkflake.output-directory"
_MARKER_LIMIT = 64 << 20  # a Python env's marker lists some 10^5 paths, ~100 bytes each
_REPLACE_HINT = "; choose another -o, move it away, or pass --force to replace it"


@dataclass(frozen=True)
class Marker:
    """An output directory's marker: its top-level ``entries`` and, for every path below
    it, what was written there (``written_state``); ``paths`` None: the marker of an
    earlier sparkflake, which recorded the top-level entries only."""

    entries: list[str]
    paths: dict[str, str] | None


def read_marker(directory: Path) -> Marker | None:
    """The marker of ``directory``, or None when it has no readable one."""
    try:
        fd = os.open(directory / OUTPUT_MARKER, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        raw = handle.read(_MARKER_LIMIT + 1)
    if len(raw) > _MARKER_LIMIT:
        return None
    try:  # parse_json: nesting too deep for the parser (RecursionError) is an InputError too
        record = parse_json(raw, str(directory / OUTPUT_MARKER))
    except InputError:
        return None
    if not isinstance(record, dict) or record.get("kind") != _OUTPUT_KIND:
        return None
    entries, paths = record.get("entries"), record.get("paths")
    if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
        return None
    if paths is not None and not (isinstance(paths, dict) and all(isinstance(state, str) for state in paths.values())):
        return None
    # a "\ud800" escape decodes to a lone surrogate, which no file name sparkflake wrote
    # holds and marker_bytes cannot encode: such a marker is not ours, found before any work
    # rather than when the marker is rewritten after it (an export's archive already written)
    if not all(map(is_utf8_text, entries)) or (paths is not None and not all(map(is_utf8_text, (*paths, *paths.values())))):
        return None
    return Marker(entries, paths)


def marker_bytes(entries: list[str], paths: dict[str, str] | None) -> bytes:
    """The marker of an output holding ``entries`` at its top and ``paths`` below it (None:
    the names alone, as an earlier sparkflake's marker keeps them)."""
    record: dict[str, object] = {"kind": _OUTPUT_KIND, "entries": sorted(entries)}
    if paths is not None:
        record["paths"] = paths
    return readable_json_bytes(record)


def written_state(path: Path, status: os.stat_result) -> str:
    """What a marker records of the entry at ``path``: a file's size and modification time
    (no hash, so that checking an output before replacing it is one walk of its
    directories), a symlink's target, a directory, or the kind of anything else."""
    mode = status.st_mode
    if stat.S_ISREG(mode):
        return f"file {status.st_size} {status.st_mtime_ns}"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return f"symlink {os.readlink(path)}"
    return file_kind(mode)


def _entries_below(directory: Path, relative: str) -> list[tuple[str, Path, os.stat_result]]:
    """The entries of ``directory`` as (path relative to the output, path, lstat), sorted."""
    with os.scandir(directory) as scan:
        found = [(f"{relative}{entry.name}", Path(entry.path), entry.stat(follow_symlinks=False)) for entry in scan]
    return sorted(found, key=lambda item: item[0])


def output_paths(directory: Path) -> dict[str, str]:
    """Every path below ``directory`` but its marker, with what is there (``written_state``)."""
    paths: dict[str, str] = {}
    pending = [(directory, "")]
    while pending:
        below, relative = pending.pop()
        for name, path, status in _entries_below(below, relative):
            if name != OUTPUT_MARKER:
                paths[name] = written_state(path, status)
                if stat.S_ISDIR(status.st_mode):
                    pending.append((path, f"{name}/"))
    return paths


def _unwritten_paths(directory: Path, written: dict[str, str], limit: int = 5) -> tuple[list[str], list[str]]:
    """The first ``limit`` paths below ``directory``, in walk order, that its marker does
    not list (a directory not listed is named, not entered), and the first ``limit`` it
    lists that changed since (another size, modification time, kind or link target)."""
    foreign: list[str] = []
    changed: list[str] = []

    def entries_of(below: Path, relative: str) -> Iterator[tuple[str, Path, os.stat_result]]:
        try:
            return iter(_entries_below(below, relative))
        except OSError as exc:
            raise InputError(f"{below}: cannot read it: {exc.strerror or exc}{_REPLACE_HINT}") from None

    # an explicit stack of the directories being listed, not recursion: a marker may list a
    # chain of directories deeper than Python's recursion limit. A directory is entered
    # where it is met, so the walk order (and which paths are named) is a recursive walk's.
    pending = [entries_of(directory, "")]
    while pending and len(foreign) < limit:
        for name, path, status in pending[-1]:
            if name == OUTPUT_MARKER:
                continue
            recorded = written.get(name)
            if recorded is None:
                foreign.append(name)
                if len(foreign) >= limit:
                    break
            elif recorded != written_state(path, status):
                changed.append(name)
            elif stat.S_ISDIR(status.st_mode):
                pending.append(entries_of(path, f"{name}/"))
                break
        else:
            pending.pop()
    return foreign, changed[:limit]


# What an earlier sparkflake wrote below its outputs' top level: an OCI layout (``oci/`` of a
# build or image build) and nothing else, each of whose paths has one of these shapes.
_LAYOUT_FILE = re.compile(r"[^/]+/(oci-layout|index\.json|blobs/sha256/[0-9a-f]{64}|blobs/sha512/[0-9a-f]{128})")
_LAYOUT_DIRECTORY = re.compile(r"[^/]+/(blobs|blobs/sha256|blobs/sha512)")


def _outside_an_earlier_output(directory: Path, entries: list[str], limit: int = 5) -> list[str]:
    """The first ``limit`` paths of an output whose marker an earlier sparkflake wrote (the
    top-level entries alone) that it cannot have written: a top-level name it does not list,
    or below a listed directory anything but a path of an OCI layout."""
    foreign: list[str] = []
    pending = [(directory, "")]
    while pending and len(foreign) < limit:
        below, relative = pending.pop()
        for name, path, status in _entries_below(below, relative):
            kind = status.st_mode
            top = "/" not in name
            if name == OUTPUT_MARKER:
                continue
            if top and name in entries and (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
                if stat.S_ISDIR(kind):
                    pending.append((path, f"{name}/"))
            elif not top and stat.S_ISREG(kind) and _LAYOUT_FILE.fullmatch(name):
                continue
            elif not top and stat.S_ISDIR(kind) and _LAYOUT_DIRECTORY.fullmatch(name):
                pending.append((path, f"{name}/"))
            else:
                foreign.append(name)
    return foreign[:limit]


def check_replaceable_output(target: Path, *, force: bool = False) -> None:
    """Refuse (InputError) to replace ``target`` unless it is absent, an empty directory,
    or an output directory sparkflake wrote (its marker) holding nothing it did not
    write, at any depth, and no file changed since it was written; ``force`` replaces
    whatever is there."""
    if force or not os.path.lexists(target):
        return
    # another build into the same path may swap its new tree in while this one reads the
    # marker of one tree and walks the other (their blobs the same names, other files): a
    # refusal is given only when the directory was the same one throughout
    while True:
        before = _identity(target)
        try:
            _check_replaceable_once(target)
            return
        except InputError:
            if _identity(target) == before:
                raise


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def _check_replaceable_once(target: Path) -> None:
    if not os.path.lexists(target):
        return
    hint = _REPLACE_HINT
    if target.is_symlink() or not target.is_dir():
        raise InputError(f"{target}: exists and is not a directory sparkflake wrote (it is {_kind_of(target)}){hint}")
    present = sorted(os.listdir(target))
    if not present:
        return
    marker = read_marker(target)
    if marker is None:
        shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
        raise InputError(f"{target}: a directory sparkflake did not write (no {OUTPUT_MARKER}; holds {shown}){hint}")
    changed: list[str] = []  # an earlier marker records no sizes: edits to what it wrote cannot be seen
    if marker.paths is None:
        foreign = _outside_an_earlier_output(target, marker.entries)
    else:
        foreign, changed = _unwritten_paths(target, marker.paths)
    if foreign:
        shown = ", ".join(foreign) + (", ..." if len(foreign) >= 5 else "")
        raise InputError(f"{target}: holds entries sparkflake did not write ({shown}); they would be lost{hint}")
    if changed:
        shown = ", ".join(changed) + (", ..." if len(changed) >= 5 else "")
        raise InputError(f"{target}: holds files changed since sparkflake wrote them ({shown}: another size, "
                         f"modification time or kind); the changes would be lost{hint}")


def _kind_of(path: Path) -> str:
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a regular file" if stat.S_ISREG(mode) else "not a directory"


def check_entry_if_output(directory: Path, name: str, instead: str) -> None:
    """``check_written_entry`` when ``directory`` is an output sparkflake wrote (it has a
    marker); a file anywhere else was named by the operator, to be written."""
    if read_marker(directory) is not None:
        check_written_entry(directory, name, instead)


def check_written_entry(directory: Path, name: str, instead: str) -> None:
    """Refuse (InputError) to write a file ``name`` into output ``directory`` over what is
    there unless that is the regular file sparkflake wrote (its marker lists it, unchanged
    since). A symlink there is refused, never written through. ``instead`` says how to
    proceed ("name another file with -o")."""
    path = directory / name
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(status.st_mode):
        kind = "a symlink" if stat.S_ISLNK(status.st_mode) else file_kind(status.st_mode)
        raise InputError(f"{path}: is {kind}, not a file sparkflake wrote; it is not written over or through "
                         f"(move it away, or {instead})")
    marker = read_marker(directory)
    if marker is None or (name not in marker.entries if marker.paths is None else name not in marker.paths):
        raise InputError(f"{path}: exists and sparkflake did not write it (no entry in {directory / OUTPUT_MARKER}); "
                         f"it would be lost (move it away, or {instead})")
    if marker.paths is not None and marker.paths[name] != written_state(path, status):
        raise InputError(f"{path}: changed since sparkflake wrote it (another size or modification time); "
                         f"the changes would be lost (move it away, or {instead})")
