"""The lock: every input of a composition pinned by hash.

A lock file is TOML (``schema = 1``, a ``[target]`` table, ``[[inputs]]`` tables each with
a ``kind``). Each kind is one frozen dataclass: ``WheelPin``, ``SdistPin``, ``DebPin``,
``GitPin``, ``OciPin``, ``FilePin``. Records validate themselves on construction, so a
``Lock`` in memory is always valid; parsing adds the file name and the place inside the
file to every message (``glm53.lock: inputs[3].sha256: expected 64 lowercase hex digits,
got "ABC"``). Serialization is canonical: fixed key order per kind (``FIELD_ORDER``),
inputs sorted by (kind, name), the writer in ``sparkflake.core.canonical_toml``.

docs/lock-format.md describes the format for people.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

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

from ..core import canonical_toml
from ..core.atomic_write import write_bytes_atomic
from ..core.documents import parse_limit_error
from ..core.errors import InputError

SCHEMA_VERSION = 1

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_OCI_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_INPUT_NAME = re.compile(r"^[a-z0-9][a-z0-9._+:-]{0,199}$")
_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")
_PYTHON_VERSION = re.compile(r"^3\.[0-9]{1,2}(\.[0-9]{1,3})?$")
_GLIBC_VERSION = re.compile(r"^2\.[0-9]{1,3}$")
_DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")
_DEB_ARCH = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# Debian policy 5.6.12: [epoch:]upstream[-revision]; characters only, the ordering is dpkg's
_DEB_VERSION = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$")
_FILENAME = re.compile(r"^[^/\x00]+$")
_WHEEL_TAG = re.compile(r"^[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+$")
# OCI distribution-spec reference without tag/digest: host[:port]/path components
_OCI_REPOSITORY = re.compile(
    r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_OCI_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_WHEEL_ARCHITECTURES = {"arm64": "aarch64", "amd64": "x86_64", "386": "i686"}
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidField(InputError):
    """A record's field failed validation; ``field_path`` is relative to the record.

    Parsers catch it and re-raise with the file name and the record's place in the file;
    code that builds records directly sees ``<field path>: <problem>``.
    """

    def __init__(self, field_path: str, problem: str) -> None:
        super().__init__(f"{field_path}: {problem}")
        self.field_path = field_path
        self.problem = problem


# --------------------------------------------------------------------------- value checks


def describe(value: object) -> str:
    """How a bad value is shown in a message: strings quoted (JSON escapes), others typed."""
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        shown = json.dumps(value, ensure_ascii=False)
        return shown if len(shown) <= 90 else shown[:80] + '…"'
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def require_str(
    path: str, value: object, *, allow_empty: bool = False, free_text: bool = False
) -> str:
    """A string; identifiers refuse control characters, ``free_text`` (notes for people,
    which may span lines) takes any character."""
    if not isinstance(value, str):
        raise InvalidField(path, f"expected a string, got {describe(value)}")
    if not allow_empty and not value:
        raise InvalidField(path, "expected a non-empty string")
    if not free_text and _CONTROL.search(value):
        raise InvalidField(path, f"control characters are not allowed, got {describe(value)}")
    return value


def require_match(path: str, value: object, pattern: re.Pattern[str], expected: str) -> str:
    text = require_str(path, value, allow_empty=True)
    if not pattern.fullmatch(text):
        raise InvalidField(path, f"expected {expected}, got {describe(text)}")
    return text


def require_sha256_hex(path: str, value: object) -> str:
    return require_match(path, value, _HEX64, "64 lowercase hex digits")


def require_sha1_hex(path: str, value: object) -> str:
    return require_match(path, value, _HEX40, "40 lowercase hex digits")


def require_oci_digest(path: str, value: object) -> str:
    return require_match(path, value, _OCI_DIGEST, '"sha256:" and 64 lowercase hex digits')


def require_sri_sha256(path: str, value: object) -> str:
    """An SRI hash ``sha256-<base64 of 32 bytes>``, in its one canonical spelling."""
    text = require_str(path, value, allow_empty=True)
    expected = 'an SRI hash "sha256-" + 44 base64 characters (32 bytes)'
    algorithm, sep, encoded = text.partition("-")
    if sep != "-" or algorithm != "sha256":
        raise InvalidField(path, f"expected {expected}, got {describe(text)}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidField(path, f"expected {expected}, got {describe(text)}") from None
    if len(raw) != 32 or base64.b64encode(raw).decode("ascii") != encoded:
        raise InvalidField(path, f"expected {expected}, got {describe(text)}")
    return text


def require_size(path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(path, f"expected a non-negative integer, got {describe(value)}")
    if value < 0:
        raise InvalidField(path, f"expected a non-negative integer, got {describe(value)}")
    return value


def require_url(path: str, value: object) -> str:
    text = require_str(path, value, allow_empty=True)
    if text.startswith("https://"):
        rest = text[len("https://") :]
        if not rest or rest.startswith("/"):
            raise InvalidField(path, f"expected an https:// URL with a host, got {describe(text)}")
    elif text.startswith("file://"):
        if not text[len("file://") :].startswith("/"):
            raise InvalidField(path, f"expected a file:///absolute/path URL, got {describe(text)}")
    else:
        raise InvalidField(path, f"expected an https:// or file:// URL, got {describe(text)}")
    if any(char.isspace() for char in text):
        raise InvalidField(path, f"URLs may not contain whitespace, got {describe(text)}")
    return text


# git's own transports, spelled as URLs (no scp-like "host:path", no "ext::" or other
# remote helpers); plain http:// and git:// are accepted because the commit and tree ids,
# not the transport, bind what is fetched
_GIT_URL = re.compile(r"^(https?|git|ssh)://[^/\s]+/\S*$|^file:///\S*$")


def require_git_url(path: str, value: object) -> str:
    text = require_str(path, value, allow_empty=True)
    if not _GIT_URL.fullmatch(text):
        raise InvalidField(
            path,
            "expected a git URL https://, http://, git://, ssh://host/path or file:///absolute, "
            f"got {describe(text)}",
        )
    return text


_ARCHIVE_URL = re.compile(r"^https?://[^/\s]+/\S*$|^file:///\S*$")


def require_archive_url(path: str, value: object) -> str:
    """A forge archive of a commit (a .tar.gz over https, http or file): bound, like the
    git URLs, by the tree id of what it holds, not by its transport."""
    text = require_str(path, value, allow_empty=True)
    if not _ARCHIVE_URL.fullmatch(text):
        raise InvalidField(path, f"expected an https://, http:// or file:/// URL of a .tar.gz archive, got {describe(text)}")
    return text


def require_str_tuple(
    path: str, value: object, item_check: Callable[[str, object], str], *, non_empty: bool
) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise InvalidField(path, f"expected an array of strings, got {describe(value)}")
    if non_empty and not value:
        raise InvalidField(path, "expected at least one element")
    checked = tuple(item_check(f"{path}[{index}]", item) for index, item in enumerate(value))
    seen: set[str] = set()
    for index, item in enumerate(checked):
        if item in seen:
            raise InvalidField(f"{path}[{index}]", f"duplicate element {describe(item)}")
        seen.add(item)
    return checked


def require_input_name(path: str, value: object) -> str:
    return require_match(
        path, value, _INPUT_NAME, "a lowercase name of [a-z0-9._+:-], starting with [a-z0-9]"
    )


def require_filename(path: str, value: object) -> str:
    text = require_match(path, value, _FILENAME, "a file name without '/'")
    if text in (".", ".."):
        raise InvalidField(path, f"expected a file name, got {describe(text)}")
    return text


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Target:
    """What the lock was resolved for: one platform, one CPython, one glibc."""

    platform: str  # OCI platform, e.g. "linux/arm64"
    python: str  # CPython version of the OS base, e.g. "3.11" or "3.11.2"
    glibc: str  # glibc of the OS base, e.g. "2.36"; wheels up to manylinux_2_<minor>

    FIELD_ORDER: ClassVar[tuple[str, ...]] = ("platform", "python", "glibc")

    def __post_init__(self) -> None:
        require_match("platform", self.platform, _PLATFORM, 'an OCI platform like "linux/arm64"')
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
    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "version",
        "filename",
        "sha256",
        "size",
        "tags",
        "urls",
    )

    def __post_init__(self) -> None:
        name = require_input_name("name", self.name)
        version = _require_pep440("version", self.version)
        filename = require_filename("filename", self.filename)
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)
        tags = require_str_tuple(
            "tags",
            self.tags,
            lambda p, v: require_match(p, v, _WHEEL_TAG, "a wheel tag"),
            non_empty=True,
        )
        _freeze(self, "tags", tags)
        _freeze(self, "urls", require_str_tuple("urls", self.urls, require_url, non_empty=True))
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
        if str(file_version) != str(version):
            raise InvalidField(
                "version",
                f"file name says {describe(str(file_version))}, got {describe(self.version)}",
            )
        if {str(tag) for tag in file_tags} != set(tags):
            expected = sorted(str(tag) for tag in file_tags)
            raise InvalidField("tags", f"file name gives the tags {expected}, got {list(tags)}")

    def tag_set(self) -> frozenset[Tag]:
        return frozenset(Tag(*tag.split("-")) for tag in self.tags)


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
    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "version",
        "filename",
        "sha256",
        "size",
        "urls",
    )

    def __post_init__(self) -> None:
        name = require_input_name("name", self.name)
        version = _require_pep440("version", self.version)
        filename = require_filename("filename", self.filename)
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)
        _freeze(self, "urls", require_str_tuple("urls", self.urls, require_url, non_empty=True))
        try:
            dist, file_version = parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion) as exc:
            raise InvalidField("filename", f"not a valid sdist file name: {exc}") from None
        if name != sdist_input_name(dist):
            raise InvalidField(
                "name",
                f"expected {describe(sdist_input_name(dist))} for this file, got {describe(name)}",
            )
        if str(file_version) != str(version):
            raise InvalidField(
                "version",
                f"file name says {describe(str(file_version))}, got {describe(self.version)}",
            )

    @property
    def distribution(self) -> str:
        return self.name.removesuffix("-sdist")


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
    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "package",
        "version",
        "architecture",
        "sha256",
        "size",
        "urls",
    )

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        package = require_match("package", self.package, _DEB_PACKAGE, "a Debian package name")
        require_match("version", self.version, _DEB_VERSION, "a Debian version")
        architecture = require_match(
            "architecture",
            self.architecture,
            _DEB_ARCH,
            'a Debian architecture like "arm64" or "all"',
        )
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)
        _freeze(self, "urls", require_str_tuple("urls", self.urls, require_url, non_empty=True))
        if self.name != f"{package}:{architecture}":
            raise InvalidField(
                "name",
                f"expected {describe(f'{package}:{architecture}')}, got {describe(self.name)}",
            )


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
    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "urls",
        "rev",
        "tree",
        "nar_hash",
        "source_sha256",
        "archive_urls",
    )
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("archive_urls",)  # written only when there are some

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        _freeze(self, "urls", require_str_tuple("urls", self.urls, require_git_url, non_empty=True))
        require_sha1_hex("rev", self.rev)
        require_sha1_hex("tree", self.tree)
        if self.nar_hash is not None:
            require_sri_sha256("nar_hash", self.nar_hash)
        if self.source_sha256 is not None:
            require_sha256_hex("source_sha256", self.source_sha256)
        _freeze(self, "archive_urls", require_str_tuple("archive_urls", self.archive_urls, require_archive_url, non_empty=False))


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
    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "reference",
        "index_digest",
        "manifest_digest",
        "config_digest",
    )

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        reference = require_str("reference", self.reference)
        if "@" in reference:
            raise InvalidField(
                "reference",
                f"put digests in index_digest/manifest_digest, not in the reference; got {describe(reference)}",
            )
        repository, tag = _split_oci_tag(reference)
        if not _OCI_REPOSITORY.fullmatch(repository) or (
            tag is not None and not _OCI_TAG.fullmatch(tag)
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
    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "kind",
        "name",
        "sha256",
        "size",
        "urls",
        "how_to_supply",
    )

    def __post_init__(self) -> None:
        require_input_name("name", self.name)
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)
        _freeze(self, "urls", require_str_tuple("urls", self.urls, require_url, non_empty=False))
        if self.how_to_supply is not None:
            require_str("how_to_supply", self.how_to_supply, free_text=True)
        elif not self.urls:
            raise InvalidField(
                "how_to_supply", "a file without urls is operator supplied and needs how_to_supply"
            )

    @property
    def operator_supplied(self) -> bool:
        return not self.urls


Pin = WheelPin | SdistPin | DebPin | GitPin | OciPin | FilePin

PIN_TYPES: dict[str, type[Any]] = {
    cls.kind: cls for cls in (DebPin, FilePin, GitPin, OciPin, SdistPin, WheelPin)
}
KINDS: tuple[str, ...] = tuple(sorted(PIN_TYPES))


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
        _freeze(self, "inputs", tuple(sorted(inputs, key=sort_key)))
        _freeze(self, "_by_name", by_name)

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

    def replace_input(self, pin: Pin) -> Lock:
        """A new lock with ``pin`` added, or replacing the input of the same name."""
        others = [existing for existing in self.inputs if existing.name != pin.name]
        return Lock(target=self.target, inputs=(*others, pin), schema=self.schema)


# --------------------------------------------------------------------------- serialization


def pin_to_dict(pin: Pin) -> dict[str, Any]:
    """The canonical key order of one input; None-valued optional keys are left out."""
    document: dict[str, Any] = {}
    for key in pin.FIELD_ORDER:
        value = pin.kind if key == "kind" else getattr(pin, key)
        if value is None or (value == () and key in getattr(pin, "OMIT_EMPTY", ())):
            continue
        document[key] = list(value) if isinstance(value, tuple) else value
    return document


def lock_to_dict(lock: Lock) -> dict[str, Any]:
    """The lock as plain data in canonical order (also its JSON form)."""
    return {
        "schema": lock.schema,
        "target": {key: getattr(lock.target, key) for key in Target.FIELD_ORDER},
        "inputs": [pin_to_dict(pin) for pin in lock.inputs],
    }


def dump_lock(lock: Lock) -> str:
    """Canonical TOML text: byte-identical for equal locks."""
    return canonical_toml.dumps(lock_to_dict(lock))


def write_lock(path: str | os.PathLike[str], lock: Lock) -> None:
    write_bytes_atomic(path, dump_lock(lock).encode("utf-8"))


# --------------------------------------------------------------------------- parsing


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """tomllib with errors that name the file (and line/column for syntax errors)."""
    shown = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except IsADirectoryError:
        raise InputError(f"{shown}: is a directory, expected a TOML file") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise InputError(f"{shown}: is a directory, expected a TOML file")
        raise InputError(f"{shown}: not a regular file, expected a TOML file")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        try:
            raw = handle.read()
        except OSError as exc:
            raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    return parse_toml_text(raw, shown)


def parse_toml_text(raw: bytes | str, shown: str) -> dict[str, Any]:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{shown}: not UTF-8 text (byte offset {exc.start})") from None
    else:
        text = raw
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib says "(at line L, column C)", or "(at end of document)" for a truncated
        # file: give the end's line and column too, so every syntax error has a place
        message = str(exc)
        if message.endswith("(at end of document)"):
            line = text.count("\n") + 1
            column = len(text) - (text.rfind("\n") + 1) + 1
            message = message.removesuffix("(at end of document)") + (
                f"(at line {line}, column {column}: end of document)"
            )
        raise InputError(f"{shown}: invalid TOML: {message}") from None
    except (RecursionError, ValueError) as exc:  # Python's limits, not TOML's syntax
        raise parse_limit_error(exc, text, shown) from None


def check_keys(
    table: Mapping[str, Any],
    where: str,
    required: Iterable[str],
    optional: Iterable[str] = (),
) -> None:
    """Refuse unknown keys and report the first missing required key, each by its path."""
    required = tuple(required)
    known = set(required) | set(optional)
    for key in table:
        if key not in known:
            raise InvalidField(
                join_path(where, key), f"unknown key (expected one of: {', '.join(sorted(known))})"
            )
    for key in required:
        if key not in table:
            raise InvalidField(join_path(where, key), "missing required key")


def require_table(path: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidField(path, f"expected a table, got {describe(value)}")
    return value


def join_path(where: str, key: str) -> str:
    """``where.key``; a key that is not bare TOML is shown quoted (JSON escapes)."""
    shown_key = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)
    return f"{where}.{shown_key}" if where else shown_key


def _prefixed(where: str, error: InvalidField) -> InvalidField:
    return InvalidField(f"{where}.{error.field_path}" if where else error.field_path, error.problem)


def pin_from_dict(table: Mapping[str, Any], where: str = "") -> Pin:
    """One ``[[inputs]]`` table to its record; errors carry ``where`` (e.g. ``inputs[3]``)."""
    table = require_table(where or "input", table)
    kind = table.get("kind")
    if kind is None:
        raise InvalidField(join_path(where, "kind"), "missing required key")
    if not isinstance(kind, str) or kind not in PIN_TYPES:
        raise InvalidField(
            join_path(where, "kind"), f"expected one of {', '.join(KINDS)}, got {describe(kind)}"
        )
    cls = PIN_TYPES[kind]
    optional = {
        f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING
    }
    required = [key for key in cls.FIELD_ORDER if key not in optional]
    check_keys(table, where, required, optional)
    arguments = {key: table[key] for key in cls.FIELD_ORDER if key != "kind" and key in table}
    for key, value in arguments.items():
        if isinstance(value, list):
            arguments[key] = tuple(value)
    try:
        return cls(**arguments)
    except InvalidField as error:
        raise _prefixed(where, error) from None


def lock_from_dict(document: Mapping[str, Any]) -> Lock:
    """A parsed TOML document to a ``Lock``; errors are ``InvalidField`` with a path."""
    check_keys(document, "", ("schema", "target"), ("inputs",))
    schema = document["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise InvalidField(
            "schema", f"expected the integer {SCHEMA_VERSION}, got {describe(schema)}"
        )
    if schema != SCHEMA_VERSION:
        raise InvalidField(
            "schema", f"this sparkflake reads schema {SCHEMA_VERSION}, got {describe(schema)}"
        )
    target_table = require_table("target", document["target"])
    check_keys(target_table, "target", Target.FIELD_ORDER)
    try:
        target = Target(**{key: target_table[key] for key in Target.FIELD_ORDER})
    except InvalidField as error:
        raise _prefixed("target", error) from None
    raw_inputs = document.get("inputs", [])
    if not isinstance(raw_inputs, list):
        raise InvalidField(
            "inputs", f"expected an array of tables ([[inputs]]), got {describe(raw_inputs)}"
        )
    pins = [pin_from_dict(entry, f"inputs[{index}]") for index, entry in enumerate(raw_inputs)]
    seen: dict[str, int] = {}
    for index, pin in enumerate(pins):
        if pin.name in seen:
            raise InvalidField(
                f"inputs[{index}].name",
                f"duplicate input name {describe(pin.name)} (first used by inputs[{seen[pin.name]}])",
            )
        seen[pin.name] = index
    return Lock(target=target, inputs=tuple(pins), schema=schema)


def parse_lock(text: str | bytes, shown: str = "<lock>") -> Lock:
    """Parse lock text; every error is an ``InputError`` naming ``shown`` and the place."""
    document = parse_toml_text(text, shown)
    try:
        return lock_from_dict(document)
    except InvalidField as error:
        raise InputError(f"{shown}: {error.field_path}: {error.problem}") from None


def load_lock(path: str | os.PathLike[str]) -> Lock:
    shown = os.fspath(path)
    document = read_toml(path)
    try:
        return lock_from_dict(document)
    except InvalidField as error:
        raise InputError(f"{shown}: {error.field_path}: {error.problem}") from None


# --------------------------------------------------------------------------- PEP 751


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
    try:
        return _pylock_pins(document, supported_tags)
    except InvalidField as error:
        raise InputError(f"{shown}: {error.field_path}: {error.problem}") from None


def _pylock_pins(
    document: Mapping[str, Any], supported_tags: Sequence[str] | None
) -> list[WheelPin | SdistPin]:
    check_keys(document, "", ("lock-version", "created-by", "packages"), _PYLOCK_TOP_KEYS)
    lock_version = document["lock-version"]
    if not isinstance(lock_version, str) or not re.fullmatch(r"1\.[0-9]+", lock_version):
        raise InvalidField("lock-version", f'expected "1.x", got {describe(lock_version)}')
    packages = document["packages"]
    if not isinstance(packages, list):
        raise InvalidField("packages", f"expected an array of tables, got {describe(packages)}")
    preference = {tag: rank for rank, tag in enumerate(supported_tags or ())}
    pins: list[WheelPin | SdistPin] = []
    first_index: dict[str, int] = {}
    for index, package in enumerate(packages):
        where = f"packages[{index}]"
        package = require_table(where, package)
        check_keys(package, where, ("name",), _PYLOCK_PACKAGE_KEYS)
        for unsupported in ("vcs", "directory", "archive"):
            if unsupported in package:
                raise InvalidField(
                    join_path(where, unsupported),
                    "only index wheels and sdists can be pinned (no file hash for this source)",
                )
        name = canonicalize_name(require_str(join_path(where, "name"), package["name"]))
        if name in first_index:
            raise InvalidField(
                join_path(where, "name"),
                f"{describe(name)} again (first at packages[{first_index[name]}]): markers are "
                "not evaluated, resolve the pylock for one target",
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
        if not wheels and sdist is None:
            raise InvalidField(where, "a package needs wheels or an sdist")
        if preference and wheels:
            wheels = _best_wheels(wheels, preference)
            if not wheels and sdist is None:
                raise InvalidField(
                    join_path(where, "wheels"), "no wheel runs on the target and there is no sdist"
                )
        elif len(wheels) > 1:
            raise InvalidField(
                join_path(where, "wheels"),
                f"{len(wheels)} wheels for one package; pass the target's supported tags to choose one",
            )
        pins.extend(wheels)
        if sdist is not None:
            pins.append(sdist)
    return pins


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


def _pylock_file(table: object, where: str) -> tuple[str, str, int, str]:
    """(filename, url, size, sha256) of a pylock wheel/sdist table."""
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
    return filename, url, size, sha256


def _pylock_wheel(table: object, where: str, name: str, version: str) -> WheelPin:
    filename, url, size, sha256 = _pylock_file(table, where)
    try:
        _dist, _version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise InvalidField(
            join_path(where, "name"), f"not a valid wheel file name: {exc}"
        ) from None
    try:
        return WheelPin(
            name=name,
            version=version,
            filename=filename,
            sha256=sha256,
            size=size,
            tags=tuple(sorted(str(tag) for tag in tags)),
            urls=(url,),
        )
    except InvalidField as error:
        raise _prefixed(where, error) from None


def _pylock_sdist(table: object, where: str, name: str, version: str) -> SdistPin:
    filename, url, size, sha256 = _pylock_file(table, where)
    try:
        return SdistPin(
            name=sdist_input_name(name),
            version=version,
            filename=filename,
            sha256=sha256,
            size=size,
            urls=(url,),
        )
    except InvalidField as error:
        raise _prefixed(where, error) from None


# --------------------------------------------------------------------------- internals


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


def _freeze(record: object, name: str, value: object) -> None:
    object.__setattr__(record, name, value)


def iter_pins(locks: Iterable[Lock]) -> Iterator[Pin]:
    for lock in locks:
        yield from lock.inputs
