"""The image configuration (OCI image spec config.md): platform, runtime settings,
rootfs diffIDs and history. ``created`` and every history timestamp are the one
SOURCE_DATE_EPOCH, so the config digest (the image ID) depends on content only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.canonical_json import canonical_json_bytes
from ..core.timestamps import rfc3339
from .types import Platform


@dataclass(frozen=True)
class RuntimeConfig:
    """The ``config`` object of an image config; ``None``/empty fields are omitted."""

    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    working_dir: str | None = None
    user: str | None = None
    exposed_ports: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    stop_signal: str | None = None

    def as_record(self) -> dict[str, object]:
        record: dict[str, object] = {}
        if self.env:
            record["Env"] = list(self.env)
        if self.entrypoint is not None:
            record["Entrypoint"] = list(self.entrypoint)
        if self.cmd is not None:
            record["Cmd"] = list(self.cmd)
        if self.working_dir:
            record["WorkingDir"] = self.working_dir
        if self.user:
            record["User"] = self.user
        if self.exposed_ports:
            record["ExposedPorts"] = {port: {} for port in sorted(self.exposed_ports)}
        if self.labels:
            record["Labels"] = dict(sorted(self.labels.items()))
        if self.stop_signal:
            record["StopSignal"] = self.stop_signal
        return record


@dataclass(frozen=True)
class ImageConfig:
    """The image configuration document (config.md); its digest is the image ID."""

    platform: Platform
    runtime: RuntimeConfig
    diff_ids: Sequence[str]
    history_comments: Sequence[str]
    created_epoch: int

    def as_record(self) -> dict[str, Any]:
        created = rfc3339(self.created_epoch)
        return {
            **self.platform.as_record(),
            "created": created,
            "config": self.runtime.as_record(),
            "rootfs": {"type": "layers", "diff_ids": list(self.diff_ids)},
            "history": [
                {"created": created, "created_by": comment, "comment": "sparkflake"}
                for comment in self.history_comments
            ],
        }

    def to_bytes(self) -> bytes:
        return canonical_json_bytes(self.as_record())
