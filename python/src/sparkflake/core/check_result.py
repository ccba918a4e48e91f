"""One check's result: a stable id, a status (``pass``, ``fail``, ``error``, ``skip``), what was
found, and the digest involved. The audit and the runtime check report in these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: str
    detail: str
    digest: str | None = None

    def as_record(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "detail": self.detail, "digest": self.digest}
