"""The lock file: canonical TOML out (``dump_lock``, ``write_lock``), validated records in
(``parse_lock``, ``load_lock``); every message names the file and the place inside it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..core import canonical_toml
from ..core.atomic_write import write_bytes_atomic
from ..core.records import (
    InvalidField,
    check_keys,
    describe,
    join_path,
    parse_toml_text,
    prefixed,
    read_toml,
    record_from,
    record_from_table,
    record_to_dict,
    require_table,
)
from .pins import KINDS, PIN_TYPES, SCHEMA_VERSION, Lock, Pin, Target


def lock_to_dict(lock: Lock) -> dict[str, Any]:
    """The lock as plain data in canonical order (also its JSON form)."""
    return {
        "schema": lock.schema,
        "target": {key: getattr(lock.target, key) for key in Target.FIELD_ORDER},
        "inputs": [record_to_dict(pin) for pin in lock.inputs],
    }


def dump_lock(lock: Lock) -> str:
    """Canonical TOML text: byte-identical for equal locks."""
    return canonical_toml.dumps(lock_to_dict(lock))


def write_lock(path: str | os.PathLike[str], lock: Lock) -> None:
    write_bytes_atomic(path, dump_lock(lock).encode("utf-8"))


def pin_from_dict(table: Mapping[str, Any], where: str = "") -> Pin:
    """One ``[[inputs]]`` table to its record; errors carry ``where`` (e.g. ``inputs[3]``)."""
    table = require_table(where or "input", table)
    kind = table.get("kind")
    if kind is None:
        raise InvalidField(join_path(where, "kind"), "missing required key")
    if not isinstance(kind, str) or kind not in PIN_TYPES:
        raise InvalidField(
            join_path(where, "kind"), f"expected one of {', '.join(KINDS)}, got {describe(kind)}"
        )
    pin: Pin = record_from_table(PIN_TYPES[kind], table, where)
    return pin


def lock_from_dict(document: Mapping[str, Any]) -> Lock:
    """A parsed TOML document to a ``Lock``; errors are ``InvalidField`` with a path."""
    check_keys(document, "", ("schema", "target"), ("inputs",))
    schema = document["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise InvalidField(
            "schema", f"expected the integer {SCHEMA_VERSION}, got {describe(schema)}"
        )
    if schema != SCHEMA_VERSION:
        raise InvalidField(
            "schema", f"this sparkflake reads schema {SCHEMA_VERSION}, got {describe(schema)}"
        )
    target_table = require_table("target", document["target"])
    check_keys(target_table, "target", Target.FIELD_ORDER)
    try:
        target = Target(**{key: target_table[key] for key in Target.FIELD_ORDER})
    except InvalidField as error:
        raise prefixed("target", error) from None
    raw_inputs = document.get("inputs", [])
    if not isinstance(raw_inputs, list):
        raise InvalidField(
            "inputs", f"expected an array of tables ([[inputs]]), got {describe(raw_inputs)}"
        )
    pins = [pin_from_dict(entry, f"inputs[{index}]") for index, entry in enumerate(raw_inputs)]
    seen: dict[str, int] = {}
    for index, pin in enumerate(pins):
        if pin.name in seen:
            raise InvalidField(
                f"inputs[{index}].name",
                f"duplicate input name {describe(pin.name)} (first used by inputs[{seen[pin.name]}])",
            )
        seen[pin.name] = index
    return Lock(target=target, inputs=tuple(pins), schema=schema)


def parse_lock(text: str | bytes, shown: str = "<lock>") -> Lock:
    """Parse lock text; every error is an ``InputError`` naming ``shown`` and the place."""
    return record_from(lock_from_dict, parse_toml_text(text, shown), shown)


def load_lock(path: str | os.PathLike[str]) -> Lock:
    return record_from(lock_from_dict, read_toml(path), os.fspath(path))
