"""From a lock and the blob cache to the two input trees: the OS base and the Python env.

Every blob is re-hashed on the way in (``BlobCache.verified_path``), so a cache entry
altered after it was fetched is refused here, by name, and never assembled.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.blob_cache import BlobCache
from ..core.digest import is_sha256_hex
from ..core.documents import read_regular_file
from ..core.errors import CheckFailed, InputError
from ..core.progress import ProgressCallback
from ..core.records import parse_toml_text
from ..lock.pins import DebPin, Lock, WheelPin, pin_artifact
from ..lock.target import DEBIAN_BOOKWORM_ARM64, InstallTarget
from .debian_base import BaseManifest, DebInput, assemble_base
from .python_env import (
    DEFAULT_PREFIX,
    CollisionRule,
    EnvManifest,
    RecordWaiver,
    WheelInput,
    assemble_python_env,
)


def policy_path_for(lock_path: str | os.PathLike[str]) -> Path:
    """``profiles/glm53.lock`` → ``profiles/glm53.assembly-policy.toml``."""
    path = Path(lock_path)
    return path.with_name(path.stem + ".assembly-policy.toml")


@dataclass(frozen=True)
class AssemblyPolicy:
    """Named answers to upstream packaging defects, each bound to exact locked wheels."""

    waivers: tuple[RecordWaiver, ...] = ()
    collisions: tuple[CollisionRule, ...] = ()


def load_policy(path: str | os.PathLike[str], lock: Lock) -> AssemblyPolicy:
    source = Path(path)
    if not source.is_file():
        return AssemblyPolicy()
    # bounded, UTF-8 and TOML, each refused naming the file
    document = parse_toml_text(read_regular_file(source, "an assembly policy"), str(source))
    unknown = set(document) - {"record_waiver", "collision"}
    if unknown:
        raise InputError(f"{source}: unknown tables {', '.join(sorted(unknown))} (expected record_waiver, collision)")
    wheel_names = {pin.filename for pin in lock.pins_of(WheelPin)}
    collisions = []
    for where, table in _tables(document, "collision", source):
        if not isinstance(table, dict) or set(table) - {"path", "keep", "drop", "reason"} or "path" not in table or "drop" not in table:
            raise InputError(f"{where}: expected path, keep (optional), drop, reason")
        drop = table["drop"]
        if not isinstance(drop, list) or not all(isinstance(name, str) for name in drop):
            raise InputError(f"{where}.drop: expected an array of strings (wheel file names)")
        keep = _string(table, "keep", where, "")
        rule = CollisionRule(
            path=_string(table, "path", where),
            keep=keep or None,
            drop=tuple(drop),
            reason=_string(table, "reason", where, ""),
        )
        missing = [w for w in rule.wheels if w not in wheel_names]
        if missing:
            raise CheckFailed(f"{where}: {', '.join(missing)} not in the lock; the rule is stale", check_id="path-conflict")
        collisions.append(rule)
    return AssemblyPolicy(_record_waivers(document, source, lock), tuple(collisions))


def _tables(document: dict[str, Any], name: str, source: Path) -> Iterator[tuple[str, Any]]:
    """The items of the policy's ``[[name]]`` array of tables, each with its place; any
    other value under ``name`` is refused naming the file and ``name``."""
    items = document.get(name, [])
    if not isinstance(items, list):
        raise InputError(f"{source}: {name}: expected an array of tables ([[{name}]])")
    for index, table in enumerate(items):
        yield f"{source}: {name}[{index}]", table


def _string(table: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    """``table[key]`` (``default`` when absent and one is given), refused unless a string."""
    value = table.get(key, default)
    if not isinstance(value, str):
        raise InputError(f"{where}.{key}: expected a string")
    return value


def _record_waivers(document: dict[str, Any], source: Path, lock: Lock) -> tuple[RecordWaiver, ...]:
    """Waivers for upstream RECORD defects; each bound to a locked wheel by its sha256."""
    wheels = {pin.filename: pin for pin in lock.pins_of(WheelPin)}
    waivers = []
    for where, table in _tables(document, "record_waiver", source):
        keys = {"wheel", "wheel_sha256", "path", "actual_sha256", "actual_size", "reason"}
        if not isinstance(table, dict) or set(table) - keys or not {"wheel", "wheel_sha256", "path", "actual_sha256", "actual_size"} <= set(table):
            raise InputError(f"{where}: expected keys {', '.join(sorted(keys))}")
        for key in ("wheel_sha256", "actual_sha256"):
            if not is_sha256_hex(table[key]):
                raise InputError(f"{where}.{key}: expected 64 lowercase hex digits")
        wheel = _string(table, "wheel", where)
        size = table["actual_size"]
        if type(size) is not int or size < 0:  # a bool is no size, nor is 1.5 taken as 1
            raise InputError(f"{where}.actual_size: expected a non-negative integer (bytes)")
        pin = wheels.get(wheel)
        if pin is not None and pin.sha256 != table["wheel_sha256"]:
            raise CheckFailed(
                f"{where}: {table['wheel']} is locked with sha256 {pin.sha256}, the waiver names "
                f"{table['wheel_sha256']}; a waiver never carries over to other bytes",
                check_id="wheel-record",
            )
        waivers.append(
            RecordWaiver(
                wheel=wheel,
                wheel_sha256=table["wheel_sha256"],
                path=_string(table, "path", where),
                actual_sha256=table["actual_sha256"],
                actual_size=size,
                reason=_string(table, "reason", where, ""),
            )
        )
    return tuple(waivers)


def deb_inputs(lock: Lock, cache: BlobCache) -> list[DebInput]:
    return [
        DebInput(pin.package, pin.version, pin.architecture, cache.verified_path(pin_artifact(pin)))
        for pin in lock.pins_of(DebPin)
    ]


def wheel_inputs(lock: Lock, cache: BlobCache) -> list[WheelInput]:
    return [
        WheelInput(pin.name, pin.version, pin.filename, cache.verified_path(pin_artifact(pin)))
        for pin in lock.pins_of(WheelPin)
    ]


def assemble_base_from_lock(
    lock: Lock, cache: BlobCache, output: str | os.PathLike[str], *, progress: ProgressCallback | None = None
) -> BaseManifest:
    return assemble_base(
        deb_inputs(lock, cache), output, platform=lock.target.platform, architecture=lock.target.architecture, progress=progress
    )


def assemble_env_from_lock(
    lock: Lock,
    cache: BlobCache,
    output: str | os.PathLike[str],
    *,
    target: InstallTarget = DEBIAN_BOOKWORM_ARM64,
    prefix: str = DEFAULT_PREFIX,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    exclude: frozenset[str] = frozenset(),
    policy: AssemblyPolicy | None = None,
) -> EnvManifest:
    """The Python env of every wheel in the lock (``exclude``: distribution names left out)."""
    wheels = [w for w in wheel_inputs(lock, cache) if w.name not in exclude]
    policy = policy or AssemblyPolicy()
    return assemble_python_env(
        wheels,
        Path(output),
        target=target,
        prefix=prefix,
        workers=workers,
        progress=progress,
        waivers=policy.waivers,
        collisions=policy.collisions,
    )
