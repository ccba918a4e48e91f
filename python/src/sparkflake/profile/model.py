"""Profiles: ``profiles/<name>/profile.toml``, what one runtime composition is.

A profile names its inputs by role (``vllm_wheel = "vllm"``: role → input name in the
locks it lists), its Python requirements and Debian seed packages (what the resolver
locks), required absences, runtime-contract defaults (``[runtime]``, the launcher's
``runtime.env`` keys), the settings the seeds qualified (``[qualified]``), checkpoint
identity files, image labels, and the seeds' upstream identities as claims with a status.

Records are frozen dataclasses that validate themselves; parsing adds the file and the
place (``profile.toml: runtime.tp: expected an UPPER_SNAKE_CASE key``). Tables of free
keys (inputs, runtime, settings, labels) are read-only mappings kept sorted by key, so
equal profiles dump to the same bytes (``dump_profile``). docs/profiles.md has the format.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from packaging.requirements import InvalidRequirement, Requirement

from ..core.errors import InputError
from ..core.records import (
    OCI_REPOSITORY_PATTERN,
    InvalidField,
    describe,
    freeze_field,
    freeze_str_tuple,
    join_path,
    keys_in_field_order,
    require_deb_package,
    require_input_name,
    require_match,
    require_oci_digest,
    require_platform,
    require_sha1_hex,
    require_sha256_hex,
    require_size,
    require_str,
    require_table,
)
from ..core.status import CLAIM_STATUSES, STATUSES

SCHEMA_VERSION = 1
PROFILE_FILE = "profile.toml"
PROFILES_DIR_ENV = "SPARKFLAKE_PROFILES_DIR"
# Set by bin/sparkflake to its checkout's profiles/: used only when neither
# --profiles-dir, SPARKFLAKE_PROFILES_DIR nor a profiles/ above the working directory gives one.
CHECKOUT_PROFILES_ENV = "SPARKFLAKE_CHECKOUT_PROFILES"

CLAIM_KINDS = ("git", "file", "oci")

# Roles the composition stages look up; a profile may name more (any lowercase word).
KNOWN_ROLES = (
    "vllm_wheel",
    "vllm_source",
    "b12x",
    "sparkcache",
    "fastsafetensors",
    "nccl",
    "torch",
)

PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ROLE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_ENV_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")
_LABEL_KEY = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*(?:\.[a-z0-9]+(?:[-_][a-z0-9]+)*)+$")
_DISTRIBUTION = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")
_SUITE = re.compile(r"^[a-z][a-z0-9-]*$")
_CLAIM_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_ARCHITECTURE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # a Python class name
_CAPABILITY = re.compile(r"^[1-9][0-9]?\.[0-9]$")

RuntimeValue = str | int | float | bool


# --------------------------------------------------------------------------- small checks


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(sorted(value.items())))


def _require_abs_path(path: str, value: object) -> str:
    text = require_str(path, value)
    if not text.startswith("/") or posixpath.normpath(text) != text or text == "/":
        raise InvalidField(
            path,
            f"expected a normalized absolute path (no '..', '//' or trailing '/'), got {describe(text)}",
        )
    return text


def _require_rel_path(path: str, value: object) -> str:
    text = require_str(path, value)
    parts = text.split("/")
    if text.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise InvalidField(path, f"expected a normalized relative path, got {describe(text)}")
    return text


def _require_pin_pattern(path: str, value: object) -> str:
    text = _require_rel_path(path, value)
    if any(char in text for char in "*?[") and "/" in text:
        raise InvalidField(path, f"a pattern matches top-level names only, got {describe(text)}")
    return text


def _require_lock_ref(path: str, value: object) -> str:
    text = require_str(path, value)
    if text.startswith("/") or "\\" in text or not text.endswith(".lock"):
        raise InvalidField(path, f"expected a relative path to a .lock file, got {describe(text)}")
    return text


def _require_runtime_value(path: str, value: object) -> RuntimeValue:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidField(path, f"expected a finite number, got {describe(value)}")
    if isinstance(value, (str, int, float, bool)):
        if isinstance(value, str):
            require_str(path, value, allow_empty=True)
        return value
    raise InvalidField(path, f"expected a string, integer, float or boolean, got {describe(value)}")


def _require_env_table(path: str, value: object) -> Mapping[str, RuntimeValue]:
    table = require_table(path, value)
    for key, item in table.items():
        key_path = join_path(path, key)
        if not _ENV_KEY.fullmatch(key):
            raise InvalidField(key_path, f"expected an UPPER_SNAKE_CASE key, got {describe(key)}")
        _require_runtime_value(key_path, item)
    return _frozen_mapping(table)


def _require_refused_table(path: str, value: object) -> Mapping[str, Mapping[str, str]]:
    """``[refused.KEY]``: value -> the reason this profile's image cannot run it."""
    refused: dict[str, Mapping[str, str]] = {}
    for key, values in require_table(path, value).items():
        key_path = join_path(path, key)
        if not _ENV_KEY.fullmatch(key):
            raise InvalidField(key_path, f"expected an UPPER_SNAKE_CASE key, got {describe(key)}")
        if not (entries := require_table(key_path, values)):
            raise InvalidField(key_path, "expected at least one refused value")
        for refused_value, reason in entries.items():
            require_str(join_path(key_path, refused_value), reason, free_text=True)
        refused[key] = _frozen_mapping(entries)
    return _frozen_mapping(refused)


def _require_choice(path: str, value: object, choices: Sequence[str]) -> str:
    text = require_str(path, value, allow_empty=True)
    if text not in choices:
        raise InvalidField(path, f"expected one of {', '.join(choices)}, got {describe(text)}")
    return text


def _require_requirement(path: str, value: object) -> str:
    text = require_str(path, value)
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        raise InvalidField(path, f"not a PEP 508 requirement ({exc}): {describe(text)}") from None
    return text


def _require_distribution(path: str, value: object) -> str:
    return require_match(path, value, _DISTRIBUTION, "a Python distribution name")


# --------------------------------------------------------------------------- records


@keys_in_field_order()
@dataclass(frozen=True)
class PythonSpec:
    """PEP 508 requirements the resolver locks for the target."""

    requirements: tuple[str, ...]

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        freeze_str_tuple(self, "requirements", _require_requirement, non_empty=True)


@keys_in_field_order()
@dataclass(frozen=True)
class DebianSpec:
    """The OS base: a Debian suite and the seed packages whose closure the resolver locks."""

    suite: str
    seed: tuple[str, ...]

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        require_match("suite", self.suite, _SUITE, 'a Debian suite like "bookworm"')
        freeze_str_tuple(self, "seed", require_deb_package, non_empty=True)


@keys_in_field_order()
@dataclass(frozen=True)
class Absences:
    """What must not be in the image (checked by the composition's verification chain)."""

    distributions: tuple[str, ...] = ()

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        freeze_str_tuple(self, "distributions", _require_distribution, non_empty=False)


@dataclass(frozen=True)
class Qualification:
    """The exact settings a qualification covered, what it covered (``scope``), what it did
    not (``limits``), where the claim comes from, and the image it is bound to (if any)."""

    settings: Mapping[str, RuntimeValue] = field(default_factory=dict)
    scope: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()
    source: str | None = None
    manifest_digest: str | None = None
    config_digest: str | None = None

    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "source",
        "manifest_digest",
        "config_digest",
        "scope",
        "limits",
        "settings",
    )

    def __post_init__(self) -> None:
        freeze_field(self, "settings", _require_env_table("settings", self.settings))
        text_item = lambda p, v: require_str(p, v, free_text=True)  # noqa: E731
        freeze_str_tuple(self, "scope", text_item, non_empty=False)
        freeze_str_tuple(self, "limits", text_item, non_empty=False)
        if self.source is not None:
            require_str("source", self.source, free_text=True)
        for key in ("manifest_digest", "config_digest"):
            if getattr(self, key) is not None:
                require_oci_digest(key, getattr(self, key))

    @property
    def is_empty(self) -> bool:
        return not self.settings and not self.scope


@keys_in_field_order()
@dataclass(frozen=True)
class CheckpointFile:
    """One identity-bearing checkpoint file, relative to the checkpoint directory."""

    path: str
    sha256: str
    size: int

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        _require_rel_path("path", self.path)
        require_sha256_hex("sha256", self.sha256)
        require_size("size", self.size)


@keys_in_field_order()
@dataclass(frozen=True)
class Checkpoint:
    """A model checkpoint mounted at run time (never in the image)."""

    description: str
    repository: str | None = None
    # The architecture vLLM serves from this checkpoint (config.json's first
    # `architectures` entry, as its model registry names it): what the runtime check judged,
    # and what launch-rank requires of the checkpoint it finds (launch/served_model.py).
    # None: not checked.
    architecture: str | None = None
    # What `sparkflake checkpoint pin` records (names, or patterns of top-level names):
    # the files that say which model this is. The hashes go to a site-owned pins file,
    # so a committed profile stays the same for every site's copy of the checkpoint.
    # None (no `pin` key) keeps the profile document, embedded in the image, as it was.
    pin: tuple[str, ...] | None = None
    files: tuple[CheckpointFile, ...] = ()

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        require_str("description", self.description, free_text=True)
        if self.repository is not None:
            require_str("repository", self.repository)
        if self.architecture is not None:
            require_match("architecture", self.architecture, _ARCHITECTURE, "a model class name like Glm5NextForCausalLM")
        if self.pin is not None:
            patterns = tuple(self.pin)
            for index, pattern in enumerate(patterns):
                _require_pin_pattern(f"pin[{index}]", pattern)
                if pattern in patterns[:index]:
                    raise InvalidField(f"pin[{index}]", f"duplicate pattern {describe(pattern)}")
            freeze_field(self, "pin", patterns)
        files = tuple(self.files)
        seen: set[str] = set()
        for index, entry in enumerate(files):
            if not isinstance(entry, CheckpointFile):
                raise InvalidField(
                    f"files[{index}]", f"expected a checkpoint file, got {describe(entry)}"
                )
            if entry.path in seen:
                raise InvalidField(f"files[{index}].path", f"duplicate path {describe(entry.path)}")
            seen.add(entry.path)
        freeze_field(self, "files", files)


@keys_in_field_order()
@dataclass(frozen=True)
class Claim:
    """An upstream identity the seeds state, with how far sparkflake has confirmed it.

    ``unverified``: stated by the seeds, not reproduced here; ``verified``: sparkflake
    derived the same digest from bytes; ``contradicted``: it derived a different one.
    """

    name: str
    kind: str
    subject: str
    status: str
    source: str
    rev: str | None = None
    tree: str | None = None
    source_sha256: str | None = None
    sha256: str | None = None
    reference: str | None = None
    manifest_digest: str | None = None
    config_digest: str | None = None

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared
    KIND_FIELDS: ClassVar[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
        # kind: (required, optional)
        "git": (("rev", "tree"), ("source_sha256",)),
        "file": (("sha256",), ()),
        "oci": (("reference",), ("manifest_digest", "config_digest")),
    }

    def __post_init__(self) -> None:
        require_match("name", self.name, _CLAIM_NAME, "a lowercase claim name")
        kind = _require_choice("kind", self.kind, CLAIM_KINDS)
        require_str("subject", self.subject, free_text=True)
        _require_choice("status", self.status, CLAIM_STATUSES)
        require_str("source", self.source, free_text=True)
        required, optional = self.KIND_FIELDS[kind]
        for key in self.FIELD_ORDER[5:]:
            value = getattr(self, key)
            if key in required and value is None:
                raise InvalidField(key, f"a {kind} claim needs {key}")
            if value is not None and key not in required and key not in optional:
                raise InvalidField(key, f"not part of a {kind} claim")
        if self.rev is not None:
            require_sha1_hex("rev", self.rev)
        if self.tree is not None:
            require_sha1_hex("tree", self.tree)
        for key in ("source_sha256", "sha256"):
            if getattr(self, key) is not None:
                require_sha256_hex(key, getattr(self, key))
        if self.reference is not None:
            expected = "an image repository like ghcr.io/org/name"
            require_match("reference", self.reference, OCI_REPOSITORY_PATTERN, expected)
            if "/" not in self.reference:  # a claim names its registry host, then the path
                raise InvalidField("reference", f"expected {expected}, got {describe(self.reference)}")
        for key in ("manifest_digest", "config_digest"):
            if getattr(self, key) is not None:
                require_oci_digest(key, getattr(self, key))
        if kind == "oci" and self.manifest_digest is None and self.config_digest is None:
            raise InvalidField(
                "manifest_digest", "an oci claim needs manifest_digest or config_digest"
            )


@keys_in_field_order()
@dataclass(frozen=True)
class Device:
    """The accelerator every rank has, as data: what the runtime check fakes vLLM's CUDA
    platform as (``runtime/in_image/probe_engine.py``). ``capability``: the CUDA compute
    capability ("12.1": GB10, sm_121); ``total_memory_gib``: the device memory the CUDA
    runtime reports (vLLM's ``get_device_total_memory``); ``unified``: the GPU shares the
    host's memory, so vLLM takes free memory at start to be the host's available memory
    (vllm/utils/mem_utils.py MemorySnapshot.measure); ``free_at_start_gib``: the free
    memory a rank has when vLLM starts, which its startup check compares with
    GPU_MEMORY_UTILIZATION x total (vllm/v1/worker/utils.py request_memory)."""

    name: str
    capability: str
    total_memory_gib: int | float
    free_at_start_gib: int | float
    unified: bool = False

    FIELD_ORDER: ClassVar[tuple[str, ...]]  # the fields as declared

    def __post_init__(self) -> None:
        require_str("name", self.name, free_text=True)
        require_match("capability", self.capability, _CAPABILITY, 'a CUDA compute capability like "12.1"')
        for key in ("total_memory_gib", "free_at_start_gib"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 < value <= 1 << 20:
                raise InvalidField(key, f"expected a number of GiB above 0 and at most {1 << 20}, got "
                                   f"{describe(value)}")
        if self.free_at_start_gib > self.total_memory_gib:
            raise InvalidField("free_at_start_gib", f"expected at most total_memory_gib ({self.total_memory_gib}), "
                               f"got {describe(self.free_at_start_gib)}")
        if not isinstance(self.unified, bool):
            raise InvalidField("unified", f"expected true or false, got {describe(self.unified)}")


@dataclass(frozen=True)
class Profile:
    """One runtime composition (see the module docstring). ``path`` is where it was read
    from (not part of equality or of the serialized form)."""

    name: str
    description: str
    status: str
    platform: str
    served_model_name: str
    cache_root: str
    jit_root: str
    locks: tuple[str, ...]
    inputs: Mapping[str, str]
    python: PythonSpec
    debian: DebianSpec
    runtime: Mapping[str, RuntimeValue]
    checkpoints: Mapping[str, Checkpoint]
    # runtime.env values launch-rank refuses, each with the image's own reason (quoted)
    refused: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    absent: Absences = field(default_factory=Absences)
    qualified: Qualification = field(default_factory=Qualification)
    labels: Mapping[str, str] = field(default_factory=dict)
    claims: tuple[Claim, ...] = ()
    device: Device | None = None  # None: the runtime check cannot judge kernel selection
    schema: int = SCHEMA_VERSION
    path: Path | None = field(default=None, compare=False, repr=False)

    FIELD_ORDER: ClassVar[tuple[str, ...]] = (
        "schema",
        "name",
        "description",
        "status",
        "platform",
        "served_model_name",
        "cache_root",
        "jit_root",
        "locks",
        "inputs",
        "python",
        "debian",
        "absent",
        "device",
        "runtime",
        "refused",
        "qualified",
        "checkpoints",
        "labels",
        "claims",
    )
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"absent", "device", "refused", "qualified", "labels", "claims"})
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("refused",)  # written only when there are some

    def __post_init__(self) -> None:
        if isinstance(self.schema, bool) or self.schema != SCHEMA_VERSION:
            raise InvalidField("schema", f"expected {SCHEMA_VERSION}, got {describe(self.schema)}")
        require_match("name", self.name, PROFILE_NAME, "a lowercase profile name of [a-z0-9-]")
        require_str("description", self.description, free_text=True)
        _require_choice("status", self.status, STATUSES)
        require_platform("platform", self.platform)
        require_str("served_model_name", self.served_model_name)
        cache_root = _require_abs_path("cache_root", self.cache_root)
        jit_root = _require_abs_path("jit_root", self.jit_root)
        if cache_root == jit_root:
            raise InvalidField(
                "jit_root", f"must differ from cache_root, both are {describe(cache_root)}"
            )
        freeze_str_tuple(self, "locks", _require_lock_ref, non_empty=True)

        inputs = require_table("inputs", self.inputs)
        if not inputs:
            raise InvalidField("inputs", "expected at least one role")
        for role, input_name in inputs.items():
            if not _ROLE.fullmatch(role):
                raise InvalidField(
                    join_path("inputs", role),
                    f"expected a lowercase role name of [a-z0-9_], got {describe(role)}",
                )
            require_input_name(join_path("inputs", role), input_name)
        freeze_field(self, "inputs", _frozen_mapping(inputs))

        for key, cls in (
            ("python", PythonSpec),
            ("debian", DebianSpec),
            ("absent", Absences),
            ("qualified", Qualification),
        ):
            if not isinstance(getattr(self, key), cls):
                raise InvalidField(
                    key, f"expected a {cls.__name__}, got {describe(getattr(self, key))}"
                )
        if self.device is not None and not isinstance(self.device, Device):
            raise InvalidField("device", f"expected a Device, got {describe(self.device)}")
        freeze_field(self, "runtime", _require_env_table("runtime", self.runtime))
        freeze_field(self, "refused", _require_refused_table("refused", self.refused))

        checkpoints = require_table("checkpoints", self.checkpoints)
        if "target" not in checkpoints:
            raise InvalidField("checkpoints.target", "missing required table")
        for key, checkpoint in checkpoints.items():
            if key not in ("target", "draft"):
                raise InvalidField(
                    f"checkpoints.{key}", "unknown checkpoint (expected target or draft)"
                )
            if not isinstance(checkpoint, Checkpoint):
                raise InvalidField(
                    f"checkpoints.{key}", f"expected a Checkpoint, got {describe(checkpoint)}"
                )
        freeze_field(
            self,
            "checkpoints",
            MappingProxyType({k: checkpoints[k] for k in ("target", "draft") if k in checkpoints}),
        )

        labels = require_table("labels", self.labels)
        for key, value in labels.items():
            shown = join_path("labels", key)
            if not _LABEL_KEY.fullmatch(key):
                raise InvalidField(
                    shown,
                    f"expected a reverse-DNS label key like org.opencontainers.image.title, got {describe(key)}",
                )
            require_str(shown, value, free_text=True)
        freeze_field(self, "labels", _frozen_mapping(labels))

        claims = tuple(self.claims)
        seen: set[str] = set()
        for index, claim in enumerate(claims):
            if not isinstance(claim, Claim):
                raise InvalidField(f"claims[{index}]", f"expected a Claim, got {describe(claim)}")
            if claim.name in seen:
                raise InvalidField(
                    f"claims[{index}].name", f"duplicate claim name {describe(claim.name)}"
                )
            seen.add(claim.name)
        freeze_field(self, "claims", claims)

        if self.status == "qualified" and (
            self.qualified.is_empty or self.qualified.manifest_digest is None
        ):
            raise InvalidField(
                "status",
                "qualified needs [qualified] settings and the manifest_digest of the image the "
                "qualification is bound to; until evidence binds one, the status is implemented",
            )

    # -- lock access -------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        if self.path is None:
            raise InputError(
                f"profile {self.name}: not read from a file, its locks have no base directory"
            )
        return self.path.parent

    def lock_paths(self) -> tuple[Path, ...]:
        """The listed lock files, resolved against the profile's directory."""
        return tuple(Path(os.path.normpath(self.directory / ref)) for ref in self.locks)

    def shown(self) -> str:
        return os.fspath(self.path) if self.path is not None else f"profile {self.name}"
