"""A PEP 751 ``pylock.toml`` (as ``uv pip compile --format pylock.toml`` writes it) read into
wheel and sdist pins for one target: the best wheel per package by the target's tag order."""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from packaging.markers import InvalidMarker, Marker
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from ..core.errors import CheckFailed, InputError
from ..core.records import (
    InvalidField,
    check_keys,
    describe,
    join_path,
    prefixed,
    read_toml,
    require_filename,
    require_sha256_hex,
    require_size,
    require_str,
    require_table,
    require_url,
)
from .pins import SdistPin, WheelPin, sdist_input_name
from .target import InstallTarget

_PYLOCK_TOP_KEYS = (
    "lock-version",
    "environments",
    "requires-python",
    "extras",
    "dependency-groups",
    "default-groups",
    "created-by",
    "packages",
    "tool",
)


_PYLOCK_PACKAGE_KEYS = (
    "name",
    "version",
    "marker",
    "requires-python",
    "dependencies",
    "vcs",
    "directory",
    "archive",
    "index",
    "sdist",
    "wheels",
    "attestation-identities",
    "tool",
)


_PYLOCK_FILE_KEYS = ("name", "upload-time", "url", "path", "size", "hashes")


def read_pylock(
    path: str | os.PathLike[str], *, supported_tags: Sequence[str] | None = None
) -> list[WheelPin | SdistPin]:
    """The wheels and sdists of a PEP 751 ``pylock.toml`` as lock records.

    Only index artifacts are accepted (``vcs``, ``directory`` and ``archive`` packages are
    refused: they have no file hash to pin), each with a URL, ``size`` and a sha256 in
    ``hashes``. The file is read as a single-target lock: markers are not evaluated. When
    a package lists several wheels, ``supported_tags`` (most preferred first, e.g. from
    ``packaging.tags``) picks the best one; without it several wheels are an error.
    """
    shown = os.fspath(path)
    document = read_toml(path)
    preference = {tag: rank for rank, tag in enumerate(supported_tags or ())}
    pins: list[WheelPin | SdistPin] = []
    try:
        for package in _pylock_packages(document, preference, None):
            if not package.wheels and package.sdist is None:
                if package.wheels_listed and preference:
                    raise InvalidField(
                        join_path(package.where, "wheels"),
                        "no wheel runs on the target and there is no sdist",
                    )
                raise InvalidField(package.where, "a package needs wheels or an sdist")
            if len(package.wheels) > 1:
                raise InvalidField(
                    join_path(package.where, "wheels"),
                    f"{len(package.wheels)} wheels for one package; pass the target's supported "
                    "tags to choose one",
                )
            pins.extend(package.wheels)
            if package.sdist is not None:
                pins.append(package.sdist)
    except InvalidField as error:
        raise InputError(f"{shown}: {error.field_path}: {error.problem}") from None
    return pins


def resolved_pins(
    document: Mapping[str, Any], source: str, *, target: InstallTarget, sdist_names: Sequence[str]
) -> list[WheelPin | SdistPin]:
    """uv's pylock for ``target`` (``uv pip compile --format pylock.toml``) as the lock's pins:
    of every package whose marker holds on the target, the wheel the target's tag order
    prefers (sorted by name), then the sdists ``sdist_names`` ask for (input names ending
    in ``-sdist``). A package with no wheel for the target is refused: building an sdist
    would run a build backend for the target, which this pipeline never does."""
    preference = {str(tag): rank for rank, tag in enumerate(target.supported_tags)}
    environment = dict(target.marker_environment()) | {"extra": ""}
    try:
        packages = _pylock_packages(document, preference, environment)
    except InvalidField as error:
        raise InputError(f"{source}: {error.field_path}: {error.problem}") from None
    wheels = [package.wheels[0] for package in packages if package.wheels]
    refused = [f"{package.name} {package.version}" for package in packages if not package.wheels]
    if refused:
        raise CheckFailed(
            f"{source}: no wheel fits {target.platform} cp{target.python_version[0]}{target.python_version[1]} "
            f"(manylinux ≤ {target.glibc[0]}.{target.glibc[1]}) for: {', '.join(refused)}; "
            "sdists are not built (that would run a build for the target)",
            check_id="wheel-tags",
        )
    wanted = set(sdist_names)
    sdists = [p.sdist for p in packages if p.sdist is not None and p.sdist.name in wanted]
    missing = wanted - {sdist.name for sdist in sdists}
    if missing:
        raise InputError(f"no sdist on the index for: {', '.join(sorted(missing))}", check_id="python-resolve")
    return [*sorted(wheels, key=lambda pin: pin.name), *sdists]


@dataclass(frozen=True)
class _PylockPackage:
    """One ``[[packages]]`` table: its wheels (only the one the target prefers, or none,
    when the target's tags are given) and its sdist."""

    where: str
    name: str
    version: str
    wheels: list[WheelPin]
    wheels_listed: int
    sdist: SdistPin | None


def _pylock_packages(
    document: Mapping[str, Any],
    preference: Mapping[str, int],
    marker_environment: Mapping[str, str] | None,
) -> list[_PylockPackage]:
    """The packages of a pylock document, each checked whole; with ``marker_environment``
    those whose marker does not hold there are left out, without it markers are not read
    and a name may stand once only."""
    check_keys(document, "", ("lock-version", "created-by", "packages"), _PYLOCK_TOP_KEYS)
    lock_version = document["lock-version"]
    if not isinstance(lock_version, str) or not re.fullmatch(r"1\.[0-9]+", lock_version):
        raise InvalidField("lock-version", f'expected "1.x", got {describe(lock_version)}')
    packages = document["packages"]
    if not isinstance(packages, list):
        raise InvalidField("packages", f"expected an array of tables, got {describe(packages)}")
    found: list[_PylockPackage] = []
    first_index: dict[str, int] = {}
    for index, package in enumerate(packages):
        where = f"packages[{index}]"
        package = require_table(where, package)
        check_keys(package, where, ("name",), _PYLOCK_PACKAGE_KEYS)
        if marker_environment is not None and not _marker_holds(package, where, marker_environment):
            continue
        for unsupported in ("vcs", "directory", "archive"):
            if unsupported in package:
                raise InvalidField(
                    join_path(where, unsupported),
                    "only index wheels and sdists can be pinned (no file hash for this source)",
                )
        name = canonicalize_name(require_str(join_path(where, "name"), package["name"]))
        if name in first_index:
            unread = "" if marker_environment is not None else (
                ": markers are not evaluated, resolve the pylock for one target"
            )
            raise InvalidField(
                join_path(where, "name"),
                f"{describe(name)} again (first at packages[{first_index[name]}]){unread}",
            )
        first_index[name] = index
        if "version" not in package:
            raise InvalidField(join_path(where, "version"), "missing required key")
        version = require_str(join_path(where, "version"), package["version"])
        wheels_raw = package.get("wheels", [])
        if not isinstance(wheels_raw, list):
            raise InvalidField(
                join_path(where, "wheels"),
                f"expected an array of tables, got {describe(wheels_raw)}",
            )
        wheels = [
            _pylock_wheel(entry, f"{where}.wheels[{w}]", name, version)
            for w, entry in enumerate(wheels_raw)
        ]
        sdist = None
        if "sdist" in package:
            sdist = _pylock_sdist(package["sdist"], f"{where}.sdist", name, version)
        best = _best_wheels(wheels, preference) if preference else wheels
        found.append(_PylockPackage(where, name, version, best, len(wheels), sdist))
    return found


def _marker_holds(package: Mapping[str, Any], where: str, environment: Mapping[str, str]) -> bool:
    if "marker" not in package:
        return True
    text = require_str(join_path(where, "marker"), package["marker"])
    try:
        return Marker(text).evaluate(dict(environment))
    except InvalidMarker as exc:
        raise InvalidField(join_path(where, "marker"), str(exc)) from None


def _best_wheels(wheels: list[WheelPin], preference: Mapping[str, int]) -> list[WheelPin]:
    """The one most preferred wheel that runs on the target (first listed on a tie), or
    none when no wheel does."""
    ranked = [
        (min(preference[tag] for tag in wheel.tags if tag in preference), position, wheel)
        for position, wheel in enumerate(wheels)
        if any(tag in preference for tag in wheel.tags)
    ]
    if not ranked:
        return []
    return [min(ranked, key=lambda entry: (entry[0], entry[1]))[2]]


class _DistributionFile(TypedDict):
    """The fields a wheel pin and an sdist pin share: the package's version, and what its
    pylock wheel or sdist table gives."""

    version: str
    filename: str
    sha256: str
    size: int
    urls: tuple[str, ...]


def _pylock_file(table: object, where: str, version: str) -> _DistributionFile:
    """The pin fields of a pylock wheel/sdist table, of a package at ``version``."""
    table = require_table(where, table)
    check_keys(table, where, ("hashes",), _PYLOCK_FILE_KEYS)
    if "url" not in table:
        raise InvalidField(
            join_path(where, "url"), "missing required key (local paths cannot be pinned)"
        )
    url = require_url(join_path(where, "url"), table["url"])
    if "size" not in table:
        raise InvalidField(join_path(where, "size"), "missing required key")
    size = require_size(join_path(where, "size"), table["size"])
    hashes = require_table(join_path(where, "hashes"), table["hashes"])
    if "sha256" not in hashes:
        raise InvalidField(join_path(join_path(where, "hashes"), "sha256"), "missing required key")
    sha256 = require_sha256_hex(join_path(join_path(where, "hashes"), "sha256"), hashes["sha256"])
    for algorithm, value in hashes.items():
        require_str(join_path(join_path(where, "hashes"), algorithm), value)
    if "name" in table:
        filename = require_filename(join_path(where, "name"), table["name"])
    else:
        filename = url.rsplit("/", 1)[-1].split("#", 1)[0].split("?", 1)[0]
    if "upload-time" in table and not isinstance(table["upload-time"], datetime.datetime):
        raise InvalidField(join_path(where, "upload-time"), "expected a TOML datetime")
    return {"version": version, "filename": filename, "sha256": sha256, "size": size, "urls": (url,)}


def _pylock_wheel(table: object, where: str, name: str, version: str) -> WheelPin:
    file = _pylock_file(table, where, version)
    try:
        _dist, _version, _build, tags = parse_wheel_filename(file["filename"])
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise InvalidField(
            join_path(where, "name"), f"not a valid wheel file name: {exc}"
        ) from None
    try:
        return WheelPin(name=name, tags=tuple(sorted(str(tag) for tag in tags)), **file)
    except InvalidField as error:
        raise prefixed(where, error) from None


def _pylock_sdist(table: object, where: str, name: str, version: str) -> SdistPin:
    file = _pylock_file(table, where, version)
    try:
        return SdistPin(name=sdist_input_name(name), **file)
    except InvalidField as error:
        raise prefixed(where, error) from None
