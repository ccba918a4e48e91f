"""The deployment record: one document per ``up``, ``rollback`` or ``restart`` — what ran (manifest and
config digests, settings hash, checkpoint pins hash, the rendered spec's hash), where and
when (per rank: host, container, start and join times), what admission found, and how it
ended. Written atomically beside the site; ``status`` reads it back. ``sign_record``
signs its bytes with a cosign key (ECDSA P-256 over SHA-256, base64: what ``cosign
sign-blob`` writes, so ``cosign verify-blob --key`` checks it)."""

from __future__ import annotations

import base64
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.documents import read_json_file
from ..core.errors import InputError
from ..signing.keys import PrivateKey
from .readiness import parse_api_base

SCHEMA = "sparkflake.deployment/v1"
OUTCOMES = ("ready", "failed", "refused")
KINDS = ("up", "rollback", "restart")
MAX_RECORDS = 1000  # status reads at most this many records of a site


@dataclass(frozen=True)
class RankRecord:
    """One rank in a deployment record: where it ran and what became of its container."""

    name: str
    rank: int
    host: str
    management: str
    container: str | None = None
    container_id: str | None = None
    started_at: float | None = None  # epoch seconds (the controller's clock)
    joined_at: float | None = None  # its container seen running after the start
    stopped_at: float | None = None  # rolled back
    logs: tuple[str, ...] = ()  # its last log lines, when the deployment failed


@dataclass(frozen=True)
class DeploymentRecord:
    deployment: str
    service: str
    kind: str
    site: str
    site_sha256: str
    profile: str
    config_digest: str | None
    manifest_digest: str | None
    settings_hash: str | None
    checkpoint_pins_sha256: str | None
    spec_hash: str | None
    outcome: str
    started_at: float
    finished_at: float
    ranks: tuple[RankRecord, ...]
    admission: dict[str, Any] = field(default_factory=dict)
    failure: dict[str, Any] | None = None  # {"rank": N, "name": ..., "reason": ...}
    replaced: str | None = None  # the deployment this one replaced
    api: str | None = None  # rank 0's API (http://HOST:PORT), where status asks for readiness
    served_model: str | None = None
    warnings: tuple[str, ...] = ()  # e.g. a rank that could not keep the deployment as current

    def __post_init__(self) -> None:
        object.__setattr__(self, "warnings", tuple(self.warnings))

    def to_document(self) -> dict[str, Any]:
        document = asdict(self)
        document["ranks"] = [{**rank, "logs": list(rank["logs"])} for rank in document["ranks"]]
        document["warnings"] = list(self.warnings)
        return {"schema": SCHEMA, **document}

    @staticmethod
    def from_document(document: Any, shown: str) -> DeploymentRecord:
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            raise InputError(f"{shown}: schema: expected {SCHEMA!r}")
        body = {k: v for k, v in document.items() if k != "schema"}
        known = set(DeploymentRecord.__dataclass_fields__)
        unknown = sorted(set(body) - known)
        if unknown:
            raise InputError(f"{shown}: {unknown[0]}: unknown key")
        missing = sorted(k for k in known - set(body) if k not in ("admission", "failure", "replaced", "api", "served_model", "warnings"))
        if missing:
            raise InputError(f"{shown}: {missing[0]}: missing")
        for key in ("deployment", "service", "kind", "site", "site_sha256", "profile", "outcome"):
            _require(isinstance(body[key], str), shown, key, "a string")
        for key in ("config_digest", "manifest_digest", "settings_hash", "checkpoint_pins_sha256", "spec_hash",
                    "replaced", "api", "served_model"):
            _require(body.get(key) is None or isinstance(body[key], str), shown, key, "a string or null")
        if body.get("api") is not None:
            try:
                parse_api_base(body["api"])
            except ValueError as exc:
                raise InputError(f"{shown}: api: {exc}") from None
        _require(body["kind"] in KINDS, shown, "kind", f"one of {KINDS}")
        _require(body["outcome"] in OUTCOMES, shown, "outcome", f"one of {OUTCOMES}")
        for key in ("started_at", "finished_at"):
            _require(_number(body[key]), shown, key, "a number")
        _require(isinstance(body.get("admission", {}), dict), shown, "admission", "an object")
        _require(body.get("failure") is None or isinstance(body["failure"], dict), shown, "failure", "an object or null")
        _require(isinstance(body["ranks"], list), shown, "ranks", "an array")
        warnings = body.get("warnings", [])
        _require(isinstance(warnings, list) and all(isinstance(w, str) for w in warnings), shown, "warnings",
                 "an array of strings")
        ranks = tuple(_rank(raw, f"{shown}: ranks[{index}]") for index, raw in enumerate(body["ranks"]))
        return DeploymentRecord(**{**body, "ranks": ranks})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require(condition: bool, shown: str, key: str, expected: str) -> None:
    if not condition:
        raise InputError(f"{shown}: {key}: expected {expected}" if key else f"{shown}: expected {expected}")


def _rank(raw: Any, shown: str) -> RankRecord:
    _require(isinstance(raw, dict), shown, "", "an object")
    unknown = sorted(set(raw) - set(RankRecord.__dataclass_fields__))
    if unknown:
        raise InputError(f"{shown}.{unknown[0]}: unknown key")
    for key in ("name", "host", "management"):
        _require(isinstance(raw.get(key), str), shown, key, "a string")
    _require(isinstance(raw.get("rank"), int) and not isinstance(raw["rank"], bool), shown, "rank", "an integer")
    for key in ("container", "container_id"):
        _require(raw.get(key) is None or isinstance(raw[key], str), shown, key, "a string or null")
    for key in ("started_at", "joined_at", "stopped_at"):
        _require(raw.get(key) is None or _number(raw[key]), shown, key, "a number or null")
    logs = raw.get("logs", [])
    _require(isinstance(logs, list) and all(isinstance(line, str) for line in logs), shown, "logs", "strings")
    return RankRecord(**{**raw, "logs": tuple(logs)})


def record_bytes(record: DeploymentRecord) -> bytes:
    return readable_json_bytes(record.to_document())


def write_record(directory: Path, record: DeploymentRecord, key: PrivateKey | None = None) -> Path:
    """``<directory>/<deployment>.json`` (and ``.json.sig`` with a key), each atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record.deployment}.json"
    content = record_bytes(record)
    if key is not None:
        write_bytes_atomic(f"{path}.sig", base64.b64encode(key.sign(content)))
    write_bytes_atomic(path, content)
    return path


def read_record(path: str | os.PathLike[str]) -> DeploymentRecord:
    return DeploymentRecord.from_document(read_json_file(path, "deployment record"), str(path))


def latest_records(directory: Path, service: str) -> list[DeploymentRecord]:
    """The service's records in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    paths = sorted(p for p in directory.iterdir() if p.suffix == ".json" and p.is_file())[-MAX_RECORDS:]
    records = [read_record(path) for path in paths]
    return sorted((r for r in records if r.service == service), key=lambda r: r.started_at)
