"""Anchored patch sets: unified diffs whose every file is bound by pre- and post-image
sha256.

A patch set is a directory with ``patches.toml`` and one unified diff per patch. Each
patch names the files it touches with the sha256 of the file before (``pre``) and after
(``post``) it; ``pre = ""`` means the file must not exist yet, ``post = ""`` that the patch
deletes it. Application is exact: every hunk must match at the line number it states
(no offset search, no fuzz), every pre-image must match before anything is written, every
post-image must match after. The whole set is applied in memory first, so a set either
applies completely or leaves the tree untouched. A file already at its post-image is
reported as "already applied", never patched twice.

Paths in ``patches.toml`` and in the diffs (after the ``a/``/``b/`` prefix) are relative
POSIX paths from the tree root, e.g. ``vllm/envs.py`` for the vLLM source.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..core.canonical_json import canonical_json_bytes
from ..core.digest import is_sha256_hex
from ..core.errors import CheckFailed, InputError

PATCH_SET_MANIFEST = "patches.toml"
PATCH_SET_FORMAT = 1
ABSENT = ""

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = b"\\ No newline at end of file"


@dataclass(frozen=True)
class FileAnchor:
    """One file a patch touches: its sha256 before and after (``""`` = absent)."""

    path: str
    pre_sha256: str
    post_sha256: str


@dataclass(frozen=True)
class HunkLine:
    kind: str  # " " context, "-" removed, "+" added
    text: bytes  # the line's bytes including its newline, if it has one


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[HunkLine, ...]
    diff_line: int  # 1-based line of the ``@@`` header in the diff file

    @property
    def old_lines(self) -> list[bytes]:
        return [line.text for line in self.lines if line.kind != "+"]

    @property
    def new_lines(self) -> list[bytes]:
        return [line.text for line in self.lines if line.kind != "-"]


@dataclass(frozen=True)
class FileDiff:
    old_path: str | None  # None for a created file (/dev/null)
    new_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]
    diff_line: int

    @property
    def path(self) -> str:
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None
        return path


@dataclass(frozen=True)
class Patch:
    name: str
    summary: str
    diff_file: str  # relative to the patch set directory
    diff_sha256: str
    anchors: tuple[FileAnchor, ...]
    file_diffs: tuple[FileDiff, ...]


@dataclass(frozen=True)
class PatchSet:
    directory: Path
    patches: tuple[Patch, ...]

    @property
    def patch_set_sha256(self) -> str:
        """sha256 of the canonical JSON of names, diff hashes and anchors: changes when
        any diff byte or any anchor changes."""
        return hashlib.sha256(canonical_json_bytes(self.identity())).hexdigest()

    def identity(self) -> dict[str, object]:
        return {
            "format": PATCH_SET_FORMAT,
            "patches": [
                {
                    "name": patch.name,
                    "diff": patch.diff_file,
                    "diff_sha256": patch.diff_sha256,
                    "files": [
                        {"path": a.path, "pre": a.pre_sha256, "post": a.post_sha256}
                        for a in patch.anchors
                    ],
                }
                for patch in self.patches
            ],
        }


@dataclass(frozen=True)
class PatchedFile:
    """The outcome for one path after the whole set: ``content is None`` = deleted."""

    path: str
    base_sha256: str  # "" when the file did not exist before the set
    target_sha256: str  # "" when the set deletes it
    content: bytes | None


def sha256_bytes(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


# --------------------------------------------------------------------------- parsing


def _relative_path(raw: str, where: str) -> str:
    path = PurePosixPath(raw)
    if not raw or path.is_absolute() or ".." in path.parts or raw != path.as_posix():
        raise InputError(f"{where}: expected a normalized relative POSIX path, got {raw!r}")
    return raw


def _diff_path(raw: bytes, prefix: bytes, where: str) -> str | None:
    token = raw.split(b"\t", 1)[0].rstrip(b"\r\n")
    if token == b"/dev/null":
        return None
    if not token.startswith(prefix):
        raise InputError(f"{where}: expected a path starting with {prefix.decode()!r} or /dev/null")
    try:
        text = token[len(prefix) :].decode()
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: path is not UTF-8") from exc
    return _relative_path(text, where)


def parse_unified_diff(diff: bytes, *, source: str = "<diff>") -> tuple[FileDiff, ...]:
    """Parse a git-style unified diff (``a/``/``b/`` prefixes) into exact hunks.

    Header lines other than ``---``/``+++``/``@@`` (``diff --git``, ``index``, prose) are
    ignored between file sections; inside a hunk the line counts of the header must be
    met exactly, so a truncated or padded hunk is refused.
    """
    lines = diff.splitlines(keepends=True)
    file_diffs: list[FileDiff] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith(b"--- "):
            if line.startswith(b"@@") or line.startswith(b"+++ "):
                raise InputError(f"{source}:{index + 1}: hunk or '+++' line without a '---' header")
            index += 1
            continue
        header_line = index + 1
        if index + 1 >= len(lines) or not lines[index + 1].startswith(b"+++ "):
            raise InputError(f"{source}:{header_line}: '---' line not followed by '+++'")
        old_path = _diff_path(line[4:], b"a/", f"{source}:{header_line}")
        new_path = _diff_path(lines[index + 1][4:], b"b/", f"{source}:{header_line + 1}")
        if old_path is None and new_path is None:
            raise InputError(f"{source}:{header_line}: both sides are /dev/null")
        if old_path is not None and new_path is not None and old_path != new_path:
            raise InputError(
                f"{source}:{header_line}: renames are not supported ({old_path} -> {new_path})"
            )
        index += 2
        hunks: list[Hunk] = []
        while index < len(lines) and lines[index].startswith(b"@@"):
            hunk, index = _parse_hunk(lines, index, source)
            hunks.append(hunk)
        if not hunks:
            raise InputError(f"{source}:{header_line}: file section without hunks")
        file_diffs.append(FileDiff(old_path, new_path, tuple(hunks), header_line))
    if not file_diffs:
        raise InputError(f"{source}: no file sections ('--- a/…' / '+++ b/…') found")
    seen: set[str] = set()
    for file_diff in file_diffs:
        if file_diff.path in seen:
            raise InputError(f"{source}:{file_diff.diff_line}: {file_diff.path} appears twice")
        seen.add(file_diff.path)
    return tuple(file_diffs)


def _parse_hunk(lines: list[bytes], index: int, source: str) -> tuple[Hunk, int]:
    header = lines[index]
    match = _HUNK_HEADER.match(header)
    if match is None:
        raise InputError(f"{source}:{index + 1}: malformed hunk header {header.strip()!r}")
    old_start = int(match.group(1))
    old_count = int(match.group(2)) if match.group(2) is not None else 1
    new_start = int(match.group(3))
    new_count = int(match.group(4)) if match.group(4) is not None else 1
    header_line = index + 1
    index += 1
    body: list[HunkLine] = []
    old_seen = new_seen = 0
    while index < len(lines) and (old_seen < old_count or new_seen < new_count):
        line = lines[index]
        kind = line[:1].decode("latin-1")
        if kind not in (" ", "-", "+"):
            if line.rstrip(b"\r\n") == b"":
                # Some editors strip the single space of an empty context line.
                kind, line = " ", b" " + line
            else:
                break
        if kind in (" ", "-"):
            old_seen += 1
        if kind in (" ", "+"):
            new_seen += 1
        body.append(HunkLine(kind, line[1:]))
        index += 1
        if index < len(lines) and lines[index].rstrip(b"\r\n") == _NO_NEWLINE:
            last = body[-1]
            body[-1] = HunkLine(last.kind, last.text.removesuffix(b"\n"))
            index += 1
    if old_seen != old_count or new_seen != new_count:
        raise InputError(
            f"{source}:{header_line}: hunk header says -{old_count} +{new_count} lines, "
            f"body has -{old_seen} +{new_seen}"
        )
    return Hunk(old_start, old_count, new_start, new_count, tuple(body), header_line), index


def load_patch_set(directory: str | os.PathLike[str]) -> PatchSet:
    """Read ``patches.toml`` and every diff it names; refuse anything inconsistent."""
    root = Path(directory)
    manifest_path = root / PATCH_SET_MANIFEST
    try:
        manifest = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{manifest_path}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{manifest_path}: not valid TOML: {exc}") from exc
    unknown = set(manifest) - {"format", "patches", "description"}
    if unknown:
        raise InputError(f"{manifest_path}: unknown keys {sorted(unknown)}")
    if manifest.get("format") != PATCH_SET_FORMAT:
        raise InputError(f"{manifest_path}: format: expected {PATCH_SET_FORMAT}, got {manifest.get('format')!r}")
    entries = manifest.get("patches", [])
    if not isinstance(entries, list):
        raise InputError(f"{manifest_path}: patches: expected an array of tables")
    patches: list[Patch] = []
    names: set[str] = set()
    for number, entry in enumerate(entries):
        where = f"{manifest_path}: patches[{number}]"
        patch = _load_patch(root, entry, where)
        if patch.name in names:
            raise InputError(f"{where}.name: duplicate patch name {patch.name!r}")
        names.add(patch.name)
        patches.append(patch)
    return PatchSet(root, tuple(patches))


def _load_patch(root: Path, entry: object, where: str) -> Patch:
    if not isinstance(entry, dict):
        raise InputError(f"{where}: expected a table")
    unknown = set(entry) - {"name", "summary", "diff", "files"}
    if unknown:
        raise InputError(f"{where}: unknown keys {sorted(unknown)}")
    name = entry.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise InputError(f"{where}.name: expected a name of letters, digits, '.', '_', '-'")
    summary = entry.get("summary", "")
    if not isinstance(summary, str):
        raise InputError(f"{where}.summary: expected a string")
    diff_file = entry.get("diff")
    if not isinstance(diff_file, str):
        raise InputError(f"{where}.diff: expected the diff's file name")
    diff_file = _relative_path(diff_file, f"{where}.diff")
    diff_path = root / diff_file
    try:
        diff_bytes = diff_path.read_bytes()
    except OSError as exc:
        raise InputError(f"{where}.diff: {diff_path}: cannot read: {exc.strerror}") from exc
    file_diffs = parse_unified_diff(diff_bytes, source=str(diff_path))
    raw_files = entry.get("files")
    if not isinstance(raw_files, list) or not raw_files:
        raise InputError(f"{where}.files: expected a non-empty array of {{path, pre, post}}")
    anchors: list[FileAnchor] = []
    for index, raw in enumerate(raw_files):
        anchor_where = f"{where}.files[{index}]"
        if not isinstance(raw, dict) or set(raw) != {"path", "pre", "post"}:
            raise InputError(f"{anchor_where}: expected exactly the keys path, pre, post")
        path = raw["path"]
        if not isinstance(path, str):
            raise InputError(f"{anchor_where}.path: expected a string")
        path = _relative_path(path, f"{anchor_where}.path")
        for key in ("pre", "post"):
            value = raw[key]
            if not isinstance(value, str) or (value != ABSENT and not is_sha256_hex(value)):
                raise InputError(
                    f"{anchor_where}.{key}: expected 64 lowercase hex digits or \"\" (absent), got {value!r}"
                )
        if raw["pre"] == ABSENT and raw["post"] == ABSENT:
            raise InputError(f"{anchor_where}: pre and post cannot both be absent")
        anchors.append(FileAnchor(path, raw["pre"], raw["post"]))
    anchored = [a.path for a in anchors]
    if len(set(anchored)) != len(anchored):
        raise InputError(f"{where}.files: a path is listed twice")
    diffed = {d.path: d for d in file_diffs}
    if set(anchored) != set(diffed):
        raise InputError(
            f"{where}: files {sorted(anchored)} differ from the files in {diff_file} {sorted(diffed)}"
        )
    for anchor in anchors:
        file_diff = diffed[anchor.path]
        if (anchor.pre_sha256 == ABSENT) != (file_diff.old_path is None):
            raise InputError(f"{where}: {anchor.path}: pre = \"\" must match a /dev/null old side in {diff_file}")
        if (anchor.post_sha256 == ABSENT) != (file_diff.new_path is None):
            raise InputError(f"{where}: {anchor.path}: post = \"\" must match a /dev/null new side in {diff_file}")
    ordered = tuple(diffed[a.path] for a in anchors)
    return Patch(name, summary, diff_file, sha256_bytes(diff_bytes), tuple(anchors), ordered)


# --------------------------------------------------------------------------- applying


def apply_hunks(original: bytes, file_diff: FileDiff, *, patch: Patch) -> bytes:
    """Apply one file's hunks exactly at their stated lines; refuse on any mismatch."""
    source_lines = original.splitlines(keepends=True)
    output: list[bytes] = []
    cursor = 0  # index into source_lines of the next line not yet copied
    offset = 0  # new_start - old_start drift produced by earlier hunks
    for number, hunk in enumerate(file_diff.hunks, start=1):
        where = f"patch {patch.name} ({patch.diff_file}:{hunk.diff_line}), {file_diff.path}, hunk {number}"
        start = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        if start < cursor:
            raise CheckFailed(f"{where}: hunks overlap or are out of order", check_id="patches.hunk")
        expected_new_start = (start + offset + 1) if hunk.new_count else (start + offset)
        if hunk.new_start != expected_new_start:
            raise CheckFailed(
                f"{where}: new-side start {hunk.new_start} inconsistent with earlier hunks "
                f"(expected {expected_new_start})",
                check_id="patches.hunk",
            )
        old = hunk.old_lines
        actual = source_lines[start : start + len(old)]
        if actual != old:
            mismatch = next(
                (i for i, (a, b) in enumerate(zip(actual, old, strict=False)) if a != b),
                min(len(actual), len(old)),
            )
            found = actual[mismatch] if mismatch < len(actual) else b"<end of file>"
            wanted = old[mismatch] if mismatch < len(old) else b"<end of hunk>"
            raise CheckFailed(
                f"{where}: does not apply at line {start + mismatch + 1}: expected "
                f"{_shown_line(wanted)}, found {_shown_line(found)} "
                "(exact application, no fuzz)",
                check_id="patches.hunk",
            )
        output.extend(source_lines[cursor:start])
        output.extend(hunk.new_lines)
        cursor = start + len(old)
        offset += hunk.new_count - hunk.old_count
    output.extend(source_lines[cursor:])
    return b"".join(output)


def _shown_line(line: bytes) -> str:
    return repr(line.rstrip(b"\r\n").decode("utf-8", "replace"))


def apply_patch_set(
    patch_set: PatchSet, read_file: Callable[[str], bytes | None]
) -> dict[str, PatchedFile]:
    """Apply every patch in order, in memory; return the final state of each touched path.

    ``read_file(path)`` returns the current bytes of a tree path or ``None`` if absent.
    Nothing is written here: the caller writes the result only after this returns, so a
    set that fails anywhere leaves the tree as it was.
    """
    current: dict[str, bytes | None] = {}
    base: dict[str, bytes | None] = {}

    def content_of(path: str) -> bytes | None:
        if path not in current:
            current[path] = read_file(path)
            base[path] = current[path]
        return current[path]

    for patch in patch_set.patches:
        # Every anchor is checked before any hunk of this patch runs.
        for anchor in patch.anchors:
            content = content_of(anchor.path)
            actual = ABSENT if content is None else sha256_bytes(content)
            if actual == anchor.pre_sha256:
                continue
            if actual == anchor.post_sha256 and actual != ABSENT:
                raise CheckFailed(
                    f"patch {patch.name}: {anchor.path} is already at its post-image "
                    f"sha256 {actual}: the patch was applied before (refusing to apply twice)",
                    check_id="patches.already-applied",
                )
            raise CheckFailed(
                f"patch {patch.name}: {anchor.path}: pre-image sha256 expected "
                f"{anchor.pre_sha256 or 'absent'}, found {actual or 'absent'}",
                check_id="patches.pre-image",
            )
        for file_diff, anchor in zip(patch.file_diffs, patch.anchors, strict=True):
            original = content_of(anchor.path)
            if file_diff.new_path is None:
                patched = apply_hunks(original or b"", file_diff, patch=patch)
                if patched:
                    raise CheckFailed(
                        f"patch {patch.name}: {anchor.path}: deletion hunk leaves {len(patched)} bytes",
                        check_id="patches.hunk",
                    )
                current[anchor.path] = None
            else:
                current[anchor.path] = apply_hunks(original or b"", file_diff, patch=patch)
            result = current[anchor.path]
            actual = ABSENT if result is None else sha256_bytes(result)
            if actual != anchor.post_sha256:
                raise CheckFailed(
                    f"patch {patch.name}: {anchor.path}: post-image sha256 expected "
                    f"{anchor.post_sha256 or 'absent'}, got {actual or 'absent'}",
                    check_id="patches.post-image",
                )
    outcome: dict[str, PatchedFile] = {}
    for path in sorted(current):
        before, after = base[path], current[path]
        if before == after:
            continue
        outcome[path] = PatchedFile(
            path=path,
            base_sha256=ABSENT if before is None else sha256_bytes(before),
            target_sha256=ABSENT if after is None else sha256_bytes(after),
            content=after,
        )
    return outcome


class FileReader:
    """Reads tree-relative paths from one or more directories, the first hit winning
    (an overlay tree over the installed package tree)."""

    def __init__(self, *roots: str | os.PathLike[str]) -> None:
        self.roots = [Path(root) for root in roots]

    def __call__(self, path: str) -> bytes | None:
        for root in self.roots:
            candidate = root / path
            if candidate.is_symlink():
                raise CheckFailed(f"{candidate}: patches do not apply to symlinks", check_id="patches.pre-image")
            if candidate.is_file():
                return candidate.read_bytes()
        return None


def expected_pre_images(patch_set: PatchSet) -> dict[str, str]:
    """The sha256 each path must have before the set runs (its first patch's pre-image)."""
    first: dict[str, str] = {}
    for patch in patch_set.patches:
        for anchor in patch.anchors:
            first.setdefault(anchor.path, anchor.pre_sha256)
    return first


def expected_post_images(patch_set: PatchSet) -> dict[str, str]:
    """The sha256 each path has after the set ran (its last patch's post-image)."""
    final: dict[str, str] = {}
    for patch in patch_set.patches:
        for anchor in patch.anchors:
            final[anchor.path] = anchor.post_sha256
    return final
