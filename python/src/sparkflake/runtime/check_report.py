"""What the runtime check hands on: a launch case (plain data the launcher makes) and the
report, one ``CheckResult`` per check with a stable id, and the capabilities found."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.check_result import CheckList
from .capabilities import Capabilities


@dataclass(frozen=True)
class Case:
    name: str
    serve_args: tuple[str, ...]
    env: Mapping[str, str]
    # the profile's default launch: its served models are also constructed on the meta
    # device (in_image/probe_meta_model.py), which one case per profile pays for
    construct_models: bool = False

    def as_record(self) -> dict[str, Any]:
        record = {"name": self.name, "serve_args": list(self.serve_args), "env": dict(sorted(self.env.items()))}
        return {**record, "construct_models": True} if self.construct_models else record


@dataclass
class CheckReport(CheckList):
    capabilities: Capabilities | None = None
    probe_seconds: float | None = None
    import_seconds: float | None = None
    unpack_seconds: float | None = None
    bytecode_seconds: float | None = None
    emulation: str = ""

    def as_record(self) -> dict[str, Any]:
        return {
            "schema": "sparkflake.runtime-check/v1",
            "ok": self.exit_code == 0,
            "emulation": self.emulation,
            "seconds": {"unpack": self.unpack_seconds, "bytecode": self.bytecode_seconds, "probe": self.probe_seconds,
                        "imports": self.import_seconds},
            "checks": [check.as_record() for check in self.checks],
            "capabilities": self.capabilities.as_record() if self.capabilities else None,
        }
