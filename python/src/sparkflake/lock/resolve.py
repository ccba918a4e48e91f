"""A profile's lock: resolve (Python with uv, Debian from signed indices), check, update.

Profiles that list the same lock file share it (glm53-dflash7 and glm53-mtp5 both use
``profiles/glm53.lock``): resolution takes the union of their requirements and seeds, so
one lock serves all of them.

Every Debian base also gets ``CONTAINER_SEEDS`` (base-files for /etc/os-release and the
directory skeleton, base-passwd for the passwd/group masters): a container root needs
them whatever the profile's own seeds are.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..core.blob_cache import Artifact, BlobCache
from ..core.errors import CheckFailed, InputError
from ..profile.lookup import list_profiles
from ..profile.model import Profile
from . import resolve_debian as debian_resolver
from . import resolve_python as python_resolver
from .lock_file import load_lock, write_lock
from .pins import (
    DebPin,
    GitPin,
    Lock,
    OciPin,
    Pin,
    SdistPin,
    Target,
    WheelPin,
    pin_artifact,
    sdist_input_name,
)
from .profile_locks import check_against_locks, load_locks, load_profile
from .pylock import resolved_pins
from .target import InstallTarget

CONTAINER_SEEDS: tuple[str, ...] = ("base-files", "base-passwd")


def target_for(profile: Profile) -> InstallTarget:
    if profile.platform != "linux/arm64":
        raise InputError(f"{profile.name}: platform {profile.platform!r}: only linux/arm64 bases are resolved")
    if profile.debian.suite != "bookworm":
        raise InputError(f"{profile.name}: debian.suite {profile.debian.suite!r}: only bookworm is known")
    return InstallTarget()


def lock_target(target: InstallTarget) -> Target:
    return Target(platform=target.platform, python=target.python_minor, glibc=f"{target.glibc[0]}.{target.glibc[1]}")


def sharing_profiles(profile: Profile) -> list[Profile]:
    """Every profile in the same profiles directory that lists the same first lock file
    (the one resolution writes; later locks hold hand-pinned inputs, e.g. git sources)."""
    lock_path = profile.lock_paths()[0]
    directory = profile.directory.parent
    sharing = []
    for name in list_profiles(directory):
        other = load_profile(directory / name / "profile.toml", check_locks=False)
        if other.lock_paths()[0] == lock_path:
            sharing.append(other)
    return sharing or [profile]


@dataclass(frozen=True)
class ResolutionRequest:
    requirements: tuple[str, ...]
    seeds: tuple[str, ...]
    sdist_names: tuple[str, ...]  # input names ending in -sdist the profiles ask for


def request_for(profiles: Sequence[Profile]) -> ResolutionRequest:
    requirements: list[str] = []
    seeds: list[str] = list(CONTAINER_SEEDS)
    sdists: list[str] = []
    for profile in profiles:
        requirements += [r for r in profile.python.requirements if r not in requirements]
        seeds += [s for s in profile.debian.seed if s not in seeds]
        sdists += [n for n in profile.inputs.values() if n.endswith("-sdist") and n not in sdists]
    return ResolutionRequest(tuple(requirements), tuple(seeds), tuple(sdists))


def python_pins(pylock_text: str, target: InstallTarget, sdist_names: Sequence[str]) -> list[Pin]:
    """The wheels and sdists of uv's resolution (its pylock.toml text) for ``target``."""
    try:
        document = tomllib.loads(pylock_text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"uv's pylock.toml: not TOML: {exc}", check_id="python-resolve") from None
    return list(resolved_pins(document, "uv's pylock.toml", target=target, sdist_names=sdist_names))


def deb_pins(resolution: debian_resolver.DebianResolution) -> list[Pin]:
    return [
        DebPin(
            name=f"{p['package']}:{p['architecture']}",
            package=str(p["package"]),
            version=str(p["version"]),
            architecture=str(p["architecture"]),
            sha256=str(p["sha256"]),
            size=int(p["size"]),
            urls=tuple(p["urls"]),
        )
        for p in resolution.pins
    ]


def resolve_lock(
    profile: Profile,
    *,
    cache: BlobCache | None = None,
    constraints: Sequence[str] = (),
    exclude_newer: str | None = None,
) -> Lock:
    """Resolve the lock shared by ``profile`` and its siblings, from scratch."""
    target = target_for(profile)
    request = request_for(sharing_profiles(profile))
    requirements = list(request.requirements)
    text = _compile(requirements, target, constraints, exclude_newer)
    pins = python_pins(text, target, request.sdist_names)
    resolution = debian_resolver.resolve_debian(request.seeds, cache=cache or BlobCache())
    pins += deb_pins(resolution)
    return Lock(target=lock_target(target), inputs=tuple(pins))


def _compile(requirements: list[str], target: InstallTarget, constraints: Sequence[str], exclude_newer: str | None) -> str:
    if not constraints:
        return python_resolver.compile_pylock(requirements, target=target, exclude_newer=exclude_newer)
    # uv takes constraints from a file; pass them as requirements' companions.
    with tempfile.TemporaryDirectory(prefix="sparkflake-constraints-") as scratch:
        path = Path(scratch) / "constraints.txt"
        path.write_text("".join(f"{c}\n" for c in constraints), encoding="utf-8")
        return python_resolver.compile_pylock(
            requirements, target=target, exclude_newer=exclude_newer, extra_args=("--constraint", str(path))
        )


def update_input(profile: Profile, lock: Lock, names: Sequence[str], *, cache: BlobCache | None = None,
                 exclude_newer: str | None = None) -> Lock:
    """Refresh the named inputs together; every other pin stays as locked (uv constraints
    for wheels). Coupled wheels (a compiler and its headers) are refreshed in one
    resolution, since a constraint on either alone would make the other unsatisfiable.

    A wheel/sdist update may add inputs the new versions need; a deb update replaces the
    package with the index's newest and adds what its new dependencies need.
    """
    existing = {}
    for name in names:
        pin = lock.get(name)
        if pin is None:
            raise InputError(f"lock --update: no input named {name!r} in the lock")
        if not isinstance(pin, (WheelPin, SdistPin, DebPin)):
            raise InputError(f"lock --update {name}: {profile.lock_paths()[0]} holds it, {_pinned_by_hand(pin)}")
        existing[name] = pin
    target = target_for(profile)
    request = request_for(sharing_profiles(profile))
    updated = lock
    python = [pin for pin in existing.values() if isinstance(pin, (WheelPin, SdistPin))]
    if python:
        distributions = {
            pin.name.removesuffix("-sdist") if isinstance(pin, SdistPin) else pin.name for pin in python
        }
        constraints = [
            f"{pin.name}=={pin.version}"
            for pin in lock.pins_of(WheelPin)
            if pin.name not in distributions
        ]
        text = _compile(list(request.requirements), target, constraints, exclude_newer)
        refreshed = distributions | {sdist_input_name(name) for name in distributions}
        for pin in python_pins(text, target, request.sdist_names):
            if pin.name in refreshed or pin.name not in lock:
                updated = updated.replace_input(pin)
    debs = [name for name, pin in existing.items() if isinstance(pin, DebPin)]
    if debs:
        resolution = debian_resolver.resolve_debian(request.seeds, cache=cache or BlobCache())
        fresh_debs = {pin.name: pin for pin in deb_pins(resolution)}
        for name in debs:
            if name not in fresh_debs:
                raise InputError(f"lock --update: {name} is no longer in the seeds' closure")
        for pin in fresh_debs.values():
            if pin.name in debs or pin.name not in lock:
                updated = updated.replace_input(pin)
    return updated


def update_profile_input(profile: Profile, names: Sequence[str], *, cache: BlobCache | None = None,
                         exclude_newer: str | None = None) -> tuple[Lock, Lock]:
    """``update_input`` on the profile's resolved lock; (before, after). Only the first
    (resolved) lock is refreshed by resolution: an input of a later lock (git sources,
    operator files) is pinned by hand, and the refusal says where."""
    before = load_profile_lock(profile)
    paths = profile.lock_paths()
    for name in names:
        if before.get(name) is not None:
            continue
        for path in paths[1:]:
            pin = load_lock(path).get(name) if path.is_file() else None
            if pin is not None:
                raise InputError(f"lock --update {name}: {path} holds it, {_pinned_by_hand(pin)}")
        raise InputError(f"lock --update: no input named {name!r} in {', '.join(str(path) for path in paths)}")
    return before, update_input(profile, before, names, cache=cache, exclude_newer=exclude_newer)


def _pinned_by_hand(pin: Any) -> str:
    if isinstance(pin, GitPin):
        return (f"a git input pinned by commit and tree: set its rev and tree there (tree: `git rev-parse "
                f"REV^{{tree}}` in a clone of {pin.urls[0] if pin.urls else 'the repository'}), then "
                "`sparkflake fetch PROFILE` checks the commit names that tree")
    return f"a {pin.kind} input: edit its record there, then `sparkflake fetch PROFILE` checks its bytes"


def check_lock(profile: Profile) -> dict[str, Any]:
    """Offline: the lock exists, is valid, and covers every profile sharing it."""
    paths = profile.lock_paths()
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise CheckFailed(f"{profile.name}: lock file missing: {', '.join(missing)}; run `sparkflake lock {profile.name}`", check_id="lock-complete")
    locks = load_locks(profile)
    lock = locks[0]
    target = target_for(profile)
    problems: list[str] = []
    for path, each in zip(paths, locks, strict=True):
        if each.target != lock_target(target):
            problems.append(f"{path.name}: target is {each.target}, the profile's base needs {lock_target(target)}")
    sharing = sharing_profiles(profile)
    for member in sharing:
        try:  # each against its own locks: a profile may list more locks after the shared one
            check_against_locks(member, load_locks(member))
        except InputError as exc:
            problems.append(str(exc))
    request = request_for(sharing)
    wheels = {pin.name: pin for pin in lock.pins_of(WheelPin)}
    environment = target.marker_environment() | {"extra": ""}
    for text in request.requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        pin = wheels.get(canonicalize_name(requirement.name))
        if pin is None:
            problems.append(f"requirement {text!r}: no wheel input {canonicalize_name(requirement.name)!r}")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            problems.append(f"requirement {text!r}: locked {pin.name} {pin.version} does not satisfy it")
    for pin in wheels.values():
        if target.wheel_rank(pin.tag_set()) is None:
            problems.append(f"{pin.name}: {pin.filename} does not fit {target.platform} {target.python_tag}")
    debs = {pin.package for pin in lock.pins_of(DebPin)}
    for seed in request.seeds:
        if seed not in debs:
            problems.append(f"debian seed {seed!r}: no deb input")
    for deb in lock.pins_of(DebPin):
        if deb.architecture not in (target.debian_architecture, "all"):
            problems.append(f"{deb.name}: architecture {deb.architecture}, the base is {target.debian_architecture}")
    if problems:
        raise CheckFailed(
            f"{paths[0]}: does not match {', '.join(p.name for p in sharing)}:\n  " + "\n  ".join(problems),
            check_id="lock-complete",
        )
    return {
        "lock": str(paths[0]),
        "profiles": [p.name for p in sharing],
        "wheels": len(wheels),
        "debs": len(debs),
        "inputs": len(lock.inputs),
        "bytes": sum(getattr(pin, "size", 0) for pin in lock.inputs),
        # git inputs of every lock the profile lists (the shared lock has none)
        "git": [pin.name for each in locks for pin in each.of_kind("git")],
        "locks": [str(path) for path in paths],
    }


def write_profile_lock(profile: Profile, lock: Lock) -> Path:
    path = profile.lock_paths()[0]
    write_lock(path, lock)
    return path


def load_profile_lock(profile: Profile) -> Lock:
    path = profile.lock_paths()[0]
    if not path.is_file():
        raise InputError(f"{profile.name}: no lock at {path}; run `sparkflake lock {profile.name}`")
    return load_lock(path)


def artifacts(lock: Lock, *, kinds: Sequence[str] = ("wheel", "sdist", "deb", "file")) -> list[Artifact]:
    """Fetchable inputs of a lock as plain artifacts (git and oci inputs are not files)."""
    return [
        pin_artifact(pin) for pin in lock.inputs
        if pin.kind in kinds and not isinstance(pin, GitPin | OciPin)
    ]


def profile_from_arg(name: str) -> Profile:
    return load_profile(name, check_locks=False)


def default_cache() -> BlobCache:
    return BlobCache(os.environ.get("SPARKFLAKE_CACHE") or None)
