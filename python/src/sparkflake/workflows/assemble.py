"""`sparkflake assemble PROFILE -o DIR`: the OS base and the Python environment trees of a
profile's lock, from the cache, without running any target binary.

1. ``lock.resolve`` — the profile, its lock, the cache;
2. ``core.output_marker.check_replaceable_output`` — each tree asked for is replaced only
   when it is one sparkflake wrote (its ``.sparkflake-output.json`` lists everything in it,
   unchanged) or ``force``: refused before either is assembled;
3. ``compose.debian_base.assemble_base`` of the lock's packages — DIR/base, timed;
4. ``compose.python_env.assemble_python_env`` of the lock's wheels under its assembly
   policy — DIR/python, timed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..compose.debian_base import BaseManifest, assemble_base
from ..compose.locked_inputs import deb_inputs, load_policy, policy_path_for, wheel_inputs
from ..compose.python_env import EnvManifest, assemble_python_env
from ..core.blob_cache import BlobCache
from ..core.output_marker import check_replaceable_output
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
    force: bool = False  # replace DIR/base, DIR/python even if sparkflake did not write them


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
    trees = [tree for tree in TREES if request.only in (None, tree)]
    for tree in trees:  # an operator's directory refused before any tree is replaced
        check_replaceable_output(request.output_dir / tree, force=request.force)
    seconds: dict[str, float] = {}
    base = python = None
    if "base" in trees:
        started = time.monotonic()
        base = assemble_base(deb_inputs(lock, cache), request.output_dir / "base", platform=lock.target.platform,
                             architecture=lock.target.architecture, progress=base_progress,
                             owned_output=True, force=request.force)
        seconds["base"] = time.monotonic() - started
    if "python" in trees:
        started = time.monotonic()
        policy = load_policy(policy_path_for(profile.lock_paths()[0]), lock)
        python = assemble_python_env(wheel_inputs(lock, cache), request.output_dir / "python",
                                     workers=request.workers, progress=python_progress, waivers=policy.waivers,
                                     collisions=policy.collisions, owned_output=True, force=request.force)
        seconds["python"] = time.monotonic() - started
    return AssembledTrees(profile=profile.name, base=base, python=python, seconds=seconds)
