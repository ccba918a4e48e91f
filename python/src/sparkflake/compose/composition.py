"""Stage 1 of a build: the composition. The profile, its locks, the input that plays each role,
the patch set and the lock's assembly policy, checked against each other; a role naming an
input the locks lack is refused here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from ..core.errors import CheckFailed, InputError
from ..lock.pins import DebPin, FilePin, GitPin, Lock, OciPin, Pin, SdistPin, WheelPin
from ..lock.profile_locks import check_against_locks, input_for, load_locks
from ..profile.lookup import profile_path
from ..profile.model import Profile
from ..profile.profile_file import read_profile
from . import generated
from .locked_inputs import load_policy, policy_path_for
from .patches import PatchSet, load_patch_set
from .python_env import CollisionRule, RecordWaiver
from .source_packages import SOURCE_PACKAGES, SourcePackageRole

OVERLAY_PACKAGE = "vllm"
REPO_PATCH_SET = ("overlays", "vllm")
PROFILE_PATCH_SET = "patches"


@dataclass(frozen=True)
class Composition:
    """Everything one build of a profile is made from, resolved from its locks before any
    byte is fetched: the pins of each role, the patch set and the accepted upstream defects."""

    profile: Profile
    locks: tuple[Lock, ...]
    lock_paths: tuple[Path, ...]
    roles: Mapping[str, Pin]
    wheels: tuple[WheelPin, ...]
    debs: tuple[DebPin, ...]
    source: SdistPin | GitPin
    patch_set: PatchSet
    patch_set_dir: Path
    patch_set_name: str  # e.g. overlays/vllm or profiles/fixture/patches (location-free)
    waivers: tuple[RecordWaiver, ...] = ()  # upstream RECORD defects accepted for exact bytes
    collisions: tuple[CollisionRule, ...] = ()  # upstream path collisions and the wheel kept
    # pure-Python packages laid over their wheels from git sources (b12x, sparkcache)
    package_sources: tuple[tuple[SourcePackageRole, WheelPin, GitPin], ...] = ()

    @property
    def vllm_wheel(self) -> WheelPin:
        """The vLLM wheel (``load_composition`` refused any other kind for the role)."""
        wheel = self.roles["vllm_wheel"]
        assert isinstance(wheel, WheelPin)
        return wheel

    @property
    def nccl(self) -> WheelPin | SdistPin | DebPin | FilePin:
        """The NCCL input, a file that is or holds the library (``load_composition`` refused
        a git or OCI input for the role)."""
        pin = self.roles["nccl"]
        assert not isinstance(pin, (GitPin, OciPin))
        return pin

    def git_pins(self) -> list[GitPin]:
        pins = [self.source] if isinstance(self.source, GitPin) else []
        return pins + [source for _role, _wheel, source in self.package_sources]

    @property
    def platform(self) -> str:
        return self.profile.platform


def find_repo_root(start: Path) -> Path:
    for directory in (start, *start.parents):
        if (directory / Path(*REPO_PATCH_SET) / "patches.toml").is_file():
            return directory
    raise InputError(f"no {'/'.join(REPO_PATCH_SET)}/patches.toml above {start}: not inside a sparkflake checkout")


def load_composition(name_or_path: str | os.PathLike[str], profiles_dir: str | os.PathLike[str] | None = None) -> Composition:
    """The profile, its locks and every input it builds from, checked against each other."""
    path = profile_path(name_or_path, profiles_dir)
    profile = read_profile(path)
    locks = load_locks(profile)
    check_against_locks(profile, locks)
    roles = {role: input_for(profile, role, locks) for role in profile.inputs}
    for role in ("vllm_wheel", "vllm_source", *{r for r in generated.ROLE_LABELS.values()}):
        if role not in roles:
            raise InputError(f"{path}: inputs.{role}: the composition needs this role")
    vllm_wheel = roles["vllm_wheel"]
    source = roles["vllm_source"]
    if not isinstance(vllm_wheel, WheelPin):
        raise InputError(f"{path}: inputs.vllm_wheel: {vllm_wheel.name} is a {vllm_wheel.kind} input, expected a wheel")
    if not isinstance(source, (SdistPin, GitPin)):
        raise InputError(f"{path}: inputs.vllm_source: {source.name} is a {source.kind} input, expected an sdist or git input")
    nccl = roles["nccl"]
    if isinstance(nccl, (GitPin, OciPin)):  # its sha256 labels the image: the library's bytes
        raise InputError(f"{path}: inputs.nccl: {nccl.name} is a {nccl.kind} input, expected a wheel or a file input")
    if isinstance(source, SdistPin) and source.version != vllm_wheel.version:
        raise InputError(
            f"{path}: inputs.vllm_source: sdist version {source.version} differs from the wheel's {vllm_wheel.version}"
        )
    package_sources = []
    for package_role in SOURCE_PACKAGES:
        if package_role.source_role not in roles:
            continue
        over, under = roles[package_role.source_role], roles.get(package_role.wheel_role)
        if not isinstance(over, GitPin):
            raise InputError(f"{path}: inputs.{package_role.source_role}: {over.name} is a {over.kind} input, expected a git input")
        if not isinstance(under, WheelPin):
            raise InputError(f"{path}: inputs.{package_role.wheel_role}: the {package_role.package} source is laid over this role's wheel")
        package_sources.append((package_role, under, over))
    wheels: dict[str, WheelPin] = {}
    debs: dict[str, DebPin] = {}
    for lock in locks:
        for pin in lock.inputs:
            if isinstance(pin, WheelPin):
                wheels.setdefault(str(canonicalize_name(pin.name)), pin)
            elif isinstance(pin, DebPin):
                debs.setdefault(pin.package, pin)
    absent = {str(canonicalize_name(name)) for name in profile.absent.distributions}
    locked_absent = sorted(absent & set(wheels))
    if locked_absent:
        raise CheckFailed(
            f"{path}: absent.distributions names {', '.join(locked_absent)} but the lock pins "
            "them; the image would contain them",
            check_id="absences",
        )
    # The lock's assembly policy (docs/inputs.md): RECORD waivers and collision rules.
    policies = [load_policy(policy_path_for(lock_path), lock) for lock, lock_path in zip(locks, profile.lock_paths(), strict=True)]
    profile_dir = profile.directory
    local_patches = profile_dir / PROFILE_PATCH_SET
    if (local_patches / "patches.toml").is_file():
        patch_set_dir, patch_set_name = local_patches, f"profiles/{profile.name}/{PROFILE_PATCH_SET}"
    else:
        patch_set_dir = find_repo_root(profile_dir.resolve()).joinpath(*REPO_PATCH_SET)
        patch_set_name = "/".join(REPO_PATCH_SET)
    return Composition(
        profile=profile,
        locks=locks,
        lock_paths=profile.lock_paths(),
        roles=roles,
        wheels=tuple(sorted(wheels.values(), key=lambda w: w.name)),
        debs=tuple(sorted(debs.values(), key=lambda d: d.package)),
        source=source,
        patch_set=load_patch_set(patch_set_dir),
        patch_set_dir=patch_set_dir,
        patch_set_name=patch_set_name,
        waivers=tuple(waiver for policy in policies for waiver in policy.waivers),
        collisions=tuple(rule for policy in policies for rule in policy.collisions),
        package_sources=tuple(package_sources),
    )
