"""From a lock and the blob cache to the two input trees: the OS base and the Python env.

Every blob is re-hashed on the way in (``BlobCache.verified_path``), so a cache entry
altered after it was fetched is refused here, by name, and never assembled.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.blob_cache import BlobCache
from ..core.digest import is_sha256_hex
from ..core.errors import CheckFailed, InputError
from ..core.progress import ProgressCallback
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
    try:
        document = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{source}: cannot read: {exc}") from exc
    unknown = set(document) - {"record_waiver", "collision"}
    if unknown:
        raise InputError(f"{source}: unknown tables {', '.join(sorted(unknown))} (expected record_waiver, collision)")
    wheel_names = {pin.filename for pin in lock.pins_of(WheelPin)}
    collisions = []
    for index, table in enumerate(document.get("collision", [])):
        where = f"{source}: collision[{index}]"
        if not isinstance(table, dict) or set(table) - {"path", "keep", "drop", "reason"} or "path" not in table or "drop" not in table:
            raise InputError(f"{where}: expected path, keep (optional), drop, reason")
        rule = CollisionRule(
            path=str(table["path"]),
            keep=str(table["keep"]) if table.get("keep") else None,
            drop=tuple(str(d) for d in table["drop"]),
            reason=str(table.get("reason", "")),
        )
        missing = [w for w in rule.wheels if w not in wheel_names]
        if missing:
            raise CheckFailed(f"{where}: {', '.join(missing)} not in the lock; the rule is stale", check_id="path-conflict")
        collisions.append(rule)
    return AssemblyPolicy(_record_waivers(document, source, lock), tuple(collisions))


def _record_waivers(document: dict[str, Any], source: Path, lock: Lock) -> tuple[RecordWaiver, ...]:
    """Waivers for upstream RECORD defects; each bound to a locked wheel by its sha256."""
    wheels = {pin.filename: pin for pin in lock.pins_of(WheelPin)}
    waivers = []
    for index, table in enumerate(document.get("record_waiver", [])):
        where = f"{source}: record_waiver[{index}]"
        keys = {"wheel", "wheel_sha256", "path", "actual_sha256", "actual_size", "reason"}
        if not isinstance(table, dict) or set(table) - keys or not {"wheel", "wheel_sha256", "path", "actual_sha256", "actual_size"} <= set(table):
            raise InputError(f"{where}: expected keys {', '.join(sorted(keys))}")
        for key in ("wheel_sha256", "actual_sha256"):
            if not is_sha256_hex(table[key]):
                raise InputError(f"{where}.{key}: expected 64 lowercase hex digits")
        pin = wheels.get(table["wheel"])
        if pin is not None and pin.sha256 != table["wheel_sha256"]:
            raise CheckFailed(
                f"{where}: {table['wheel']} is locked with sha256 {pin.sha256}, the waiver names "
                f"{table['wheel_sha256']}; a waiver never carries over to other bytes",
                check_id="wheel-record",
            )
        waivers.append(
            RecordWaiver(
                wheel=str(table["wheel"]),
                wheel_sha256=str(table["wheel_sha256"]),
                path=str(table["path"]),
                actual_sha256=str(table["actual_sha256"]),
                actual_size=int(table["actual_size"]),
                reason=str(table.get("reason", "")),
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
