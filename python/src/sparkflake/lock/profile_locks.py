"""A profile together with its lock files: the locks it lists, the input that plays each role,
and the check that every role and Debian seed is pinned for the profile's platform.
``load_profile`` is the checked read every stage after this one uses."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..core.errors import InputError
from ..core.records import describe
from ..profile.lookup import check_profiles_distinct, find_profiles_dir, list_profiles, profile_path
from ..profile.model import PROFILE_FILE, Profile
from ..profile.profile_file import read_profile
from .lock_file import load_lock
from .pins import DebPin, Lock, Pin


def check_against_locks(profile: Profile, locks: Sequence[Lock]) -> None:
    """Every role names an input of the locks, every Debian seed package is locked."""
    shown = profile.shown()
    for role, name in profile.inputs.items():
        if not any(name in lock for lock in locks):
            raise InputError(
                f"{shown}: inputs.{role}: no input named {describe(name)} in {', '.join(profile.locks)}"
            )
    locked_packages = {pin.package for lock in locks for pin in lock.pins_of(DebPin)}
    for index, package in enumerate(profile.debian.seed):
        if package not in locked_packages:
            raise InputError(
                f"{shown}: debian.seed[{index}]: package {describe(package)} has no deb input in {', '.join(profile.locks)}"
            )
    for lock, ref in zip(locks, profile.locks, strict=True):
        if lock.target.platform != profile.platform:
            raise InputError(
                f"{shown}: platform: {describe(profile.platform)} but {ref} is locked for {describe(lock.target.platform)}"
            )


def load_profile(
    name_or_path: str | os.PathLike[str],
    profiles_dir: str | os.PathLike[str] | None = None,
    *,
    check_locks: bool = True,
) -> Profile:
    """Read a profile by name or path and validate it; with ``check_locks``, also check it
    against its lock files when they all exist (a missing lock is the resolver's to write)."""
    profile = read_profile(profile_path(name_or_path, profiles_dir))
    if check_locks:
        paths = profile.lock_paths()
        if all(path.is_file() for path in paths):
            check_against_locks(profile, load_locks(profile))
    return profile


def load_all_profiles(
    profiles_dir: str | os.PathLike[str] | None = None, *, check_locks: bool = True
) -> list[Profile]:
    directory = Path(profiles_dir) if profiles_dir is not None else find_profiles_dir()
    profiles = [
        load_profile(directory / name / PROFILE_FILE, check_locks=check_locks)
        for name in list_profiles(directory)
    ]
    check_profiles_distinct(profiles)
    return profiles


def load_locks(profile: Profile) -> tuple[Lock, ...]:
    return tuple(load_lock(path) for path in profile.lock_paths())

def input_for(profile: Profile, role: str, locks: Iterable[Lock]) -> Pin:
    """The pinned input that plays ``role`` (the first listed lock holding it wins)."""
    if role not in profile.inputs:
        raise InputError(
            f"{profile.shown()}: inputs.{role}: no such role (roles: {', '.join(profile.inputs)})"
        )
    name = profile.inputs[role]
    for lock in locks:
        pin = lock.get(name)
        if pin is not None:
            return pin
    raise InputError(
        f"{profile.shown()}: inputs.{role}: no input named {describe(name)} in {', '.join(profile.locks)}"
    )
