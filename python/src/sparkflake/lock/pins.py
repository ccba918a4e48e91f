"""The lock: every input of a composition pinned by hash.

A lock file is TOML (``schema = 1``, a ``[target]`` table, ``[[inputs]]`` tables each with
a ``kind``). Each kind is one frozen dataclass: ``WheelPin``, ``SdistPin``, ``DebPin``,
``GitPin``, ``OciPin``, ``FilePin``. Records validate themselves on construction, so a
``Lock`` in memory is always valid; parsing adds the file name and the place inside the
file to every message (``glm53.lock: inputs[3].sha256: expected 64 lowercase hex digits,
got "ABC"``). Serialization is canonical: fixed key order per kind (``FIELD_ORDER``: ``kind``, then the fields as declared),
inputs sorted by (kind, name), the writer in ``sparkflake.core.canonical_toml``.

docs/lock-format.md describes the format for people.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from packaging import tags as packaging_tags
from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..core.blob_cache import Artifact
from ..core.errors import InputError
from ..core.records import (
    OCI_REPOSITORY_PATTERN,
    InvalidField,
    describe,
    freeze_field,
    freeze_str_tuple,
    keys_in_field_order,
    require_archive_url,
    require_deb_package,
    require_filename,
    require_git_url,
    require_input_name,
    require_match,
    require_oci_digest,
    require_platform,
    require_sha1_hex,
    require_sha256_hex,
    require_size,
    require_sri_sha256,
    require_str,
    require_url,
)
from ..oci.media_types import TAG_PATTERN

SCHEMA_VERSION = 1

_PYTHON_VERSION = re.compile(r"^3\.[0-9]{1,2}(\.[0-9]{1,3})?$")
_GLIBC_VERSION = re.compile(r"^2\.[0-9]{1,3}$")
_DEB_ARCH = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# Debian policy 5.6.12: [epoch:]upstream[-revision]; characters only, the ordering is dpkg's
_DEB_VERSION = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$")
_WHEEL_TAG = re.compile(r"^[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+$")
_WHEEL_ARCHITECTURES = {"arm64": "aarch64", "amd64": "x86_64", "386": "i686"}
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


@keys_in_field_order()
@dataclass(frozen=True)
class Target:
    """What the lock was resolved for: one platform, one CPython, one glibc."""

    platform: str  # OCI platform, e.g. "linux/arm64"
    python: str  # CPython version of the OS base, e.g. "3.11" or "3.11.2"
    glibc: str  # glibc of the OS base, e.g. "2.36"; wheels up to manylinux_2_<minor>

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        require_platform("platform", self.platform)
        require_match("python", self.python, _PYTHON_VERSION, 'a CPython version like "3.11"')
        require_match("glibc", self.glibc, _GLIBC_VERSION, 'a glibc version like "2.36"')

    @property
    def architecture(self) -> str:
        return self.platform.split("/")[1]

    @property
    def manylinux(self) -> str:
        """The highest manylinux tag the target's glibc runs, e.g. ``manylinux_2_36``."""
        return "manylinux_" + self.glibc.replace(".", "_")

    @property
    def python_tag(self) -> str:
        major, minor = self.python.split(".")[:2]
        return f"cp{major}{minor}"

    @property
    def wheel_architecture(self) -> str:
        """The machine name wheel platform tags use (``aarch64`` for linux/arm64)."""
        return _WHEEL_ARCHITECTURES.get(self.architecture, self.architecture)

    def supported_tags(self) -> list[str]:
        """Wheel tags the target runs, most preferred first (as pip orders them): CPython
        ABI tags, abi3, none, then pure-Python tags; platforms manylinux_2_<glibc> down to
        the oldest manylinux for the architecture, with the legacy aliases."""
        major, minor = (int(part) for part in self.python.split(".")[:2])
        arch = self.wheel_architecture
        oldest = 17 if arch in ("aarch64", "ppc64le", "s390x") else 5
        glibc_minor = int(self.glibc.split(".")[1])
        platforms: list[str] = []
        for level in range(glibc_minor, oldest - 1, -1):
            platforms.append(f"manylinux_2_{level}_{arch}")
            legacy = _LEGACY_MANYLINUX.get(level)
            if legacy is not None and (level == 17 or arch in ("x86_64", "i686")):
                platforms.append(f"{legacy}_{arch}")
        interpreter = f"cp{major}{minor}"
        ordered = [
            *packaging_tags.cpython_tags((major, minor), abis=[interpreter], platforms=platforms),
            *packaging_tags.compatible_tags(
                (major, minor), interpreter=interpreter, platforms=platforms
            ),
        ]
        return list(dict.fromkeys(str(tag) for tag in ordered))


@keys_in_field_order("kind")
@dataclass(frozen=True)
class WheelPin:
    """A built distribution from a Python package index. ``name`` is the normalized
    distribution name (PEP 503); ``tags`` are the wheel's expanded compatibility tags."""

    name: str
    version: str
    filename: str
    sha256: str
    size: int
    tags: tuple[str, ...]
    urls: tuple[str, ...]

    kind: ClassVar[str] = "wheel"
    FIELD_ORDER: ClassVar[tuple[str, ...]]  # "kind", then the fields as declared

    def __post_init__(self) -> None:
        name, filename = _require_distribution_file(self)
        wheel_tag = lambda p, v: require_match(p, v, _WHEEL_TAG, "a wheel tag")  # noqa: E731
        tags = freeze_str_tuple(self, "tags", wheel_tag, non_empty=True)
        freeze_str_tuple(self, "urls", require_url, non_empty=True)
        try:
            dist, file_version, _build, file_tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion) as exc:
            raise InvalidField("filename", f"not a valid wheel file name: {exc}") from None
        if dist != name:
            raise InvalidField(
                "name",
                f"expected the normalized distribution name of the file, {describe(str(dist))}, "
                f"got {describe(name)}",
            )
        _require_file_version(self, file_version)
        if {str(tag) for tag in file_tags} != set(tags):
            expected = sorted(str(tag) for tag in file_tags)
            raise InvalidField("tags", f"file name gives the tags {expected}, got {list(tags)}")

    def tag_set(self) -> frozenset[Tag]:
        return frozenset(Tag(*tag.split("-")) for tag in self.tags)


@keys_in_field_order("kind")
@dataclass(frozen=True)
class SdistPin:
    """A source distribution. ``name`` is ``<normalized distribution name>-sdist`` so that a
    wheel and an sdist of the same distribution can sit in one lock."""

    name: str
    version: str
    filename: str
    sha256: str
    size: int
    urls: tuple[str, ...]

    kind: ClassVar[str] = "sdist"
    FIELD_ORDER: ClassVar[tuple[str, ...]]  # "kind", then the fields as declared

    def __post_init__(self) -> None:
        name, filename = _require_distribution_file(self)
        freeze_str_tuple(self, "urls", require_url, non_empty=True)
        try:
            dist, file_version = parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion) as exc:
            raise InvalidField("filename", f"not a valid sdist file name: {exc}") from None
        if name != sdist_input_name(dist):
            raise InvalidField(
                "name",
                f"expected {describe(sdist_input_name(dist))} for this file, got {describe(name)}",
            )
        _require_file_version(self, file_version)

    @property
    def distribution(self) -> str:
        return self.name.removesuffix("-sdist")


@keys_in_field_order("kind")
@dataclass(frozen=True)
class DebPin:
    """A Debian binary package. ``name`` is ``<package>:<architecture>``, as dpkg spells a
    multiarch package, so it can never collide with a Python distribution name."""

    name: str
    package: str
    version: str
    architecture: str
    sha256: str
    size: int
    urls: tuple[str, ...]

    kind: ClassVar[str] = "deb"
    FIELD_ORDER: ClassVar[tuple[str, ...]]  # "kind", then the fields as declared

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        package = require_deb_package("package", self.package)
        require_match("version", self.version, _DEB_VERSION, "a Debian version")
        architecture = require_match(
            "architecture",
            self.architecture,
            _DEB_ARCH,
            'a Debian architecture like "arm64" or "all"',
        )
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)
        freeze_str_tuple(self, "urls", require_url, non_empty=True)
        if self.name != f"{package}:{architecture}":
            raise InvalidField(
                "name",
                f"expected {describe(f'{package}:{architecture}')}, got {describe(self.name)}",
            )

    @property
    def pool_filename(self) -> str:
        """The file name in Debian's pool: the version without its epoch."""
        return f"{self.package}_{self.version.split(':', 1)[-1]}_{self.architecture}.deb"


@keys_in_field_order("kind")
@dataclass(frozen=True)
class GitPin:
    """A git repository at one commit: ``rev`` (commit id) and ``tree`` (the id of the tree
    that commit names), fetched from the first of ``urls`` that serves it; optionally
    ``nar_hash`` (SRI sha256 of the NAR of the checkout, as Nix's fetchGit records) and
    ``source_sha256`` (SparkRing's ``sparkcache-source-tree/v1`` digest of the overlaid
    package directory, the seeds' "deployable source SHA-256") and ``archive_urls`` (forge
    archives of the commit, tried when no git URL serves it). The tree id is the binding:
    ``sparkflake fetch`` admits a checkout to the cache only when it equals ``tree``."""

    name: str
    urls: tuple[str, ...]
    rev: str
    tree: str
    nar_hash: str | None = None
    source_sha256: str | None = None
    archive_urls: tuple[str, ...] = ()

    kind: ClassVar[str] = "git"
    FIELD_ORDER: ClassVar[tuple[str, ...]]  # "kind", then the fields as declared
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("archive_urls",)  # written only when there are some

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        freeze_str_tuple(self, "urls", require_git_url, non_empty=True)
        require_sha1_hex("rev", self.rev)
        require_sha1_hex("tree", self.tree)
        if self.nar_hash is not None:
            require_sri_sha256("nar_hash", self.nar_hash)
        if self.source_sha256 is not None:
            require_sha256_hex("source_sha256", self.source_sha256)
        freeze_str_tuple(self, "archive_urls", require_archive_url, non_empty=False)


@keys_in_field_order("kind")
@dataclass(frozen=True)
class OciPin:
    """An OCI image: ``reference`` is the repository (with an optional tag, never a
    digest); each digest names its kind. At least an index or a manifest digest."""

    name: str
    reference: str
    index_digest: str | None = None
    manifest_digest: str | None = None
    config_digest: str | None = None

    kind: ClassVar[str] = "oci"
    FIELD_ORDER: ClassVar[tuple[str, ...]]  # "kind", then the fields as declared

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        reference = require_str("reference", self.reference)
        if "@" in reference:
            raise InvalidField(
                "reference",
                f"put digests in index_digest/manifest_digest, not in the reference; got {describe(reference)}",
            )
        repository, tag = _split_oci_tag(reference)
        if not OCI_REPOSITORY_PATTERN.fullmatch(repository) or (
            tag is not None and not TAG_PATTERN.fullmatch(tag)
        ):
            raise InvalidField(
                "reference",
                f"expected an image reference like registry/name[:tag], got {describe(reference)}",
            )
        for key in ("index_digest", "manifest_digest", "config_digest"):
            value = getattr(self, key)
            if value is not None:
                require_oci_digest(key, value)
        if self.index_digest is None and self.manifest_digest is None:
            raise InvalidField(
                "manifest_digest", "an oci input needs index_digest or manifest_digest"
            )

    @property
    def repository(self) -> str:
        return _split_oci_tag(self.reference)[0]


@keys_in_field_order("kind")
@dataclass(frozen=True)
class FilePin:
    """A single file. ``urls`` may be empty when the operator supplies the file (for
    instance a patched library); ``how_to_supply`` then says how, and is required."""

    name: str
    sha256: str
    size: int
    urls: tuple[str, ...] = ()
    how_to_supply: str | None = None

    kind: ClassVar[str] = "file"
    FIELD_ORDER: ClassVar[tuple[str, ...]]  # "kind", then the fields as declared

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)
        freeze_str_tuple(self, "urls", require_url, non_empty=False)
        if self.how_to_supply is not None:
            require_str("how_to_supply", self.how_to_supply, free_text=True)
        elif not self.urls:
            raise InvalidField(
                "how_to_supply", "a file without urls is operator supplied and needs how_to_supply"
            )


Pin = WheelPin | SdistPin | DebPin | GitPin | OciPin | FilePin
PinT = TypeVar("PinT", WheelPin, SdistPin, DebPin, GitPin, OciPin, FilePin)

PIN_TYPES: dict[str, type[Any]] = {
    cls.kind: cls for cls in (DebPin, FilePin, GitPin, OciPin, SdistPin, WheelPin)
}
KINDS: tuple[str, ...] = tuple(sorted(PIN_TYPES))


def pin_artifact(pin: WheelPin | SdistPin | DebPin | FilePin) -> Artifact:
    """The file a pin names, as the download cache knows it: a deb by its pool file name, an
    operator's file by its lock name, a wheel or an sdist by its own file name."""
    if isinstance(pin, DebPin):
        filename = pin.pool_filename
    elif isinstance(pin, FilePin):
        filename = pin.name
    else:
        filename = pin.filename
    return Artifact(pin.name, filename, pin.sha256, pin.size, tuple(pin.urls))


def sdist_input_name(distribution: str) -> str:
    """The lock name of a distribution's sdist: ``<normalized name>-sdist``."""
    return f"{canonicalize_name(distribution)}-sdist"


def sort_key(pin: Pin) -> tuple[str, str]:
    return (pin.kind, pin.name)


@dataclass(frozen=True)
class Lock:
    """A whole lock: schema, target and inputs (kept sorted by (kind, name))."""

    target: Target
    inputs: tuple[Pin, ...] = ()
    schema: int = SCHEMA_VERSION
    _by_name: dict[str, Pin] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.schema != SCHEMA_VERSION or isinstance(self.schema, bool):
            raise InvalidField("schema", f"expected {SCHEMA_VERSION}, got {describe(self.schema)}")
        if not isinstance(self.target, Target):
            raise InvalidField("target", f"expected a Target, got {describe(self.target)}")
        inputs = tuple(self.inputs)
        by_name: dict[str, Pin] = {}
        for index, pin in enumerate(inputs):
            if not isinstance(pin, tuple(PIN_TYPES.values())):
                raise InvalidField(
                    f"inputs[{index}]", f"expected an input record, got {describe(pin)}"
                )
            if pin.name in by_name:
                raise InvalidField(
                    f"inputs[{index}].name",
                    f"duplicate input name {describe(pin.name)} (already used by a {by_name[pin.name].kind} input)",
                )
            by_name[pin.name] = pin
        freeze_field(self, "inputs", tuple(sorted(inputs, key=sort_key)))
        freeze_field(self, "_by_name", by_name)

    def by_name(self, name: str) -> Pin:
        try:
            return self._by_name[name]
        except KeyError:
            raise InputError(f"no input named {describe(name)} in the lock") from None

    def get(self, name: str) -> Pin | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def of_kind(self, kind: str) -> tuple[Pin, ...]:
        return tuple(pin for pin in self.inputs if pin.kind == kind)

    def pins_of(self, record: type[PinT]) -> tuple[PinT, ...]:
        """The inputs of one record type (``lock.pins_of(DebPin)``), typed as that record."""
        return tuple(pin for pin in self.inputs if isinstance(pin, record))

    def replace_input(self, pin: Pin) -> Lock:
        """A new lock with ``pin`` added, or replacing the input of the same name."""
        others = [existing for existing in self.inputs if existing.name != pin.name]
        return Lock(target=self.target, inputs=(*others, pin), schema=self.schema)


def _require_distribution_file(pin: WheelPin | SdistPin) -> tuple[str, str]:
    """What a wheel and an sdist pin both are, a Python distribution file: its lock name, PEP
    440 version, file name, sha256 and size (the name and the file name are returned)."""
    name = require_input_name("name", pin.name)
    _require_pep440("version", pin.version)
    filename = require_filename("filename", pin.filename)
    require_sha256_hex("sha256", pin.sha256)
    require_size("size", pin.size)
    return name, filename


def _require_file_version(pin: WheelPin | SdistPin, file_version: Version) -> None:
    if str(file_version) != pin.version:  # pin.version is in its normalized form
        raise InvalidField(
            "version", f"file name says {describe(str(file_version))}, got {describe(pin.version)}"
        )


def _require_pep440(path: str, value: object) -> Version:
    text = require_str(path, value)
    try:
        version = Version(text)
    except InvalidVersion:
        raise InvalidField(path, f"expected a PEP 440 version, got {describe(text)}") from None
    if str(version) != text:
        raise InvalidField(
            path, f"expected the normalized form {describe(str(version))}, got {describe(text)}"
        )
    return version


def _split_oci_tag(reference: str) -> tuple[str, str | None]:
    last_slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > last_slash:
        return reference[:colon], reference[colon + 1 :]
    return reference, None


