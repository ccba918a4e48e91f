"""What the controller asks of one rank, as one typed record: the same fields go over SSH as
JSON (``--request-json``) and come back in the deployment a rank keeps for ``rollback``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from ..core.canonical_json import canonical_json_bytes
from ..core.digest import is_digest
from ..core.errors import InputError

SERVICE_LABEL = "org.sparkflake.service"
DEPLOYMENT_LABEL = "org.sparkflake.service.deployment"


@dataclass(frozen=True)
class RankRequest:
    service: str  # the value of SERVICE_LABEL on every container of the service
    deployment: str  # the value of DEPLOYMENT_LABEL
    rank: int
    profile: str
    env_file: str
    engine: str
    engine_args: tuple[str, ...]
    state_dir: str  # where the rank keeps its deployments (under the site's data_dir)
    image: str | None = None
    manifest: str | None = None
    checkpoint_pins: str | None = None  # a kept deployment's own copy of its pins file
    replacing: bool = False  # the service's running containers will be stopped before start
    downs: int | None = None  # the rank's count of `service down`s its admission saw (``rank_state.downs_of``)

    def to_json(self) -> str:
        return canonical_json_bytes(asdict(self)).decode()

    @staticmethod
    def from_document(document: Any, where: str) -> RankRequest:
        if not isinstance(document, dict):
            raise InputError(f"{where}: expected a JSON object")
        fields = RankRequest.__dataclass_fields__
        unknown = sorted(set(document) - set(fields))
        if unknown:
            raise InputError(f"{where}: {unknown[0]}: unknown key")
        for key in ("service", "deployment", "profile", "env_file", "engine", "state_dir"):
            if not isinstance(document.get(key), str) or not document[key]:
                raise InputError(f"{where}: {key}: expected a non-empty string")
        rank = document.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise InputError(f"{where}: rank: expected a non-negative integer")
        engine_args = document.get("engine_args", [])
        if not isinstance(engine_args, list) or not all(isinstance(a, str) for a in engine_args):
            raise InputError(f"{where}: engine_args: expected an array of strings")
        for key in ("image", "manifest"):
            value = document.get(key)
            if value is not None and (not isinstance(value, str) or not is_digest(value)):
                raise InputError(f"{where}: {key}: expected sha256:<64 lowercase hex> or null")
        pins = document.get("checkpoint_pins")
        if pins is not None and not isinstance(pins, str):
            raise InputError(f"{where}: checkpoint_pins: expected a path or null")
        if not isinstance(document.get("replacing", False), bool):
            raise InputError(f"{where}: replacing: expected true or false")
        downs = document.get("downs")
        if downs is not None and (isinstance(downs, bool) or not isinstance(downs, int) or downs < 0):
            raise InputError(f"{where}: downs: expected a non-negative integer or null")
        return RankRequest(**{**document, "engine_args": tuple(engine_args)})

    @staticmethod
    def from_json(text: str, where: str) -> RankRequest:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise InputError(f"{where}: not JSON: {exc}") from None
        return RankRequest.from_document(document, where)
