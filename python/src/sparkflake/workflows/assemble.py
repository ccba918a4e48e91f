"""`sparkflake assemble PROFILE -o DIR`: the OS base and the Python environment trees of a
profile's lock, from the cache, without running any target binary.

1. ``lock.resolve`` — the profile, its lock, the cache;
2. ``_check_replaceable_tree`` — a tree asked for where something stands already is
   replaced only with ``force`` (a tree is a layer's content: no marker in it says who
   wrote it), refused before either tree is assembled;
3. ``compose.debian_base.assemble_base`` of the lock's packages — DIR/base, timed;
4. ``compose.python_env.assemble_python_env`` of the lock's wheels under its assembly
   policy — DIR/python, timed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..compose.debian_base import BaseManifest, assemble_base
from ..compose.locked_inputs import deb_inputs, load_policy, policy_path_for, wheel_inputs
from ..compose.python_env import EnvManifest, assemble_python_env
from ..core.blob_cache import BlobCache
from ..core.errors import InputError
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


def _check_replaceable_tree(path: Path, *, force: bool) -> None:
    """A tree is a layer's content, byte for byte, so it carries no marker of who wrote it
    (a marker would be in the layer): whatever stands at ``path``, but nothing or an empty
    directory, is replaced only with ``force``."""
    if force or not os.path.lexists(path) or (path.is_dir() and not path.is_symlink() and not any(path.iterdir())):
        return
    held = sorted(entry.name for entry in path.iterdir())[:5] if path.is_dir() and not path.is_symlink() else []
    holds = f" (holds {', '.join(held)})" if held else ""
    raise InputError(f"{path}: exists{holds}; assemble writes a new tree there and would replace it; choose "
                     "another -o, move it away, or pass --force to replace it")


def assemble_trees(
    request: AssembleRequest, *, base_progress: ProgressCallback | None = None,
    python_progress: ProgressCallback | None = None,
) -> AssembledTrees:
    """The trees ``request.only`` names (both by default), each appearing atomically."""
    profile = profile_from_arg(request.profile)
    lock = load_profile_lock(profile)
    cache = BlobCache(request.cache_root) if request.cache_root else default_cache()
    trees = [tree for tree in TREES if request.only in (None, tree)]
    for tree in trees:  # refused before any tree is replaced
        _check_replaceable_tree(request.output_dir / tree, force=request.force)
    seconds: dict[str, float] = {}
    base = python = None
    if "base" in trees:
        started = time.monotonic()
        base = assemble_base(deb_inputs(lock, cache), request.output_dir / "base", platform=lock.target.platform,
                             architecture=lock.target.architecture, progress=base_progress)
        seconds["base"] = time.monotonic() - started
    if "python" in trees:
        started = time.monotonic()
        policy = load_policy(policy_path_for(profile.lock_paths()[0]), lock)
        python = assemble_python_env(wheel_inputs(lock, cache), request.output_dir / "python",
                                     workers=request.workers, progress=python_progress, waivers=policy.waivers,
                                     collisions=policy.collisions)
        seconds["python"] = time.monotonic() - started
    return AssembledTrees(profile=profile.name, base=base, python=python, seconds=seconds)
