"""Runtime identity: what stored state (SparkCache entries, JIT caches) depends on.

The canonical identity of a launch is a JSON document of: the model (target and draft
checkpoint identities), the topology (TP, PP, DCP, KV interleave, full-CKV gather, node
count, physical rank), the inputs the lock installs (per role: kind, name, version and
sha256, or a git commit and tree; never a claim of the seeds), SparkCache (namespace,
publication schema, and the storage key SparkCache itself derives), the KV
layout (dtype, block size, record size) and the runtime options that change stored state
(speculative method and depth, attention and MoE backends). Its SHA-256 over canonical
JSON bytes names the SparkCache root and the JIT root of the rank.

The SparkCache part is not re-derived: ``sparkcache.spark_context_cache_store.CacheIdentity``
(the class SparkCache's connector builds its identities with) computes the storage key
from the same fields the connector reads from ``--kv-transfer-config``, so the launcher
and the running connector agree by construction; tests feed our kv-transfer-config to
SparkCache's own ``parse_connector_config`` and compare.

Stored state carries ``identity.json``. ``accept_state`` reuses a directory whose identity
matches; otherwise the directory is moved, whole, into ``quarantine/`` beside a record
(never deleted) and the rank starts cold.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes, readable_json_bytes
from ..core.documents import read_json_file
from ..core.errors import InputError

IDENTITY_SCHEMA = "sparkflake.runtime-identity/v1"
QUARANTINE_SCHEMA = "sparkflake.quarantine-record/v1"
IDENTITY_FILE = "identity.json"
NAMESPACE_HEX_CHARS = 24


def checkpoint_identity(files: Any) -> str:
    """SHA-256 over the sorted (path, sha256, size) list of identity-bearing files."""
    rows = sorted(({"path": f.path, "sha256": f.sha256, "size": f.size} for f in files), key=lambda r: r["path"])
    return hashlib.sha256(canonical_json_bytes(rows, ascii_only=True)).hexdigest()


def sparkcache_version() -> str:
    import sparkcache

    return str(sparkcache.__version__)


def sparkcache_profile(name: str) -> Any:  # SparkCache's profile object (sparkcache has no types)
    from sparkcache.spark_context_cache_profiles import ProfileError, resolve_profile

    try:
        return resolve_profile(name)
    except ProfileError as exc:
        raise InputError(f"SparkCache: {exc}") from None


def sparkcache_deployment_problem(
    profile_name: str, dcp: int, block_size: int, min_span_tokens: int
) -> str | None:
    """SparkCache's own deployment validation, as a message (None when accepted)."""
    from sparkcache.spark_context_cache_profiles import ProfileError

    try:
        sparkcache_profile(profile_name).validate_for_deployment(
            dcp_degree=dcp,
            block_size=block_size,
            min_span_tokens=min_span_tokens,
            native_restore=False,
        )
    except ProfileError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class SparkCacheIdentity:
    wire: Mapping[str, Any]
    storage_key: str


def sparkcache_identity(
    *,
    model_profile: str,
    target_checkpoint: str,
    draft_checkpoint: str,
    draft_kv_policy: str,
    tp: int,
    dcp: int,
    physical_rank: int,
) -> SparkCacheIdentity:
    """SparkCache's identity for one physical rank, computed by SparkCache's own class.

    The DCP shard rank is the rank's position in its DCP group: vLLM forms DCP groups
    from consecutive TP ranks, so it is ``tp_rank % dcp``. Under ``colocated_target``
    SparkCache stores draft state as target state and uses the target identity.
    """
    from sparkcache.spark_context_cache_store import CacheIdentity

    profile = sparkcache_profile(model_profile)
    draft = target_checkpoint if draft_kv_policy == "colocated_target" else draft_checkpoint
    record_schema: tuple[str, ...] = ()
    quantization_layout = profile.quantization_layout
    if profile.storage_mode == "block_pages_v1":
        raise InputError(
            f"SparkCache profile {model_profile}: block-page storage depends on vLLM's "
            "KV-group topology, known only inside the engine; not supported by the launcher"
        )
    try:
        identity = CacheIdentity(
            target_checkpoint=target_checkpoint,
            draft_checkpoint=draft,
            quantization_layout=quantization_layout,
            rope_layout=profile.rope_layout,
            tp_degree=tp,
            dcp_degree=dcp,
            chunk_tokens=profile.chunk_tokens,
            dcp_shard_rank=physical_rank % dcp,
            tp_shard_rank=physical_rank,
            boundary_hidden_policy=profile.boundary_hidden_policy,
            draft_kv_policy=draft_kv_policy,
            record_schema=record_schema,
        )
    except ValueError as exc:
        raise InputError(f"SparkCache identity: {exc}") from None
    return SparkCacheIdentity(wire=identity.to_wire(), storage_key=identity.storage_key)


def runtime_identity(
    *,
    profile: str,
    values: Mapping[str, Any],
    rank: int,
    target_checkpoint: str,
    draft_checkpoint: str | None,
    components: Mapping[str, str],
) -> dict[str, Any]:
    """The canonical identity document of one rank's launch (plain JSON data)."""
    v = values
    spark = sparkcache_identity(
        model_profile=v["SPARKCACHE_MODEL_PROFILE"],
        target_checkpoint=target_checkpoint,
        draft_checkpoint=draft_checkpoint or target_checkpoint,
        draft_kv_policy=v["SPARKCACHE_DRAFT_KV_POLICY"],
        tp=v["TP"],
        dcp=v["DCP"],
        physical_rank=rank,
    )
    speculative = v["SPECULATIVE_METHOD"]
    return {
        "schema": IDENTITY_SCHEMA,
        "profile": profile,
        "model": {"target": target_checkpoint, "draft": draft_checkpoint},
        "topology": {
            "tp": v["TP"],
            "pp": v["PP"],
            "dcp": v["DCP"],
            "kv_interleave": v["CP_KV_INTERLEAVE"],
            "full_ckv_gather": bool(v["FULL_CKV_GATHER"]),
            "nnodes": v["NODE_COUNT"],
            "physical_rank": rank,
        },
        # what the lock installs, role by role (vLLM wheel and source, b12x, SparkCache,
        # NCCL, torch, ...): the image's software, not the seeds' claims
        "inputs": dict(sorted(components.items())),
        "sparkcache": {
            # the SparkCache whose CacheIdentity computed storage_key (the launcher's own)
            "storage_key_by": f"sparkcache {sparkcache_version()}",
            "namespace": v["SPARKCACHE_NAMESPACE"],
            "publication": v["SPARKCACHE_PUBLICATION"],
            "model_profile": v["SPARKCACHE_MODEL_PROFILE"],
            "storage_key": spark.storage_key,
        },
        "kv_layout": {
            "dtype": v["KV_CACHE_DTYPE"],
            "block_size": v["KV_BLOCK_SIZE"],
            "record_bytes_per_token": v["KV_RECORD_BYTES_PER_TOKEN"],
        },
        "options": {
            "speculative_method": speculative,
            "num_speculative_tokens": v["SPECULATIVE_TOKENS"] if speculative != "none" else 0,
            "draft_kv_policy": v["SPARKCACHE_DRAFT_KV_POLICY"],
            "attention_backend": v["ATTENTION_BACKEND"],
            "moe_backend": v["MOE_BACKEND"],
            "linear_backend": v["LINEAR_BACKEND"],
            # the operator's preloaded NCCL build, when there is one
            "nccl_library_sha256": v["NCCL_LIBRARY_SHA256"] if v["NCCL_LIBRARY"] else None,
        },
    }


def identity_hash(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json_bytes(identity, ascii_only=True)).hexdigest()


def namespace(identity: Mapping[str, Any]) -> str:
    """The directory name of this identity's SparkCache root and JIT root."""
    return identity_hash(identity)[:NAMESPACE_HEX_CHARS]


# --- stored state: accept or quarantine ----------------------------------------------


@dataclass(frozen=True)
class StateDecision:
    path: str
    action: str  # "created" | "reused" | "quarantined"
    quarantine: str | None = None  # where the mismatching state went
    reason: str | None = None


def read_identity_file(state_dir: Path) -> Any:
    """The identity stored in a state directory; None when absent or unreadable."""
    try:
        return read_json_file(state_dir / IDENTITY_FILE, "a state directory's identity")
    except InputError:
        return None


def inspect_state(state_dir: Path, identity: Mapping[str, Any]) -> tuple[str, str | None]:
    """What ``accept_state`` would do, without changing anything."""
    if not state_dir.exists() and not state_dir.is_symlink():
        return "created", None
    if state_dir.is_symlink() or not state_dir.is_dir():
        return "quarantined", "not a directory"
    stored = read_identity_file(state_dir)
    if stored is None:
        if not any(state_dir.iterdir()):
            return "created", None
        return "quarantined", f"no readable {IDENTITY_FILE}"
    if stored != dict(identity):
        differing = sorted(
            key for key in set(stored) | set(identity) if stored.get(key) != identity.get(key)
        ) if isinstance(stored, dict) else ["<not an object>"]
        return "quarantined", f"identity differs in: {', '.join(differing)}"
    return "reused", None


def accept_state(
    state_dir: str | os.PathLike[str],
    identity: Mapping[str, Any],
    quarantine_root: str | os.PathLike[str],
    *,
    now: datetime.datetime | None = None,
) -> StateDecision:
    """Reuse matching state; move mismatching state into quarantine; create it cold."""
    state = Path(state_dir)
    action, reason = inspect_state(state, identity)
    moved_to = None
    if action == "quarantined":
        moved_to = str(quarantine(state, Path(quarantine_root), reason or "mismatch", identity, now=now))
    if action != "reused":
        state.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(state / IDENTITY_FILE, canonical_json_bytes(dict(identity), ascii_only=True) + b"\n")
    return StateDecision(path=str(state), action=action, quarantine=moved_to, reason=reason)


def quarantine(
    state: Path,
    quarantine_root: Path,
    reason: str,
    expected: Mapping[str, Any],
    *,
    now: datetime.datetime | None = None,
) -> Path:
    """Move ``state`` (a file, directory or symlink) aside with a record; never delete.

    The move is one ``rename`` on the same filesystem, so every byte and every inode is
    kept as it was; the record says what was moved, from where, when and why.
    """
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    quarantine_root.mkdir(parents=True, exist_ok=True)
    base = f"{stamp}-{state.name}"
    for attempt in range(1000):
        slot = quarantine_root / (base if attempt == 0 else f"{base}.{attempt}")
        try:
            slot.mkdir()
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - a thousand moves within one microsecond
        raise InputError(f"{quarantine_root}: cannot allocate a quarantine slot")
    found = read_identity_file(state) if state.is_dir() and not state.is_symlink() else None
    os.rename(state, slot / "state")
    record = {
        "schema": QUARANTINE_SCHEMA,
        "moved_from": str(state),
        "moved_to": str(slot / "state"),
        "time": stamp,
        "reason": reason,
        "expected_identity_hash": identity_hash(expected),
        "found_identity": found,
    }
    write_bytes_atomic(slot / "record.json", readable_json_bytes(record))
    return slot
