"""Validated records read from TOML and JSON: one error type that names the field path, the
value checks every reader uses (strings, hex digests, sizes, URLs, names), and the bounded
TOML read. Profiles, locks and the launch files are all read through these."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any, ClassVar, Protocol, TypeVar

from .digest import DIGEST_PATTERN, SHA256_HEX_PATTERN
from .documents import parse_limit_error, read_regular_file
from .errors import InputError
from .urls import redacted, url_problem

RecordT = TypeVar("RecordT")


class FieldOrderedRecord(Protocol):
    """A dataclass whose canonical key order is ``FIELD_ORDER`` (``keys_in_field_order``
    sets it; the class declares it, as a ClassVar, for the type checker)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    FIELD_ORDER: ClassVar[tuple[str, ...]]


FieldOrderedT = TypeVar("FieldOrderedT", bound=FieldOrderedRecord)

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_INPUT_NAME = re.compile(r"^[a-z0-9][a-z0-9._+:-]{0,199}$")
_FILENAME = re.compile(r"^[^/\x00]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")
# OCI distribution-spec repository name without tag or digest: host[:port] then /path components
OCI_REPOSITORY_PATTERN = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")


class InvalidField(InputError):
    """A record's field failed validation; ``field_path`` is relative to the record.

    Parsers catch it and re-raise with the file name and the record's place in the file;
    code that builds records directly sees ``<field path>: <problem>``.
    """

    def __init__(self, field_path: str, problem: str) -> None:
        super().__init__(f"{field_path}: {problem}")
        self.field_path = field_path
        self.problem = problem


def describe(value: object) -> str:
    """How a bad value is shown in a message: strings quoted (JSON escapes), others typed."""
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        shown = json.dumps(value, ensure_ascii=False)
        return shown if len(shown) <= 90 else shown[:80] + '…"'
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def require_str(
    path: str, value: object, *, allow_empty: bool = False, free_text: bool = False
) -> str:
    """A string; identifiers refuse control characters, ``free_text`` (notes for people,
    which may span lines) takes any character."""
    if not isinstance(value, str):
        raise InvalidField(path, f"expected a string, got {describe(value)}")
    if not allow_empty and not value:
        raise InvalidField(path, "expected a non-empty string")
    if not free_text and _CONTROL.search(value):
        raise InvalidField(path, f"control characters are not allowed, got {describe(value)}")
    return value


def require_match(path: str, value: object, pattern: re.Pattern[str], expected: str) -> str:
    text = require_str(path, value, allow_empty=True)
    if not pattern.fullmatch(text):
        raise InvalidField(path, f"expected {expected}, got {describe(text)}")
    return text


def require_sha256_hex(path: str, value: object) -> str:
    return require_match(path, value, SHA256_HEX_PATTERN, "64 lowercase hex digits")


def require_sha1_hex(path: str, value: object) -> str:
    return require_match(path, value, _HEX40, "40 lowercase hex digits")


def require_oci_digest(path: str, value: object) -> str:
    return require_match(path, value, DIGEST_PATTERN, '"sha256:" and 64 lowercase hex digits')


def require_platform(path: str, value: object) -> str:
    return require_match(path, value, _PLATFORM, 'an OCI platform like "linux/arm64"')


def require_deb_package(path: str, value: object) -> str:
    return require_match(path, value, _DEB_PACKAGE, "a Debian package name")


def require_sri_sha256(path: str, value: object) -> str:
    """An SRI hash ``sha256-<base64 of 32 bytes>``, in its one canonical spelling."""
    text = require_str(path, value, allow_empty=True)
    expected = 'an SRI hash "sha256-" + 44 base64 characters (32 bytes)'
    algorithm, sep, encoded = text.partition("-")
    if sep != "-" or algorithm != "sha256":
        raise InvalidField(path, f"expected {expected}, got {describe(text)}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidField(path, f"expected {expected}, got {describe(text)}") from None
    if len(raw) != 32 or base64.b64encode(raw).decode("ascii") != encoded:
        raise InvalidField(path, f"expected {expected}, got {describe(text)}")
    return text


def require_size(path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(path, f"expected a non-negative integer, got {describe(value)}")
    if value < 0:
        raise InvalidField(path, f"expected a non-negative integer, got {describe(value)}")
    return value


def _require_url(path: str, value: object, schemes: tuple[str, ...], what: str) -> str:
    text = require_str(path, value, allow_empty=True)
    problem = url_problem(text, schemes)
    if problem:
        raise InvalidField(path, f"expected {what}, got {describe(redacted(text))}: {problem}")
    return text


def require_url(path: str, value: object) -> str:
    """A file's download URL: https:// or file:///absolute."""
    return _require_url(path, value, ("https", "file"), "an https:// or file:/// URL")


def require_git_url(path: str, value: object) -> str:
    """git's own transports, spelled as URLs (no scp-like "host:path", no "ext::" or other
    remote helpers); plain http:// and git:// are accepted because the commit and tree ids,
    not the transport, bind what is fetched."""
    return _require_url(
        path, value, ("https", "http", "git", "ssh", "file"),
        "a git URL https://, http://, git://, ssh://host/path or file:///absolute",
    )


def require_archive_url(path: str, value: object) -> str:
    """A forge archive of a commit (a .tar.gz over https, http or file): bound, like the
    git URLs, by the tree id of what it holds, not by its transport."""
    return _require_url(
        path, value, ("https", "http", "file"), "an https://, http:// or file:/// URL of a .tar.gz archive"
    )


def require_str_tuple(
    path: str, value: object, item_check: Callable[[str, object], str], *, non_empty: bool
) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise InvalidField(path, f"expected an array of strings, got {describe(value)}")
    if non_empty and not value:
        raise InvalidField(path, "expected at least one element")
    checked = tuple(item_check(f"{path}[{index}]", item) for index, item in enumerate(value))
    seen: set[str] = set()
    for index, item in enumerate(checked):
        if item in seen:
            raise InvalidField(f"{path}[{index}]", f"duplicate element {describe(item)}")
        seen.add(item)
    return checked


def require_input_name(path: str, value: object) -> str:
    return require_match(
        path, value, _INPUT_NAME, "a lowercase name of [a-z0-9._+:-], starting with [a-z0-9]"
    )


def require_filename(path: str, value: object) -> str:
    text = require_match(path, value, _FILENAME, "a file name without '/'")
    if text in (".", ".."):
        raise InvalidField(path, f"expected a file name, got {describe(text)}")
    return text


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """tomllib with errors that name the file (and line/column for syntax errors)."""
    return parse_toml_text(read_regular_file(path, "a TOML file"), os.fspath(path))


def parse_toml_text(raw: bytes | str, shown: str) -> dict[str, Any]:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{shown}: not UTF-8 text (byte offset {exc.start})") from None
    else:
        text = raw
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib says "(at line L, column C)", or "(at end of document)" for a truncated
        # file: give the end's line and column too, so every syntax error has a place
        message = str(exc)
        if message.endswith("(at end of document)"):
            line = text.count("\n") + 1
            column = len(text) - (text.rfind("\n") + 1) + 1
            message = message.removesuffix("(at end of document)") + (
                f"(at line {line}, column {column}: end of document)"
            )
        raise InputError(f"{shown}: invalid TOML: {message}") from None
    except (RecursionError, ValueError) as exc:  # Python's limits, not TOML's syntax
        raise parse_limit_error(exc, text, shown) from None


def check_keys(
    table: Mapping[str, Any],
    where: str,
    required: Iterable[str],
    optional: Iterable[str] = (),
) -> None:
    """Refuse unknown keys and report the first missing required key, each by its path."""
    required = tuple(required)
    known = set(required) | set(optional)
    for key in table:
        if key not in known:
            raise InvalidField(
                join_path(where, key), f"unknown key (expected one of: {', '.join(sorted(known))})"
            )
    for key in required:
        if key not in table:
            raise InvalidField(join_path(where, key), "missing required key")


def require_table(path: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidField(path, f"expected a table, got {describe(value)}")
    return value


def join_path(where: str, key: str) -> str:
    """``where.key``; a key that is not bare TOML is shown quoted (JSON escapes)."""
    shown_key = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)
    return f"{where}.{shown_key}" if where else shown_key


def prefixed(where: str, error: InvalidField) -> InvalidField:
    return InvalidField(f"{where}.{error.field_path}" if where else error.field_path, error.problem)


def freeze_field(record: object, name: str, value: object) -> None:
    """Set a field of a frozen record in its ``__post_init__`` (the validated, normalized
    value replaces the given one)."""
    object.__setattr__(record, name, value)


def keys_in_field_order(*leading: str) -> Callable[[type[FieldOrderedT]], type[FieldOrderedT]]:
    """Class decorator for a record whose canonical key order is its declared field order,
    after ``leading`` keys that are no fields (a lock input's ``kind``): the order is then
    written once, by the field declarations, and cannot drift from them."""

    def decorate(record_type: type[FieldOrderedT]) -> type[FieldOrderedT]:
        record_type.FIELD_ORDER = *leading, *(spec.name for spec in fields(record_type))
        return record_type

    return decorate


def record_from_table(record_type: type[Any], table: object, where: str) -> Any:
    """A record (a dataclass whose ``FIELD_ORDER`` lists its keys) from a TOML table: unknown
    keys refused, the first missing required key named, arrays made tuples; a field the record
    refuses is re-raised with ``where`` in front of its path."""
    table = require_table(where, table)
    field_names = {spec.name for spec in fields(record_type)}
    optional = {
        spec.name for spec in fields(record_type)
        if spec.default is not MISSING or spec.default_factory is not MISSING
    }
    order: tuple[str, ...] = record_type.FIELD_ORDER
    check_keys(table, where, [key for key in order if key not in optional], [key for key in order if key in optional])
    arguments = {  # a key of FIELD_ORDER that is no field (a lock input's "kind") is the type's own
        key: (tuple(value) if isinstance(value, list) else value)
        for key, value in table.items() if key in field_names
    }
    try:
        return record_type(**arguments)
    except InvalidField as error:
        raise prefixed(where, error) from None


def record_to_dict(record: Any) -> dict[str, Any]:
    """A record as plain data in its canonical key order (``FIELD_ORDER``), nested records
    too, tuples as lists; keys valued None are left out, and those of ``OMIT_EMPTY`` when
    empty."""
    omit_empty = getattr(record, "OMIT_EMPTY", ())
    document: dict[str, Any] = {}
    for key in record.FIELD_ORDER:
        value = getattr(record, key)
        if value is None or (key in omit_empty and not value):
            continue
        if isinstance(value, tuple):
            value = [_plain(item) for item in value]
        elif isinstance(value, Mapping):
            value = {name: _plain(item) for name, item in value.items()}
        document[key] = _plain(value)
    return document


def field_record(record: Any, names: Sequence[str] | None = None) -> dict[str, Any]:
    """A dataclass's fields as the JSON record its ``as_record`` gives: ``names`` (default:
    every field, as declared) keyed by their own names in that order, tuples as lists. Unlike
    ``record_to_dict`` (the validated TOML records) no key is left out, so each name is written
    once, by the field declaration, and the record cannot drift from it."""
    chosen = names if names is not None else [spec.name for spec in fields(record)]
    return {name: _listed(getattr(record, name)) for name in chosen}


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _plain(value: Any) -> Any:
    if hasattr(value, "FIELD_ORDER"):
        return record_to_dict(value)
    if isinstance(value, Mapping):  # a table of tables (read-only mappings within)
        return {name: _plain(item) for name, item in value.items()}
    return value


def freeze_str_tuple(
    record: object, name: str, item_check: Callable[[str, object], str], *, non_empty: bool
) -> tuple[str, ...]:
    """In a frozen record's ``__post_init__``: its string-array field ``name`` checked item by
    item (no duplicates) and stored as a tuple, which is also returned."""
    checked = require_str_tuple(name, getattr(record, name), item_check, non_empty=non_empty)
    freeze_field(record, name, checked)
    return checked


def record_from(build: Callable[[Mapping[str, Any]], RecordT], document: Mapping[str, Any], shown: str) -> RecordT:
    """``build(document)``; a field it refuses becomes one ``InputError`` naming the file
    (``shown``) and the field's place in it."""
    try:
        return build(document)
    except InvalidField as error:
        raise InputError(f"{shown}: {error.field_path}: {error.problem}") from None
