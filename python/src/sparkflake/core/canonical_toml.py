"""Canonical TOML writer for the subset sparkflake's files use.

Reading is ``tomllib``'s job; this module only writes. Canonical means: the same document
gives the same bytes on every machine and every run, and ``tomllib.loads(dumps(d)) == d``.
The rules, applied at every table level:

1. keys are written in the order the caller's dict has them (the models fix that order);
2. plain values (strings, integers, floats, booleans, arrays of those) come first, then
   sub-tables as ``[a.b]`` headers, then arrays of tables as ``[[a.b]]`` headers, each
   group in dict order (TOML needs sub-tables after a table's own keys);
3. a sub-table always gets its header, even when empty, so the output does not depend on
   what the table happens to contain;
4. strings are basic strings (double quotes): ``"`` and ``\\`` escaped, control characters
   as the short escapes ``\\b \\t \\n \\f \\r`` or ``\\u`` and four hex digits; every other character,
   non-ASCII included, is written as itself in UTF-8;
5. keys that are not bare (``A-Za-z0-9_-``) are quoted the same way;
6. an array is written on one line when that line fits in 100 columns, else one element
   per line, indented two spaces, with a trailing comma;
7. an empty array is ``[]`` (even when it would hold tables);
8. the file ends with exactly one newline, tables are separated by one blank line.

Floats are written with ``repr`` (shortest round-tripping form), ``inf``/``nan`` as TOML
spells them. Datetimes and inline tables are not part of the subset.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeGuard

MAX_INLINE_WIDTH = 100

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_SHORT_ESCAPES = {
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}


def quote_string(text: str) -> str:
    """A TOML basic string for ``text``; refuses lone surrogates (not encodable as UTF-8)."""
    pieces = ['"']
    for char in text:
        escaped = _SHORT_ESCAPES.get(char)
        if escaped is not None:
            pieces.append(escaped)
            continue
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            pieces.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"string holds a lone surrogate U+{code:04X}, not valid in TOML")
        else:
            pieces.append(char)
    pieces.append('"')
    return "".join(pieces)


def format_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, got {type(key).__name__}")
    return key if _BARE_KEY.fullmatch(key) else quote_string(key)


def format_scalar(value: object) -> str:
    """A scalar's TOML text; any other value is refused with its type (a caller may pass
    whatever a document holds)."""
    # bool before int: bool is a subclass of int in Python
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        # repr gives "1e+16" / "1.5": both valid TOML; "1e16" style needs no change
        return text
    if isinstance(value, str):
        return quote_string(value)
    raise TypeError(f"unsupported TOML value of type {type(value).__name__}")


def _is_table(value: object) -> TypeGuard[Mapping[str, object]]:
    return isinstance(value, Mapping)


def _is_table_array(value: object) -> TypeGuard[Sequence[Mapping[str, object]]]:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) > 0
        and all(isinstance(item, Mapping) for item in value)
    )


def _format_array(key_text: str, values: Sequence[object]) -> str:
    items = []
    for item in values:
        if isinstance(item, Mapping):
            raise TypeError("arrays mixing tables and values are not part of the subset")
        if isinstance(item, Sequence) and not isinstance(item, str):
            items.append(_inline_array(item))
        else:
            items.append(format_scalar(item))
    one_line = f"{key_text} = [{', '.join(items)}]"
    if not items or len(one_line) <= MAX_INLINE_WIDTH:
        return one_line
    body = "".join(f"  {item},\n" for item in items)
    return f"{key_text} = [\n{body}]"


def _inline_array(values: Sequence[object]) -> str:
    parts = []
    for item in values:
        if isinstance(item, Sequence) and not isinstance(item, str):
            parts.append(_inline_array(item))
        elif isinstance(item, Mapping):
            raise TypeError("arrays mixing tables and values are not part of the subset")
        else:
            parts.append(format_scalar(item))
    return f"[{', '.join(parts)}]"


def _emit_table(path: list[str], table: Mapping[str, object], out: list[str]) -> None:
    """Append ``table``'s plain keys to ``out``, then its sub-tables and table arrays. A
    value outside the subset is refused with its dotted key path (a caller may pass what a
    document it read holds)."""
    for key, value in table.items():
        if value is None:
            raise TypeError(f"key {key!r}: None has no TOML form (omit the key)")
        if _is_table(value) or _is_table_array(value):
            continue
        with _refusal_at(path, key):
            if isinstance(value, Sequence) and not isinstance(value, str):
                out.append(_format_array(format_key(key), value) + "\n")
            else:
                out.append(f"{format_key(key)} = {format_scalar(value)}\n")
    for key, value in table.items():
        if _is_table(value):
            with _refusal_at(path, key):
                sub_path = [*path, format_key(key)]
            _separate(out)
            out.append(f"[{'.'.join(sub_path)}]\n")
            _emit_table(sub_path, value, out)
    for key, value in table.items():
        if _is_table_array(value):
            with _refusal_at(path, key):
                sub_path = [*path, format_key(key)]
            for element in value:
                _separate(out)
                out.append(f"[[{'.'.join(sub_path)}]]\n")
                _emit_table(sub_path, element, out)


@contextlib.contextmanager
def _refusal_at(path: list[str], key: object) -> Iterator[None]:
    """A TypeError or ValueError raised for ``key`` again, its message led by the key's path."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        shown = key if isinstance(key, str) and _BARE_KEY.fullmatch(key) else repr(key)
        refusal = TypeError if isinstance(exc, TypeError) else ValueError
        raise refusal(f"{'.'.join([*path, shown])}: {exc}") from None


def _separate(out: list[str]) -> None:
    if out and out[-1] != "\n":
        out.append("\n")


def dumps(document: Mapping[str, object]) -> str:
    """The canonical TOML text of ``document`` (see the module docstring for the rules)."""
    out: list[str] = []
    _emit_table([], document, out)
    text = "".join(out)
    return text if text.endswith("\n") or not text else text + "\n"
