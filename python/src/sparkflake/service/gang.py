"""Gang admission: every rank's own checks (run on the rank, in parallel) and the comparisons
only the whole gang can make — one image, one settings hash, one checkpoint pins hash, one
rendered spec up to the rank-specific fields, one topology — in one report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.check_result import ERROR, FAIL, PASS, SKIP, CheckResult
from ..core.errors import CheckFailed, InputError
from ..distribute.agent_reply import (
    AgentReply,
    MalformedReply,
    count_at,
    object_at,
    objects_at,
    optional_text_at,
    text_at,
)
from .remote import ServiceRank

STATUSES = (PASS, FAIL, ERROR, SKIP)
MAX_PORT = 65535


@dataclass(frozen=True)
class RankFacts:
    """What the controller takes from a rank's ``admit`` facts (service/rank_admission.py),
    each read in the shape it is used: the gang compares the hashes (and shows the
    differences of what they hash) and the topology; rank 0's go into the readiness probe
    and the deployment record, which `service status` reads back and refuses in another
    shape."""

    image: str  # "" when neither the site nor the profile names one (the rank's own check refuses that)
    settings_hash: str
    settings: dict[str, Any]
    pins_sha256: str
    pins: dict[str, Any]
    spec_hash: str
    spec: dict[str, Any]
    node_address: str
    master_address: str
    node_count: int
    api_port: int
    served_model: str
    downs: int | None = None  # the rank's count of `service down`s (an agent of an earlier version: None)

    @staticmethod
    def from_reply(result: dict[str, Any], where: str) -> RankFacts:
        facts, path = object_at(result, "facts", where), "$.facts"

        def text(key: str) -> str:
            return text_at(facts, key, where, path)

        def table(key: str) -> dict[str, Any]:
            return object_at(facts, key, where, path)

        api_port = count_at(facts, "api_port", where, path)
        if not 0 < api_port <= MAX_PORT:  # the record's api is http://ADDRESS:PORT, read back as such
            raise MalformedReply(where, f"{path}.api_port", f"a port from 1 to {MAX_PORT}", api_port)
        return RankFacts(
            image="" if facts.get("image") == "" else text("image"), settings_hash=text("settings_hash"),
            settings=table("settings"), pins_sha256=text("pins_sha256"), pins=table("pins"),
            spec_hash=text("spec_hash"), spec=table("spec"), node_address=text("node_address"),
            master_address=text("master_address"), node_count=count_at(facts, "node_count", where, path),
            api_port=api_port, served_model=text("served_model"),
            downs=count_at(facts, "downs", where, path) if "downs" in facts else None)


@dataclass(frozen=True)
class RankAdmissionResult:
    name: str
    number: int
    host: str
    checks: tuple[CheckResult, ...]
    facts: RankFacts
    seconds: float

    @property
    def ok(self) -> bool:
        return all(check.status == PASS for check in self.checks)

    def as_record(self) -> dict[str, Any]:
        return {"name": self.name, "rank": self.number, "host": self.host, "ok": self.ok,
                "seconds": round(self.seconds, 3), "checks": [c.as_record() for c in self.checks]}


@dataclass(frozen=True)
class AdmissionReport:
    ranks: tuple[RankAdmissionResult, ...]
    gang: tuple[CheckResult, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(rank.ok for rank in self.ranks) and all(check.status == PASS for check in self.gang)

    def failures(self) -> list[str]:
        found = [f"rank {rank.number} ({rank.name}): {check.id}: {check.detail}"
                 for rank in self.ranks for check in rank.checks if check.status != PASS]
        return found + [f"{check.id}: {check.detail}" for check in self.gang if check.status != PASS]

    def as_record(self) -> dict[str, Any]:
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "ranks": [r.as_record() for r in self.ranks],
                "gang": [c.as_record() for c in self.gang]}


def rank_result(origin: str, member: ServiceRank, reply: AgentReply, seconds: float) -> RankAdmissionResult:
    """One rank's reply as checks and facts; an unreachable rank or bad input on it is bad
    input of the site (exit 2, nothing started); an agent that ended before its checks (a
    traceback, a failure of its own) or a reply of another shape is that rank's refusal
    (CheckFailed, MalformedReply: exit 1, nothing started)."""
    where = f"{origin}: ranks[{member.site_index}]"
    if reply.unreachable:
        raise InputError(f"{where}.ssh: {member.rank.ssh} is unreachable: {reply.describe_failure()}")
    result = reply.result
    if reply.returncode == 2:
        raise InputError(f"{where} ({member.rank.name}, rank {member.number}): {reply.describe_failure()}")
    if result is None or (result.get("status") == "failed" and "checks" not in result):
        raise CheckFailed(f"{where} ({member.rank.name}, rank {member.number}): the agent ended with exit status "
                          f"{reply.returncode} before its checks: {reply.describe_failure()}", check_id="service.admit")
    # an agent of another version, or a damaged one: what it answered is refused here, by
    # rank and JSON path, before anything starts, never as a traceback, and never as a
    # value a deployment record cannot be read back with (status reads every record)
    who = f"rank {member.number} ({member.rank.name}, {member.rank.ssh}): admit"
    checks = tuple(_check(item, who, f"$.checks[{index}]")
                   for index, item in enumerate(objects_at(result, "checks", who)))
    if not checks:  # all of no checks passed: a rank that checked nothing is not admitted
        raise MalformedReply(who, "$.checks", "at least one check", result["checks"])
    return RankAdmissionResult(member.rank.name, member.number, member.rank.ssh, checks,
                               RankFacts.from_reply(result, who), seconds)


def _check(item: dict[str, Any], where: str, path: str) -> CheckResult:
    status = text_at(item, "status", where, path)
    if status not in STATUSES:
        raise MalformedReply(where, f"{path}.status", "one of " + ", ".join(STATUSES), status)
    detail = "" if item.get("detail") == "" else text_at(item, "detail", where, path)  # a check may say nothing
    return CheckResult(text_at(item, "id", where, path), status, detail, optional_text_at(item, "digest", where, path))


def gang_checks(ranks: Sequence[RankAdmissionResult], expected_image: str | None) -> list[CheckResult]:
    first = ranks[0]
    checks = [_same(ranks, "gang.image", "image", "image")]
    if expected_image is not None and checks[0].status == PASS and first.facts.image != expected_image:
        checks[0] = CheckResult("gang.image", FAIL, f"the ranks would run {first.facts.image}, "
                                                    f"the site names {expected_image}")
    checks.append(_same(ranks, "gang.settings", "settings_hash", "settings hash", detail_key="settings"))
    checks.append(_same(ranks, "gang.checkpoint-pins", "pins_sha256", "checkpoint pins (the pinned files' hash)",
                        detail_key="pins"))
    checks.append(_same(ranks, "gang.spec", "spec_hash", "rendered launch spec (rank fields aside)",
                        detail_key="spec"))
    checks.append(_topology(ranks))
    return checks


def _same(ranks: Sequence[RankAdmissionResult], check_id: str, key: str, what: str,
          detail_key: str | None = None) -> CheckResult:
    first = ranks[0]
    differing = [rank for rank in ranks[1:] if getattr(rank.facts, key) != getattr(first.facts, key)]
    if not differing:
        return CheckResult(check_id, PASS, f"every rank: {what} {getattr(first.facts, key)}")
    parts = []
    for rank in differing:
        text = f"rank {rank.number} ({rank.name}) has {getattr(rank.facts, key)}, rank 0 {getattr(first.facts, key)}"
        if detail_key is not None:
            text += ": " + "; ".join(differences(getattr(first.facts, detail_key), getattr(rank.facts, detail_key)))
        parts.append(text)
    return CheckResult(check_id, FAIL, f"{what} differs: " + " | ".join(parts))


def _topology(ranks: Sequence[RankAdmissionResult]) -> CheckResult:
    master = ranks[0].facts.node_address
    problems = [f"rank {r.number} ({r.name}): NODE_COUNT={r.facts.node_count}, the site has {len(ranks)} ranks"
                for r in ranks if r.facts.node_count != len(ranks)]
    problems += [f"rank {r.number} ({r.name}): MASTER_ADDRESS={r.facts.master_address}, "
                 f"rank 0's NODE_ADDRESS is {master}" for r in ranks if r.facts.master_address != master]
    if problems:
        return CheckResult("gang.topology", FAIL, "; ".join(problems))
    return CheckResult("gang.topology", PASS, f"{len(ranks)} ranks, rendezvous at rank 0 ({master})")


def differences(first: Any, other: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as ``path: first -> other`` lines; lists of strings
    (serve arguments, ulimits) by the options one has and the other lacks, an option
    being ``--flag`` with the values that follow it."""
    if isinstance(first, dict) and isinstance(other, dict):
        found = []
        for key in sorted(set(first) | set(other)):
            here = f"{path}.{key}" if path else str(key)
            if key not in other:
                found.append(f"{here}: {first[key]!r} -> absent")
            elif key not in first:
                found.append(f"{here}: absent -> {other[key]!r}")
            else:
                found += differences(first[key], other[key], here)
        return found
    if isinstance(first, list) and isinstance(other, list) and first != other:
        if all(isinstance(item, str) for item in (*first, *other)):
            mine, theirs = options(first), options(other)
            lost = [item for item in mine if item not in theirs]
            gained = [item for item in theirs if item not in mine]
            if lost or gained:
                return [f"{path}: without {lost!r}, with {gained!r}"]
        return [f"{path}: {first!r} -> {other!r}"]
    return [] if first == other else [f"{path}: {first!r} -> {other!r}"]


def options(arguments: list[str]) -> list[str]:
    """``["m", "--port", "8000", "--x"]`` -> ``["m", "--port 8000", "--x"]``."""
    grouped: list[str] = []
    for argument in arguments:
        if grouped and grouped[-1].startswith("--") and not argument.startswith("--") and " " not in grouped[-1]:
            grouped[-1] += f" {argument}"
        else:
            grouped.append(argument)
    return grouped
