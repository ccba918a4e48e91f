"""The image configuration (OCI image spec config.md): platform, runtime settings,
rootfs diffIDs and history. ``created`` and every history timestamp are the one
SOURCE_DATE_EPOCH, so the config digest (the image ID) depends on content only."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..core.errors import InputError

_ARCH_VARIANTS = {"arm64": "v8", "amd64": None}


@dataclass(frozen=True)
class Platform:
    os: str = "linux"
    architecture: str = "arm64"
    variant: str | None = "v8"

    @classmethod
    def parse(cls, text: str) -> Platform:
        """``linux/arm64`` (variant v8 implied), ``linux/arm64/v8`` or ``linux/amd64``."""
        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) not in (2, 3) or parts[0] != "linux" or parts[1] not in _ARCH_VARIANTS:
            raise InputError(
                f"platform {text!r}: expected linux/arm64, linux/arm64/v8 or linux/amd64"
            )
        variant = _ARCH_VARIANTS[parts[1]]
        if len(parts) == 3 and parts[2] != variant:
            raise InputError(f"platform {text!r}: {parts[1]} supports variant {variant}")
        return cls(os=parts[0], architecture=parts[1], variant=variant)

    def as_record(self) -> dict[str, str]:
        record = {"architecture": self.architecture, "os": self.os}
        if self.variant:
            record["variant"] = self.variant
        return record

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


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


def rfc3339(epoch: int) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def config_document(
    platform: Platform,
    runtime: RuntimeConfig,
    diff_ids: Sequence[str],
    history_comments: Sequence[str],
    created_epoch: int,
) -> dict[str, object]:
    created = rfc3339(created_epoch)
    document: dict[str, object] = {
        **platform.as_record(),
        "created": created,
        "config": runtime.as_record(),
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [
            {"created": created, "created_by": comment, "comment": "sparkflake"}
            for comment in history_comments
        ],
    }
    return document
