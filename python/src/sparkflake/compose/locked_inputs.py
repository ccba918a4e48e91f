"""From a lock and the blob cache to the two input trees: the OS base and the Python env.

Every blob is re-hashed on the way in (``BlobCache.verified_path``), so a cache entry
altered after it was fetched is refused here, by name, and never assembled.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..fetch import Artifact, BlobCache
from ..lock import Lock
from ..resolve.target import DEBIAN_BOOKWORM_ARM64, Target
from .debian_base import BaseManifest, DebInput, assemble_base
from .python_env import DEFAULT_PREFIX, EnvManifest, WheelInput, assemble_python_env

ProgressCallback = Callable[[int, int, str], None]


def deb_inputs(lock: Lock, cache: BlobCache) -> list[DebInput]:
    found = []
    for pin in lock.of_kind("deb"):
        version = pin.version.split(":", 1)[-1]  # type: ignore[union-attr]
        artifact = Artifact(pin.name, f"{pin.package}_{version}_{pin.architecture}.deb", pin.sha256, pin.size)  # type: ignore[union-attr]
        found.append(DebInput(pin.package, pin.version, pin.architecture, cache.verified_path(artifact)))  # type: ignore[union-attr]
    return found


def wheel_inputs(lock: Lock, cache: BlobCache) -> list[WheelInput]:
    found = []
    for pin in lock.of_kind("wheel"):
        artifact = Artifact(pin.name, pin.filename, pin.sha256, pin.size)  # type: ignore[union-attr]
        found.append(WheelInput(pin.name, pin.version, pin.filename, cache.verified_path(artifact)))  # type: ignore[union-attr]
    return found


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
    target: Target = DEBIAN_BOOKWORM_ARM64,
    prefix: str = DEFAULT_PREFIX,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    exclude: frozenset[str] = frozenset(),
) -> EnvManifest:
    """The Python env of every wheel in the lock (``exclude``: distribution names left out)."""
    wheels = [w for w in wheel_inputs(lock, cache) if w.name not in exclude]
    return assemble_python_env(wheels, Path(output), target=target, prefix=prefix, workers=workers, progress=progress)
