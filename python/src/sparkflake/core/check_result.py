"""One check's result: a stable id, a status (``pass``, ``fail``, ``error``, ``skip``), what was
found, and the digest involved. The audit and the runtime check report in these, each a
``CheckList``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .records import field_record

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: str
    detail: str
    digest: str | None = None

    def as_record(self) -> dict[str, Any]:
        return field_record(self)


def failed_checks(checks: Iterable[CheckResult]) -> list[CheckResult]:
    return [check for check in checks if check.status in (FAIL, ERROR)]


def exit_code_of(checks: Iterable[CheckResult]) -> int:
    """The exit status of a report: 2 if a check could not judge (bad input), 1 if one
    failed, else 0."""
    statuses = {check.status for check in checks}
    return 2 if ERROR in statuses else 1 if FAIL in statuses else 0


@dataclass(kw_only=True)
class CheckList:
    """A report's checks in the order they ran, and the verdict they give; the audit's and
    the runtime check's reports add their findings to it."""

    checks: list[CheckResult] = field(default_factory=list)

    def add(self, check_id: str, status: str, detail: str, digest: str | None = None) -> CheckResult:
        result = CheckResult(check_id, status, detail, digest)
        self.checks.append(result)
        return result

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return failed_checks(self.checks)
