"""What the launcher needs from a profile: its runtime contract, as plain frozen data.

``contract_from_profile`` adapts the profile model (``sparkflake.profile.model``) to this
shape, so the launcher's logic is tested against plain data and the profile file format
can evolve behind one function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..core.digest import is_digest
from ..core.errors import InputError
from ..lock.profile_locks import input_for, load_locks, load_profile
from ..profile.model import CheckpointFile
from ..profile.settings_catalog import (
    DCP_FULL_CKV_GATHER,
    DCP_INTERLEAVE,
    DCP_KV_GIB,
    refused_values,
    table_value_text,
    validate_runtime_table,
)
from ..runtime.capabilities import FILE_NAME as CAPABILITIES_FILE
from ..runtime.capabilities import Capabilities
from ..runtime.capabilities import load as load_capabilities


@dataclass(frozen=True)
class LaunchContract:
    profile: str
    status: str  # the profile's status for its qualified configuration
    served_model_name: str
    container_name: str  # prefix; the rank is appended
    container_cache_root: str  # SparkCache root inside the container (differs per profile)
    container_jit_root: str  # JIT caches inside the container (differs per profile)
    image_id: str | None  # docker/podman image ID = config digest, "sha256:<hex>"
    image_labels: Mapping[str, str]
    runtime_defaults: Mapping[str, str]  # [runtime]: catalog key -> env-file spelling
    qualified: Mapping[str, str]  # [qualified]: catalog key -> env-file spelling
    target_files: tuple[CheckpointFile, ...]
    draft_files: tuple[CheckpointFile, ...]
    # role -> what the lock pins for it ("wheel vllm 0.33.0 sha256 …", "git URL rev … tree …"):
    # the software the image installs, never a claim
    components: Mapping[str, str] = field(default_factory=dict)
    # the seeds' upstream identities, each with its status (unverified until derived)
    claims: Mapping[str, str] = field(default_factory=dict)
    # [checkpoints.ROLE] pin: which files identify the checkpoint (names or patterns);
    # their digests come from the site's pins file (launch.checkpoint_pins)
    target_pin: tuple[str, ...] = ()
    draft_pin: tuple[str, ...] = ()
    # [checkpoints.ROLE] architecture: what the checkpoint must serve (launch.served_model);
    # None: not checked
    target_architecture: str | None = None
    draft_architecture: str | None = None
    # what the profile's image can honour (profiles/<name>/runtime-capabilities.json, written
    # by `sparkflake runtime check`); None: no manifest, no capability rules apply
    capabilities: Capabilities | None = None
    # [refused]: catalog key -> {typed value -> reason}: values the profile's image cannot run
    refused: Mapping[str, Mapping[Any, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.image_id is not None and not is_digest(self.image_id):
            raise InputError(
                f"profile {self.profile}: image ID {self.image_id!r} is not sha256:<64 hex>"
            )
        for name in ("image_labels", "runtime_defaults", "qualified", "components", "claims", "refused"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


def _auto_equivalents(runtime: Mapping[str, str]) -> dict[str, str]:
    """Profile defaults that restate an auto rule's result for the profile's own DCP.

    ``CP_KV_INTERLEAVE = 1`` in a DCP1 profile is what the auto rule gives; taking it as
    an explicit value would refuse a DCP2 env file that leaves the interleave to the rule.
    Such restatements are read as ``auto``; any other value stays an explicit default.
    """

    try:
        dcp = int(runtime.get("DCP", "1"))
    except ValueError:
        return dict(runtime)
    rules = {
        "CP_KV_INTERLEAVE": str(DCP_INTERLEAVE.get(dcp)),
        "FULL_CKV_GATHER": "1" if DCP_FULL_CKV_GATHER.get(dcp) else "0",
        "KV_CACHE_GIB": str(DCP_KV_GIB.get(dcp)),
    }
    return {
        key: ("auto" if rules.get(key) == value else value) for key, value in runtime.items()
    }


def pin_identity(pin: Any) -> str:
    """What a lock pins, in one line: a file's kind, name, version and sha256, or a git
    input's URL, commit and tree."""
    if pin.kind == "git":
        return f"git {pin.urls[0]} rev {pin.rev} tree {pin.tree}"
    version = getattr(pin, "version", None)
    return " ".join(part for part in (pin.kind, getattr(pin, "package", None) or pin.name,
                                      str(version) if version else None, f"sha256 {pin.sha256}") if part)


def claim_text(claim: Any) -> str:
    """A claim as a claim: its status first, then what the seeds state."""
    stated = [f"{key} {getattr(claim, key)}" for key in ("rev", "tree", "source_sha256", "sha256",
                                                          "manifest_digest", "config_digest") if getattr(claim, key)]
    return f"{claim.status}: {claim.subject}: " + " ".join(stated)


def contract_from_profile(profile: Any) -> LaunchContract:
    """Adapt a ``sparkflake.profile.model.Profile`` to the launcher's contract."""

    shown = profile.shown() if hasattr(profile, "_shown") else f"profile {profile.name}"
    validate_runtime_table(profile.runtime, f"{shown}: runtime")
    validate_runtime_table(profile.qualified.settings, f"{shown}: qualified.settings")
    refused = refused_values(profile.refused, f"{shown}: refused")
    runtime = {key: table_value_text(value) or "" for key, value in profile.runtime.items()}
    qualified = {key: table_value_text(value) or "" for key, value in profile.qualified.settings.items()}
    checkpoints = profile.checkpoints
    target = checkpoints.get("target")
    draft = checkpoints.get("draft")
    try:
        locks = load_locks(profile) if all(path.is_file() for path in profile.lock_paths()) else ()
    except InputError:
        locks = ()
    components: dict[str, str] = {}
    for role in sorted(profile.inputs) if locks else ():
        try:
            components[role] = pin_identity(input_for(profile, role, locks))
        except InputError:
            continue
    config_digest = getattr(profile.qualified, "config_digest", None)
    path = getattr(profile, "path", None)
    manifest = path.parent / CAPABILITIES_FILE if path is not None else None
    capabilities = load_capabilities(manifest) if manifest is not None and manifest.exists() else None
    return LaunchContract(
        profile=profile.name,
        status=profile.status,
        served_model_name=profile.served_model_name,
        container_name=f"sparkflake-{profile.name}",
        container_cache_root=profile.cache_root,
        container_jit_root=profile.jit_root,
        image_id=config_digest,
        image_labels=dict(profile.labels),
        runtime_defaults=_auto_equivalents(runtime),
        qualified=qualified,
        target_files=target.files if target else (),
        draft_files=draft.files if draft else (),
        components=components,
        claims={claim.name: claim_text(claim) for claim in profile.claims},
        target_pin=tuple(target.pin or ()) if target else (),
        draft_pin=tuple(draft.pin or ()) if draft else (),
        target_architecture=target.architecture if target else None,
        draft_architecture=draft.architecture if draft else None,
        capabilities=capabilities,
        refused=refused,
    )


def load_contract(name_or_path: str) -> LaunchContract:
    return contract_from_profile(load_profile(name_or_path, check_locks=False))
