"""`sparkflake assemble PROFILE -o DIR`: the OS base and the Python environment trees of a
profile's lock, from the cache, without running any target binary.

1. ``lock.resolve`` — the profile, its lock, the cache;
2. ``compose.locked_inputs.assemble_base_from_lock`` — DIR/base, timed;
3. ``compose.locked_inputs.assemble_env_from_lock`` — DIR/python under the lock's assembly
   policy, timed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..compose.debian_base import BaseManifest
from ..compose.locked_inputs import (
    assemble_base_from_lock,
    assemble_env_from_lock,
    load_policy,
    policy_path_for,
)
from ..compose.python_env import EnvManifest
from ..core.blob_cache import BlobCache
from ..core.progress import ProgressCallback
from ..lock.resolve import default_cache, load_profile_lock, profile_from_arg

TREES = ("base", "python")


@dataclass(frozen=True)
class AssembleRequest:
    profile: str  # name or path
    output_dir: Path  # DIR/base and DIR/python are written
    only: str | None = None  # one of TREES: that tree alone
    workers: int | None = None  # parallel wheel installs (default: CPUs, at most 4)
    cache_root: str | None = None  # default $XDG_CACHE_HOME/sparkflake


@dataclass(frozen=True)
class AssembledTrees:
    profile: str  # the profile's name
    base: BaseManifest | None  # None: not asked for
    python: EnvManifest | None  # None: not asked for
    seconds: Mapping[str, float]  # per tree assembled


def assemble_trees(
    request: AssembleRequest, *, base_progress: ProgressCallback | None = None,
    python_progress: ProgressCallback | None = None,
) -> AssembledTrees:
    """The trees ``request.only`` names (both by default), each appearing atomically."""
    profile = profile_from_arg(request.profile)
    lock = load_profile_lock(profile)
    cache = BlobCache(request.cache_root) if request.cache_root else default_cache()
    seconds: dict[str, float] = {}
    base = python = None
    if request.only in (None, "base"):
        started = time.monotonic()
        base = assemble_base_from_lock(lock, cache, request.output_dir / "base", progress=base_progress)
        seconds["base"] = time.monotonic() - started
    if request.only in (None, "python"):
        started = time.monotonic()
        policy = load_policy(policy_path_for(profile.lock_paths()[0]), lock)
        python = assemble_env_from_lock(lock, cache, request.output_dir / "python", workers=request.workers,
                                        progress=python_progress, policy=policy)
        seconds["python"] = time.monotonic() - started
    return AssembledTrees(profile=profile.name, base=base, python=python, seconds=seconds)
