"""profile.toml in and out: the canonical TOML a profile is written as, and the validated read
that names the file and the field of every problem."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import canonical_toml
from ..core.documents import read_regular_file
from ..core.errors import InputError
from ..core.records import (
    InvalidField,
    check_keys,
    describe,
    parse_toml_text,
    prefixed,
    record_from,
    record_from_table,
    record_to_dict,
    require_table,
)
from .model import (
    SCHEMA_VERSION,
    Absences,
    Checkpoint,
    CheckpointFile,
    Claim,
    DebianSpec,
    Device,
    Profile,
    PythonSpec,
    Qualification,
)
from .settings_catalog import refused_values, validate_runtime_table


def dump_profile(profile: Profile) -> str:
    return canonical_toml.dumps(record_to_dict(profile))


def profile_from_dict(document: Mapping[str, Any]) -> Profile:
    """A parsed TOML document to a ``Profile``; errors are ``InvalidField`` with a path."""
    required = [key for key in Profile.FIELD_ORDER if key not in Profile.OPTIONAL]
    check_keys(document, "", required, Profile.OPTIONAL)
    schema = document["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA_VERSION:
        raise InvalidField(
            "schema", f"expected the integer {SCHEMA_VERSION}, got {describe(schema)}"
        )
    arguments: dict[str, Any] = {}
    for key in Profile.FIELD_ORDER:
        if key not in document:
            continue
        value = document[key]
        if key == "python":
            value = record_from_table(PythonSpec, value, "python")
        elif key == "debian":
            value = record_from_table(DebianSpec, value, "debian")
        elif key == "absent":
            value = record_from_table(Absences, value, "absent")
        elif key == "qualified":
            value = record_from_table(Qualification, value, "qualified")
        elif key == "device":
            value = record_from_table(Device, value, "device")
        elif key == "checkpoints":
            value = _checkpoints_from_dict(value)
        elif key == "claims":
            if not isinstance(value, list):
                raise InvalidField(
                    "claims", f"expected an array of tables ([[claims]]), got {describe(value)}"
                )
            value = tuple(
                record_from_table(Claim, entry, f"claims[{index}]") for index, entry in enumerate(value)
            )
        elif key in ("inputs", "runtime", "refused", "labels"):
            value = require_table(key, value)
        elif isinstance(value, list):
            value = tuple(value)
        arguments[key] = value
    return Profile(**arguments)


def _checkpoints_from_dict(value: object) -> dict[str, Checkpoint]:
    table = require_table("checkpoints", value)
    check_keys(table, "checkpoints", ("target",), ("draft",))
    checkpoints: dict[str, Checkpoint] = {}
    for key, entry in table.items():
        where = f"checkpoints.{key}"
        entry = require_table(where, entry)
        check_keys(entry, where, ("description",), ("repository", "architecture", "pin", "files"))
        pin_raw = entry.get("pin")
        if pin_raw is not None and not isinstance(pin_raw, list):
            raise InvalidField(f"{where}.pin", f"expected an array of strings, got {describe(pin_raw)}")
        files_raw = entry.get("files", [])
        if not isinstance(files_raw, list):
            raise InvalidField(
                f"{where}.files", f"expected an array of tables, got {describe(files_raw)}"
            )
        files = tuple(
            record_from_table(CheckpointFile, item, f"{where}.files[{index}]")
            for index, item in enumerate(files_raw)
        )
        try:
            checkpoints[key] = Checkpoint(
                description=entry["description"], repository=entry.get("repository"),
                architecture=entry.get("architecture"), pin=None if pin_raw is None else tuple(pin_raw), files=files,
            )
        except InvalidField as error:
            raise prefixed(where, error) from None
    return checkpoints


def parse_profile(text: str | bytes, shown: str = "<profile>") -> Profile:
    """Parse profile text (structure only: no lock files are read)."""
    return record_from(profile_from_dict, parse_toml_text(text, shown), shown)


def read_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate one profile.toml (structure, and name = its directory's name)."""
    shown = os.fspath(path)
    profile = parse_profile(read_regular_file(path, "a TOML file"), shown)
    folder = Path(path).resolve().parent.name
    if profile.name != folder:
        raise InputError(
            f"{shown}: name: expected the directory's name {describe(folder)}, got {describe(profile.name)}"
        )
    # The launch tables too, whatever command reads the profile (a build bakes them into the
    # image's labels): catalog keys whose values parse, refusals of values that parse
    validate_runtime_table(profile.runtime, f"{shown}: runtime")
    validate_runtime_table(profile.qualified.settings, f"{shown}: qualified.settings")
    refused_values(profile.refused, f"{shown}: refused")
    return replace(profile, path=Path(path))
