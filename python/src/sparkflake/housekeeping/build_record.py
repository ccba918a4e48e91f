"""What one build used from the cache, written into the cache at the end of the build.

``sparkflake cache gc`` keeps what the last builds of each profile (and every deployed
image) used; this record is how it knows. One file per build under
``CACHE/builds/<profile>/<UTC time>-<config hex>.json``::

    {"schema": "sparkflake.build-record/v1", "profile": "glm53-dflash7",
     "built_at": "2026-12-02T01:02:03Z",
     "manifest_digest": "sha256:…", "config_digest": "sha256:…",
     "inputs": ["<sha256 hex of an input blob>", …], "git_trees": ["<git tree id>", …],
     "trees": ["<tree-cache key>", …], "blobs": ["sha256:<layer-store blob>", …]}
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.digest import GIT_OBJECT_ID_PATTERN
from ..core.documents import parse_json_object, read_regular_file
from ..core.errors import InputError
from ..core.records import (
    InvalidField,
    check_keys,
    freeze_str_tuple,
    keys_in_field_order,
    record_from,
    record_to_dict,
    require_input_name,
    require_match,
    require_oci_digest,
    require_sha256_hex,
)

SCHEMA = "sparkflake.build-record/v1"
BUILDS_DIR = "builds"
MAX_RECORD_BYTES = 16 << 20  # a glm53 build lists ~600 inputs: far below this
_UTC = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
RECORD_NAME = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{12}(-[0-9]+)?\.json$")


def _git_tree(path: str, value: object) -> str:
    return require_match(path, value, GIT_OBJECT_ID_PATTERN, "a git tree id (40 or 64 lowercase hex digits)")


@keys_in_field_order()
@dataclass(frozen=True)
class BuildRecord:
    profile: str
    built_at: str  # UTC, seconds: the order of a profile's builds
    manifest_digest: str
    config_digest: str
    inputs: tuple[str, ...] = ()
    git_trees: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()
    blobs: tuple[str, ...] = ()

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        require_input_name("profile", self.profile)
        require_match("built_at", self.built_at, _UTC, "a UTC time YYYY-MM-DDTHH:MM:SSZ")
        require_oci_digest("manifest_digest", self.manifest_digest)
        require_oci_digest("config_digest", self.config_digest)
        for name, check in (("inputs", require_sha256_hex), ("git_trees", _git_tree),
                            ("trees", require_sha256_hex), ("blobs", require_oci_digest)):
            freeze_str_tuple(self, name, check, non_empty=False)


def dump_record(record: BuildRecord) -> bytes:
    return readable_json_bytes({"schema": SCHEMA, **record_to_dict(record)})


def parse_record(raw: bytes, shown: str) -> BuildRecord:
    document = parse_json_object(raw, shown, "a build record (a JSON object)")

    def build(table: Mapping[str, Any]) -> BuildRecord:
        check_keys(table, "$", ["schema", *BuildRecord.FIELD_ORDER[:4]], BuildRecord.FIELD_ORDER[4:])
        if table["schema"] != SCHEMA:
            raise InvalidField("$.schema", f"expected {SCHEMA!r}")
        try:
            return BuildRecord(**{key: value for key, value in table.items() if key != "schema"})
        except InvalidField as error:
            raise InvalidField(f"$.{error.field_path}", error.problem) from None
        except TypeError as error:  # an array field given as a scalar
            raise InvalidField("$", str(error)) from None

    return record_from(build, document, shown)


def write_build_record(cache_root: Path, record: BuildRecord) -> Path:
    """Write ``record`` under ``cache_root/builds/<profile>/`` (atomically); its path."""
    directory = cache_root / BUILDS_DIR / record.profile
    stamp = record.built_at.replace("-", "").replace(":", "")
    base = f"{stamp}-{record.config_digest.removeprefix('sha256:')[:12]}"
    path, serial = directory / f"{base}.json", 1
    while path.exists():
        serial += 1
        path = directory / f"{base}-{serial}.json"
    write_bytes_atomic(path, dump_record(record))
    return path


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class StoredRecord:
    path: Path
    record: BuildRecord


def _serial(name: str) -> int:
    """The n of ``…-<n>.json``: builds within one second, in the order they were written."""
    match = RECORD_NAME.fullmatch(name)
    return int(match.group(1)[1:]) if match and match.group(1) else 1


def load_build_records(cache_root: Path) -> list[StoredRecord]:
    """Every build record in the cache, oldest first within each profile. A file of another
    name is not sparkflake's and is left out; a record sparkflake named but cannot read is
    an error naming it (gc must not guess what a build used)."""
    found: list[StoredRecord] = []
    base = cache_root / BUILDS_DIR
    try:
        profiles = sorted(os.scandir(base), key=lambda entry: entry.name)
    except FileNotFoundError:
        return found
    for profile in profiles:
        if not profile.is_dir(follow_symlinks=False):
            continue
        for entry in sorted(os.scandir(profile.path), key=lambda entry: entry.name):
            if not RECORD_NAME.fullmatch(entry.name):
                continue
            raw = read_regular_file(entry.path, "a build record", MAX_RECORD_BYTES)
            record = parse_record(raw, entry.path)
            if record.profile != profile.name:
                raise InputError(f"{entry.path}: $.profile: {record.profile!r} is not the directory's {profile.name!r}")
            found.append(StoredRecord(Path(entry.path), record))
    found.sort(key=lambda stored: (stored.record.profile, stored.record.built_at, _serial(stored.path.name)))
    return found


def last_build_of(cache_root: Path, profile: str) -> BuildRecord | None:
    """The newest build record of ``profile``; None when there is none or the records
    cannot be read (an estimate then assumes a cold build)."""
    try:
        records = [stored.record for stored in load_build_records(cache_root) if stored.record.profile == profile]
    except InputError:
        return None
    return records[-1] if records else None
