"""``sparkflake service down SITE``: the service's containers stopped (by its label) on every
rank, last rank first. A rank's agent counts the down (``rank_state.count_down``): a start
admitted before it, on that rank, creates no container (``service.workflow.deploy``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..distribute.agent_reply import AgentReply
from .remote import ServiceRank, call
from .workflow import Progress, ProgressEvent, ServiceRequest, ServiceSite, members_of, open_site

# what the agent of a sparkflake from before the count of downs says to ``stop --down``
# (argparse, exit 2; seen from that version's agent)
_NO_DOWN_OPTION = "sparkflake.service.agent: error: unrecognized arguments: --down"


@dataclass(frozen=True)
class DownResult:
    ranks: list[dict[str, Any]]

    @property
    def exit_code(self) -> int:
        return 0 if all(rank["ok"] for rank in self.ranks) else 1


def down(request: ServiceRequest, progress: Progress) -> DownResult:
    """Stop the service's containers (by its label) on every rank, last rank first."""
    service_site = open_site(request.site_path)
    settings = service_site.site.service
    assert settings is not None
    members = members_of(service_site, "down", request)
    results: list[dict[str, Any]] = []
    try:
        for member in reversed(members):
            reply = _stop_counted(service_site, member, settings.stop_timeout)
            containers = [str(c.get("name")) for c in reply.containers]
            ok = reply.returncode == 0
            detail = f"stopped {', '.join(containers) or 'nothing (no container of the service)'}" if ok \
                else f"could not stop: {reply.describe_failure()}"
            progress(ProgressEvent("stopped" if ok else "failed", member.number, member.rank.name, detail))
            results.append({"rank": member.number, "name": member.rank.name, "ok": ok, "containers": containers,
                            "detail": detail})
    except KeyboardInterrupt as interrupt:
        left = list(reversed(members))[len(results):]
        if left:  # else it came after the last rank's stop: nothing is left running
            interrupt.add_note(_cut_down(progress, left, request.site_path))
        raise
    return DownResult(sorted(results, key=lambda r: r["rank"]))


def _stop_counted(service_site: ServiceSite, member: ServiceRank, timeout: int) -> AgentReply:
    """The rank's ``stop --down``; a rank whose agent is from before the count of downs is
    stopped as it was then (a start admitted there before this down is not refused: its
    agent keeps no count). Refusing such a rank's stop would leave it running."""
    stop = ["--timeout", str(timeout)]
    reply = call(service_site.site, member, "stop", [*stop, "--down"])
    if reply.returncode == 2 and reply.result is None and _NO_DOWN_OPTION in reply.stderr:
        reply = call(service_site.site, member, "stop", stop)
    return reply


def _cut_down(progress: Progress, left: list[ServiceRank], site_path: str) -> str:
    """An interrupt ended ``down`` while it stopped ``left[0]`` (its SSH session ended with it,
    the rank's stop may go on); the ranks after it were not asked. A partial gang may run
    now: each rank left is named, and the line returned says what brings the site to one
    state again."""
    cut, *not_asked = left
    progress(ProgressEvent("interrupted", cut.number, cut.rank.name, "interrupted while it stopped: its container "
                           "may still run"))
    for member in not_asked:
        progress(ProgressEvent("interrupted", member.number, member.rank.name, "not stopped: interrupted before it"))
    named = ", ".join(f"rank {member.number} ({member.rank.name})" for member in left)
    return (f"service down was interrupted; not known to be stopped: {named}; `sparkflake service down "
            f"{site_path}` stops the rest, `sparkflake service restart {site_path}` starts the service again")
