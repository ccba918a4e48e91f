"""The verification chain: named links, each a check over the assembled composition.

The chain runs after the layer trees, manifests, labels and receipt are made and before
any image output is written. Every link runs (so one report names every broken link),
then a single ``CheckFailed`` names the first failing link as its ``check_id`` and lists
all failures. The results (link, status, detail) go into the receipt.

Link ids (stable, used in messages, the receipt and tests):
``inputs``, ``retained-native``, ``overlay``, ``patches``, ``absences``, ``elf-machine``,
``labels``, ``claims``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.errors import CheckFailed, SparkflakeError
from ..core.records import field_record

PASSED = "passed"
FAILED = "failed"


@dataclass(frozen=True)
class LinkResult:
    """One link of a verification chain as the report records it: passed or failed, and
    what it verified or why it failed."""

    link: str
    status: str
    detail: str

    def as_record(self) -> dict[str, str]:
        return field_record(self)


@dataclass(frozen=True)
class Link:
    """One check: returns a short description of what it verified, or raises."""

    link_id: str
    description: str
    check: Callable[[], str]


def run_chain(links: Sequence[Link]) -> list[LinkResult]:
    """Run every link; raise ``CheckFailed`` naming the first failing one if any failed."""
    results: list[LinkResult] = []
    for link in links:
        try:
            detail = link.check()
        except SparkflakeError as exc:
            results.append(LinkResult(link.link_id, FAILED, exc.message))
        else:
            results.append(LinkResult(link.link_id, PASSED, detail))
    failures = [result for result in results if result.status == FAILED]
    if failures:
        lines = "; ".join(f"{result.link}: {result.detail}" for result in failures)
        raise ChainFailed(
            f"verification chain refused the image ({len(failures)} of {len(results)} "
            f"links failed): {lines}",
            check_id=failures[0].link,
            results=results,
        )
    return results


class ChainFailed(CheckFailed):
    def __init__(self, message: str, *, check_id: str, results: list[LinkResult]) -> None:
        super().__init__(message, check_id=check_id)
        self.results = results


def require_no_problems(problems: Sequence[str], what: str, link_id: str, limit: int = 10) -> None:
    if problems:
        shown = "; ".join(problems[:limit])
        more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
        raise CheckFailed(f"{what}: {shown}{more}", check_id=link_id)
