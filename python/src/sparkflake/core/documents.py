"""Untrusted documents (specs, recipes, env files, image documents, expected-digest
files): read from regular files only, with a bound, and parsed without a traceback.

A path may be a symlink to ``/dev/zero`` or a FIFO: it is opened with ``O_NONBLOCK``
(so a FIFO without a writer does not hang the open) and refused after ``fstat`` unless it
is a regular file; at most ``limit`` bytes are read, so a file that grows while it is read
is refused too. Python's parsers raise ``RecursionError`` on deep nesting (json at about
1,000 levels, tomllib likewise) and ``ValueError`` on an integer of more than 4,300 digits
(the interpreter's int-str limit, CVE-2020-10735); both become ``InputError``s naming the
file and, for the integer, its line.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from typing import Any

from .errors import InputError, SparkflakeError

MAX_DOCUMENT_BYTES = 4 << 20  # an index, manifest, config, spec or recipe is far smaller

_KIND_OF_MODE = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def is_utf8_text(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: a JSON ``\\ud800`` escape parses into a lone
    surrogate, which no UTF-8 holds (writing it back raises UnicodeEncodeError)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def file_kind(mode: int) -> str:
    """What a file is, in words ("a FIFO", "a character device", ...)."""
    return next((name for test, name in _KIND_OF_MODE if test(mode)), "not a regular file")


def open_regular_file(path: str | os.PathLike[str], what: str) -> int:
    """An fd of the regular file at ``path`` (a symlink is followed), else InputError."""
    shown = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{shown}: cannot read {what}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{shown}: is {file_kind(mode)}, expected {what} (a regular file)")
    os.set_blocking(fd, True)
    return fd


def read_regular_file(path: str | os.PathLike[str], what: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them."""
    fd = open_regular_file(path, what)
    try:
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{os.fspath(path)}: cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(f"{os.fspath(path)}: {what} is larger than {limit} bytes")
    return raw


def parse_limit_error(exc: RecursionError | ValueError, text: str | bytes, shown: str) -> InputError:
    """The InputError for a document Python's parser refused on a limit, not its syntax."""
    if isinstance(exc, RecursionError):
        return InputError(f"{shown}: nested too deeply (more levels of arrays or tables than a parser may follow)")
    digits = sys.get_int_max_str_digits()
    # as bytes: a line holds the same newlines either way, and the pattern is ASCII
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    found = re.search(rb"[0-9_]{%d,}" % (digits + 1), data)
    if found is not None and "digits" in str(exc):
        line = data[: found.start()].count(b"\n") + 1
        return InputError(f"{shown}:{line}: an integer of more than {digits} digits (not a value any field takes)")
    return InputError(f"{shown}: not valid: {exc}")


class _NotStrictJson(ValueError):
    pass


class _ObjectWithDuplicate(dict[str, Any]):
    """An object that had ``duplicate`` twice; found afterwards to name its JSON path."""

    duplicate: str = ""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) == len(pairs):
        return document
    marked = _ObjectWithDuplicate(document)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.duplicate = key
            break
        seen.add(key)
    return marked


def _duplicate_path(node: Any, path: str) -> str | None:
    """The JSON path of the first key given twice under ``node`` (document order)."""
    if isinstance(node, _ObjectWithDuplicate):
        return f"{path}.{node.duplicate}"
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        found = _duplicate_path(child, f"{path}.{key}" if isinstance(node, dict) else f"{path}[{key}]")
        if found is not None:
            return found
    return None


def _no_constant(name: str) -> Any:
    raise _NotStrictJson(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def parse_json(raw: bytes | str, shown: str) -> Any:
    """``json.loads`` as strict as Go's encoding/json and RFC 8259 (what containers/image,
    containerd and the registries read these documents with), every refusal an InputError
    naming ``shown``: no byte-order mark (json.loads would skip one in bytes), no key twice
    in an object (one reader would take the first, another the last), no NaN/Infinity."""
    if raw[:3] == b"\xef\xbb\xbf" or raw[:1] == "\ufeff":
        raise InputError(f"{shown}: starts with a UTF-8 byte-order mark, which JSON does not allow (RFC 8259 §8.1)")
    duplicates: list[_ObjectWithDuplicate] = []

    def object_of(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        made = _object(pairs)
        if isinstance(made, _ObjectWithDuplicate):
            duplicates.append(made)
        return made

    try:
        document = json.loads(raw, object_pairs_hook=object_of, parse_constant=_no_constant)
    except _NotStrictJson as exc:
        raise InputError(f"{shown}: not valid JSON: {exc}") from None
    except RecursionError as exc:
        raise parse_limit_error(exc, raw, shown) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown}: not UTF-8 text (byte offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{shown}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:
        raise parse_limit_error(exc, raw, shown) from None
    if duplicates:
        try:
            duplicate = _duplicate_path(document, "$")
        except RecursionError:
            duplicate = f"$..{duplicates[0].duplicate}"
        raise InputError(f"{shown}: {duplicate}: the key is given twice in one object (JSON readers differ on "
                         "which one counts, so neither does)")
    return document


def parse_json_object(
    raw: bytes | str,
    shown: str,
    what: str = "a JSON object",
    *,
    refusal: type[SparkflakeError] = InputError,
    check_id: str | None = None,
) -> dict[str, Any]:
    """``parse_json`` of a document that must be an object. ``refusal`` is what a bad one
    is: ``InputError`` for a file we were given, ``CheckFailed`` (exit 1, ``check_id``) for a
    document a check fetched, such as a registry's manifest or a signature's payload."""
    try:
        document = parse_json(raw, shown)
    except InputError as error:
        if refusal is InputError and check_id is None:
            raise
        raise refusal(error.message, check_id=check_id) from None
    if not isinstance(document, dict):
        raise refusal(f"{shown}: expected {what}", check_id=check_id)
    return document


def objects_of_array(
    value: object, shown: str, place: str, what: str = "an object"
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The items of the array at ``place`` (a document path like ``$.measured``), each with
    its own path (``$.measured[2]``); anything but an array of objects is refused, naming
    the file, the path and ``what`` each item must be."""
    if not isinstance(value, list):
        raise InputError(f"{shown}: {place}: expected an array of objects")
    for index, item in enumerate(value):
        at = f"{place}[{index}]"
        if not isinstance(item, dict):
            raise InputError(f"{shown}: {at}: expected {what}")
        yield at, item


def read_json_file(path: str | os.PathLike[str], what: str, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    return parse_json(read_regular_file(path, what, limit), os.fspath(path))
