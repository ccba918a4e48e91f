"""``sparkflake service up|rollback|restart|status SITE``: one request -> result function each
(``down`` is service/down.py).

``up`` admits every rank in parallel (service/gang.py), starts rank 0 and then the others,
and waits for rank 0's API; any failure on the way (a rank refused at its start, its
container exiting, SSH to it dropping, the deadline) stops every rank it started, in
reverse order, keeping each one's last log lines. ``rollback`` is ``up`` of the deployment
each rank kept as ``previous``. Progress goes to a callback; nothing here prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.errors import CheckFailed, InputError, SparkflakeError
from ..core.interrupts import interrupts_held
from ..distribute.agent_reply import object_at, text_at
from ..distribute.site import Site, load_site
from ..distribute.ssh import AgentsOfARun, StartedAgent
from ..signing.keys import PrivateKey
from .gang import AdmissionReport, RankAdmissionResult, RankFacts, gang_checks, rank_result
from .rank_request import RankRequest
from .readiness import api_base, parse_api_base, probe
from .record import DeploymentRecord, RankRecord, latest_records, write_record
from .remote import ServiceRank, begin, call, in_parallel, timed, watch
from .supply_chain import supply_chain_checks

POLL_SECONDS = 0.5
JOIN_SECONDS = 1.0  # a rank's container still running this long after its start has joined
SETTLE_ROUNDS = 10  # how often the ranks are asked which containers ended, until no more have
COMMIT_SECONDS = 120.0  # a rank's commit (two small files) ended after this: a warning, the service serves


@dataclass(frozen=True)
class ProgressEvent:
    phase: str  # admitted refused started joined ready failed stopped interrupted
    rank: int | None
    name: str | None
    detail: str
    at: float = field(default_factory=time.time)

    def as_record(self) -> dict[str, Any]:
        return {"phase": self.phase, "rank": self.rank, "name": self.name, "detail": self.detail,
                "at": round(self.at, 3)}


Progress = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class ServiceRequest:
    site_path: str
    image: str | None = None  # overrides [service].image
    manifest: str | None = None  # overrides [service].manifest
    ready_timeout: int | None = None  # overrides [service].ready_timeout
    replace: bool = False  # up: stop the running deployment after admission, before the start
    sign_key: PrivateKey | None = None


@dataclass(frozen=True)
class DeployResult:
    record: DeploymentRecord
    record_path: Path
    admission: AdmissionReport

    @property
    def exit_code(self) -> int:
        return 0 if self.record.outcome == "ready" else 1


@dataclass(frozen=True)
class ServiceSite:
    site: Site
    origin: str
    sha256: str
    record_dir: Path

    @property
    def name(self) -> str:
        assert self.site.service is not None
        return self.site.service.name


def open_site(path: str) -> ServiceSite:
    site = load_site(path)
    if site.service is None:
        raise InputError(f"{path}: service: missing (the [service] table says what `sparkflake service` runs)")
    with open(path, "rb") as handle:
        digest = "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()
    record_dir = Path(site.service.record_dir)
    if not record_dir.is_absolute():
        record_dir = Path(path).resolve().parent / record_dir
    return ServiceSite(site, path, digest, record_dir)


def new_deployment_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def members_of(service_site: ServiceSite, deployment: str, request: ServiceRequest) -> list[ServiceRank]:
    site = service_site.site
    settings = site.service
    assert settings is not None
    members = []
    for index, rank in enumerate(site.ranks):
        assert rank.number is not None  # validate_service_ranks
        members.append(ServiceRank(index, rank, RankRequest(
            service=settings.name, deployment=deployment, rank=rank.number, profile=settings.profile,
            env_file=rank.env_file or settings.env_file or "", engine=settings.engine,
            engine_args=rank.engine_args, state_dir=f"{rank.data_dir.rstrip('/')}/service/{settings.name}",
            image=request.image or settings.image, manifest=request.manifest or settings.manifest,
            replacing=request.replace)))
    return sorted(members, key=lambda member: member.number)


def admit(service_site: ServiceSite, members: list[ServiceRank], progress: Progress) -> AdmissionReport:
    """Every rank's checks at once; then the gang's comparisons."""
    def one(member: ServiceRank) -> RankAdmissionResult | SparkflakeError:
        reply, seconds = timed(lambda: call(service_site.site, member, "admit"))
        try:
            result = rank_result(service_site.origin, member, reply, seconds)
        except (InputError, CheckFailed) as exc:  # every rank's refusal in one message
            return exc
        progress(ProgressEvent("admitted" if result.ok else "refused", member.number, member.rank.name,
                               f"{len(result.checks)} checks in {seconds:.1f}s"))
        return result

    (found, seconds) = timed(lambda: in_parallel(members, one))
    errors = [str(item) for item in found if isinstance(item, InputError)]
    if errors:
        raise InputError("; ".join(errors))
    refused = [item for item in found if isinstance(item, CheckFailed)]
    if len(refused) == 1:
        raise refused[0]
    if refused:
        raise CheckFailed("; ".join(item.message for item in refused), check_id=refused[0].check_id)
    ranks = [item for item in found if isinstance(item, RankAdmissionResult)]
    report = AdmissionReport(tuple(ranks), seconds=seconds)
    settings = service_site.site.service
    assert settings is not None
    signed = supply_chain_checks(settings, Path(service_site.origin).resolve().parent, members[0].request.manifest)
    return replace(report, gang=(*gang_checks(ranks, members[0].request.image), *signed))


def _finished_at(container: dict[str, Any]) -> str:
    """When a rank's container ended, as the engine's timestamp text (RFC 3339, which sorts
    as text); "~" (after every digit) when the rank did not say it in that shape."""
    finished = container.get("finished_at")
    return finished if isinstance(finished, str) and finished else "~"


def _lines(logs: Any) -> tuple[str, ...]:
    """A container's last log lines as the rank listed them; what is not a list of lines
    is none (a roll back goes on to the next rank whatever one rank answered)."""
    return tuple(line for line in logs if isinstance(line, str)) if isinstance(logs, list) else ()


class _Start:
    """One deployment being started: what has started where, the watch sessions, the end."""

    def __init__(self, service_site: ServiceSite, progress: Progress) -> None:
        self.service_site = service_site
        self.progress = progress
        self.ranks: dict[int, RankRecord] = {}
        self.watches: dict[int, StartedAgent] = {}
        self.failure: dict[str, Any] | None = None
        self._failing = threading.Lock()  # the ranks start in threads: the first failure wins
        self.sessions = AgentsOfARun()  # the start and watch sessions, ended by an interrupt
        self.replacing = False  # --replace: the running deployment's stop has begun, not ended
        self.replaced_stopped: set[int] = set()  # the ranks where it is stopped
        self.rolled_back: set[int] = set()  # the ranks the roll back has stopped

    def fail(self, member: ServiceRank | None, reason: str, *, overrule: bool = False) -> None:
        """The start's failure; the first one wins, but ``overrule`` (an interrupt: the
        sessions it cut short failed because of it) replaces it."""
        with self._failing:
            if self.failure is not None and not overrule:
                return
            number = member.number if member else None
            name = member.rank.name if member else None
            self.failure = {"rank": number, "name": name, "reason": reason}
        self.progress(ProgressEvent("failed", number, name, reason))

    def start_all(self, members: list[ServiceRank]) -> None:
        """Rank 0, then the others together, each in a thread of its own: an interrupt lands
        in this thread, which then ends every start session (its rank's agent, finding its
        session gone, creates no container) and waits for the threads before the roll back."""
        with ThreadPoolExecutor(max_workers=len(members)) as pool:
            try:
                pool.submit(self.start, members[0]).result()
                if self.failure is None:
                    for started in [pool.submit(self.start, member) for member in members[1:]]:
                        started.result()
            except BaseException:
                self.sessions.end_all()
                raise

    def start(self, member: ServiceRank) -> None:
        session = self.sessions.begin(lambda: begin(self.service_site.site, member, "start"))
        if session is None:
            return
        reply = session.finish("")
        record = self.ranks[member.number]
        container, container_id = reply.text("container"), reply.text("container_id")
        started = reply.returncode == 0 and reply.text("status") == "ok" and container is not None \
            and container_id is not None
        if self.sessions.ended and not started:  # ended by an interrupt, which is the failure
            return
        if reply.unreachable:
            self.fail(member, f"SSH to rank {member.number} ({member.rank.ssh}) lost: {reply.describe_failure()}")
            return
        if not started or container is None or container_id is None:
            self.fail(member, f"rank {member.number} did not start: {reply.describe_failure()}")
            return
        self.ranks[member.number] = replace(record, container=container, container_id=container_id,
                                            started_at=time.time())
        watching = self.sessions.begin(lambda: watch(self.service_site.site, member, container))
        if watching is None:
            return
        self.watches[member.number] = watching
        self.progress(ProgressEvent("started", member.number, member.rank.name, container))

    def check_watches(self, members: list[ServiceRank]) -> None:
        """Mark ranks joined; on the first container that ended (or SSH that dropped), fail
        the start naming the rank that ended first: one rank's death ends its peers too."""
        ended = [m for m in members if m.number in self.watches and self.watches[m.number].process.poll() is not None]
        if self.failure is not None:
            return
        if not ended:
            for member in members:
                record = self.ranks[member.number]
                if member.number in self.watches and record.joined_at is None and record.started_at \
                        and time.time() - record.started_at >= JOIN_SECONDS:
                    self.ranks[member.number] = replace(record, joined_at=time.time())
                    self.progress(ProgressEvent("joined", member.number, member.rank.name, "running"))
            return
        # one rank's death ends its peers too: ask every started rank which container ended
        # first (the engines' FinishedAt), rather than trusting which watch reported first;
        # ask again until no more have ended (an engine records an exit a moment late)
        started = [m for m in members if m.number in self.watches]
        self.close_watches()
        exited: list[tuple[str, int, ServiceRank, dict[str, Any]]] = []
        for _ in range(SETTLE_ROUNDS):
            replies = in_parallel(started, lambda member: call(self.service_site.site, member, "status"))
            lost = [m for m, reply in zip(started, replies, strict=True) if reply.unreachable]
            if lost:
                self.fail(lost[0], f"SSH to rank {lost[0].number} ({lost[0].rank.ssh}) lost")
                return
            seen = [(_finished_at(container), member.number, member, container)
                    for member, reply in zip(started, replies, strict=True)
                    for container in reply.containers
                    if container.get("deployment") == member.request.deployment and not container.get("running")]
            answered = all(reply.returncode == 0 for reply in replies)  # a busy engine: ask again
            if answered and seen and len(seen) == len(exited):
                break
            exited = seen
            time.sleep(POLL_SECONDS)
        if not exited:  # the watch ended without its container: the session itself broke
            self.fail(ended[0], f"the SSH session watching rank {ended[0].number} ({ended[0].rank.ssh}) ended "
                                "while its container still runs")
            return
        _, _, first, container = min(exited, key=lambda found: found[:2])
        ended_too = ", ".join(f"rank {number} (status {c.get('exit_code')}, {when})"
                              for when, number, _, c in sorted(exited, key=lambda found: found[:2]))
        self.fail(first, f"rank {first.number}'s container exited with status {container.get('exit_code')} "
                         f"during start (ended: {ended_too})")

    def close_watches(self) -> None:
        for session in self.watches.values():
            session.cancel()
        self.watches.clear()

    def stop_replaced(self, members: list[ServiceRank], stop_timeout: int) -> None:
        """``--replace``: the running deployment stopped, last rank first."""
        self.replacing = True
        for member in reversed(members):
            call(self.service_site.site, member, "stop", ["--timeout", str(stop_timeout)])
            self.replaced_stopped.add(member.number)
        self.replacing = False

    def finish_replaced(self, members: list[ServiceRank], stop_timeout: int) -> None:
        """An interrupt cut the running deployment's stop short: stop it on the ranks not done
        too (a gang with a rank stopped does not serve; half of it would run on for nothing),
        which leaves it as a failed upgrade does: stopped, and still each rank's ``current``."""
        if not self.replacing:
            return
        for member in reversed(members):
            if member.number in self.replaced_stopped:
                continue
            reply = call(self.service_site.site, member, "stop", ["--timeout", str(stop_timeout)])
            detail = (f"stopped the replaced deployment's {len(reply.containers)} container(s)" if reply.returncode == 0
                      else f"could not stop the replaced deployment: {reply.describe_failure()}; "
                           "run `sparkflake service down` once it is reachable")
            self.replaced_stopped.add(member.number)
            self.progress(ProgressEvent("stopped", member.number, member.rank.name, detail))
        self.replacing = False

    def roll_back(self, members: list[ServiceRank], stop_timeout: int) -> None:
        """Stop the deployment's containers on every rank, last rank first, keeping each
        one's last log lines. Every rank, not only those whose start answered: a start whose
        answer was lost (SSH dropped, an interrupt) may have left a container; the label
        filter finds it or nothing, after any start still creating one (the rank's lock,
        service/rank_state.py). A rank stopped already (a roll back an interrupt cut short
        runs again) is not asked again."""
        self.sessions.end_all()
        self.close_watches()
        self.finish_replaced(members, stop_timeout)
        for member in reversed(members):
            if member.number in self.rolled_back:
                continue
            record = self.ranks[member.number]
            reply = call(self.service_site.site, member, "stop",
                         ["--deployment", member.request.deployment, "--timeout", str(stop_timeout), "--discard"])
            containers = reply.containers
            logs = tuple(line for container in containers for line in _lines(container.get("logs")))
            if reply.returncode == 0:
                detail = f"stopped {len(containers)} container(s)"
            else:
                detail = f"could not stop: {reply.describe_failure()}; run `sparkflake service down` once it is reachable"
            self.ranks[member.number] = replace(record, stopped_at=time.time(), logs=logs)
            self.rolled_back.add(member.number)
            self.progress(ProgressEvent("stopped", member.number, member.rank.name, detail))


def deploy(service_site: ServiceSite, members: list[ServiceRank], request: ServiceRequest, kind: str,
           progress: Progress, replaced: str | None = None) -> DeployResult:
    """Admission; then, from the stop of the deployment it replaces until rank 0 is ready,
    any failure or interrupt rolls back (``_start_or_roll_back``); once rank 0 is ready, the
    ranks' commit and the record are one step an interrupt waits for (``interrupts_held``):
    the command then ends by it, the deployment up and recorded as ready — rolled back
    there, it would leave ranks that had committed it keeping as ``current`` a deployment
    that no longer runs, and the one it replaced stopped all the same."""
    settings = service_site.site.service
    assert settings is not None
    began = time.time()
    admission = admit(service_site, members, progress)
    starting = _Start(service_site, progress)
    starting.ranks = {m.number: RankRecord(m.rank.name, m.number, m.rank.ssh, m.rank.management) for m in members}
    if not admission.ok:
        starting.failure = {"rank": None, "name": None, "reason": "admission refused: " + " | ".join(admission.failures())}
        record, path = _record(service_site, members, request, kind=kind, began=began, outcome="refused",
                               admission=admission, starting=starting, replaced=replaced)
        return DeployResult(record, path, admission)
    # each rank's start carries the count of downs its admission saw: a `service down` since
    # then refuses it (the rank creates no container), and this start rolls back
    downs = {result.number: result.facts.downs for result in admission.ranks}
    members = [replace(member, request=replace(member.request, downs=downs.get(member.number)))
               for member in members]
    with contextlib.ExitStack() as ready:  # an interrupt held from rank 0's readiness on comes here, at its end
        outcome = _start_or_roll_back(starting, service_site, members, request, admission, kind=kind, began=began,
                                      replaced=replaced,
                                      hold=lambda: ready.enter_context(interrupts_held()))
        warnings: list[str] = []
        if outcome == "ready":
            starting.close_watches()
            commits = in_parallel(members, lambda member: call(service_site.site, member, "commit",
                                                               timeout=COMMIT_SECONDS))
            for member, reply in zip(members, commits, strict=True):
                if reply.returncode != 0:  # it serves, but a later rollback or restart would not find it
                    warnings.append(f"rank {member.number} ({member.rank.name}) could not keep deployment "
                                    f"{member.request.deployment} as current: {reply.describe_failure()}")
                    progress(ProgressEvent("failed", member.number, member.rank.name, warnings[-1]))
        record, path = _record(service_site, members, request, kind=kind, began=began, outcome=outcome,
                               admission=admission, starting=starting, replaced=replaced, warnings=tuple(warnings))
    return DeployResult(record, path, admission)


def _start_or_roll_back(starting: _Start, service_site: ServiceSite, members: list[ServiceRank],
                        request: ServiceRequest, admission: AdmissionReport, *, kind: str, began: float,
                        replaced: str | None, hold: Callable[[], object]) -> str:
    """``ready`` (interrupts held from then on: ``hold``), or ``failed`` with every rank
    rolled back. An interrupt (or an error) on the way rolls back too, records the run as
    failed and goes on out; the interrupt is the failure named, unless the start had failed
    already (its roll back was under way)."""
    settings = service_site.site.service
    assert settings is not None
    decided = False
    try:
        if request.replace:
            starting.stop_replaced(members, settings.stop_timeout)
        outcome = _start_and_wait(starting, service_site, members, request, admission.ranks[0].facts, hold=hold)
        decided = True
        if outcome != "ready":
            starting.roll_back(members, settings.stop_timeout)
        return outcome
    except BaseException as exc:  # SIGINT, SIGTERM as the CLI delivers it, or any error: leave nothing half up
        interrupted = isinstance(exc, KeyboardInterrupt)
        reason = "interrupted" if interrupted else f"{type(exc).__name__}: {exc}"
        if starting.replaced_stopped or starting.replacing:
            reason += ("; the deployment it replaces was stopped (the roll back stops it on every rank) and is "
                       "still each rank's current: `sparkflake service restart` starts it again")
        starting.fail(None, reason, overrule=interrupted and not decided)
        starting.roll_back(members, settings.stop_timeout)
        _record(service_site, members, request, kind=kind, began=began, outcome="failed", admission=admission,
                starting=starting, replaced=replaced)
        raise


def _record(service_site: ServiceSite, members: list[ServiceRank], request: ServiceRequest, *, kind: str,
            began: float, outcome: str, admission: AdmissionReport, starting: _Start,
            replaced: str | None, warnings: tuple[str, ...] = ()) -> tuple[DeploymentRecord, Path]:
    settings = service_site.site.service
    assert settings is not None
    facts = admission.ranks[0].facts  # read in their shapes (gang.RankFacts): the record reads back
    record = DeploymentRecord(
        deployment=members[0].request.deployment, service=settings.name, kind=kind, site=service_site.origin,
        site_sha256=service_site.sha256, profile=settings.profile, config_digest=facts.image,
        manifest_digest=members[0].request.manifest, settings_hash=facts.settings_hash,
        checkpoint_pins_sha256=facts.pins_sha256, spec_hash=facts.spec_hash, outcome=outcome,
        started_at=began, finished_at=time.time(), ranks=tuple(starting.ranks[m.number] for m in members),
        admission=admission.as_record(), failure=starting.failure, replaced=replaced,
        api=api_base(members[0].rank.management, facts.api_port), served_model=facts.served_model,
        warnings=warnings)
    return record, write_record(service_site.record_dir, record, request.sign_key)


def _start_and_wait(starting: _Start, service_site: ServiceSite, members: list[ServiceRank],
                    request: ServiceRequest, first: RankFacts, *, hold: Callable[[], object]) -> str:
    """Start every rank, then wait for rank 0 (``members[0]``) to answer ready; ``hold``
    once it has: what follows is the commit and the record, not a roll back."""
    rank0 = members[0]
    settings = service_site.site.service
    assert settings is not None
    starting.start_all(members)
    deadline = time.monotonic() + (request.ready_timeout or settings.ready_timeout)
    last = "not asked yet"
    while starting.failure is None:
        starting.check_watches(members)
        if starting.failure is not None:
            break
        answer = probe(rank0.rank.management, first.api_port, first.served_model)
        last = answer.detail
        if answer.ready:
            starting.check_watches(members)  # a rank that ended meanwhile fails the start still
            if starting.failure is None:
                hold()  # ready: what comes now is the commit and the record, not a roll back
                starting.progress(ProgressEvent("ready", 0, rank0.rank.name, answer.detail))
                return "ready"
            break
        if time.monotonic() > deadline:
            timeout = request.ready_timeout or settings.ready_timeout
            starting.fail(rank0, f"rank 0 not ready within {timeout}s: {last}")
            break
        time.sleep(POLL_SECONDS)
    return "failed"


def up(request: ServiceRequest, progress: Progress) -> DeployResult:
    service_site = open_site(request.site_path)
    members = members_of(service_site, new_deployment_id(), request)
    return deploy(service_site, members, request, "up", progress)


def rollback(request: ServiceRequest, progress: Progress) -> DeployResult:
    """Start the deployment every rank kept as ``previous``, through the same admission."""
    return start_kept(request, progress, "previous")


def restart(request: ServiceRequest, progress: Progress) -> DeployResult:
    """Start the deployment every rank kept as ``current`` again (after ``down``, a failed
    upgrade or a host's reboot), through the same admission."""
    return start_kept(request, progress, "current")


def start_kept(request: ServiceRequest, progress: Progress, which: str) -> DeployResult:
    service_site = open_site(request.site_path)
    members = members_of(service_site, new_deployment_id(), request)
    replies = in_parallel(members, lambda member: call(service_site.site, member, "kept"))
    previous, current = [], set()
    for member, reply in zip(members, replies, strict=True):
        where = f"{service_site.origin}: ranks[{member.site_index}]"
        if reply.unreachable:
            raise InputError(f"{where}.ssh: {member.rank.ssh} is unreachable: {reply.describe_failure()}")
        kept = reply.result or {}
        if reply.returncode != 0 or kept.get(which) is None:
            raise CheckFailed(f"rank {member.number} ({member.rank.name}) keeps no {which} deployment"
                              f"{': ' + reply.describe_failure() if reply.returncode else ''}")
        found = RankRequest.from_document(kept[which], f"{where}: kept {which} deployment")
        # the rank's number is the site's, which the controller asked by; a kept deployment
        # of another number (the site renumbered since, or a confused agent) would start a
        # gang with two members of one number, or one the others never wait for
        if found.rank != member.number:
            raise CheckFailed(f"rank {member.number} ({member.rank.name}) keeps a {which} deployment "
                              f"{found.deployment} of rank {found.rank}: the site numbers it {member.number} "
                              f"(renumbered since?); nothing started", check_id="service.kept-rank")
        previous.append(found)
        current.add(_kept_current(kept, f"rank {member.number} ({member.rank.name}, {member.rank.ssh}): kept"))
    if len({p.deployment for p in previous}) != 1:
        raise CheckFailed(f"the ranks keep different {which} deployments: "
                          + ", ".join(f"rank {p.rank}: {p.deployment}" for p in previous))
    deployment = members[0].request.deployment
    members = [replace(member, request=replace(kept, deployment=deployment, replacing=True,
                                               engine_args=member.request.engine_args))
               for member, kept in zip(members, previous, strict=True)]
    replaced = current.pop() if len(current) == 1 else None
    kind = "rollback" if which == "previous" else "restart"
    return deploy(service_site, members, replace(request, replace=True), kind, progress, replaced)


def _kept_current(kept: dict[str, Any], where: str) -> str | None:
    """The deployment a rank keeps as current (the one a rollback replaces), or None."""
    if kept.get("current") is None:
        return None
    return text_at(object_at(kept, "current", where), "deployment", where, "$.current")


@dataclass(frozen=True)
class StatusResult:
    service: str
    ranks: list[dict[str, Any]]
    ready: bool
    readiness: str
    deployment: DeploymentRecord | None

    @property
    def exit_code(self) -> int:
        return 0 if self.ready else 1

    def as_record(self) -> dict[str, Any]:
        return {"service": self.service, "ready": self.ready, "readiness": self.readiness, "ranks": self.ranks,
                "deployment": self.deployment.deployment if self.deployment else None}


def status(request: ServiceRequest) -> StatusResult:
    """Per rank: the service's container (image, settings hash, up since, state) and the kept
    deployment; rank 0's API asked for readiness at the address the last ready record names."""
    service_site = open_site(request.site_path)
    members = members_of(service_site, "status", request)
    replies = in_parallel(members, lambda member: call(service_site.site, member, "status"))
    ranks = []
    for member, reply in zip(members, replies, strict=True):
        found = reply.result or {}
        containers = reply.containers
        kept_current = found.get("current")
        ranks.append({"rank": member.number, "name": member.rank.name, "host": member.rank.ssh,
                      "reachable": not reply.unreachable, "containers": containers,
                      "deployment": kept_current.get("deployment") if isinstance(kept_current, dict) else None,
                      "running": any(c.get("running") for c in containers),
                      "message": "" if reply.returncode == 0 else reply.describe_failure()})
    ready_records = [r for r in latest_records(service_site.record_dir, service_site.name) if r.outcome == "ready"]
    record = ready_records[-1] if ready_records else None
    ready, readiness = False, "no ready deployment recorded"
    if record is not None and record.api and record.served_model and all(rank["running"] for rank in ranks):
        answer = probe(*parse_api_base(record.api), record.served_model)
        ready, readiness = answer.ready, answer.detail
    elif record is not None:
        readiness = "not every rank runs the service"
    return StatusResult(service_site.name, ranks, ready, readiness, record)
