"""The controller's side of the service agent: one SSH session per call (fan-out's transport,
distribute/ssh.py), every rank in parallel where the step allows it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from ..distribute.agent_reply import AgentReply
from ..distribute.site import Rank, Site
from ..distribute.ssh import StartedAgent, ssh_argv
from .rank_request import RankRequest

T = TypeVar("T")


@dataclass(frozen=True)
class ServiceRank:
    """A rank of the site with its serving number and the request the service sends it."""

    site_index: int  # its place in the site file's [[ranks]] (error messages name it)
    rank: Rank
    request: RankRequest

    @property
    def number(self) -> int:
        return self.request.rank


def agent_argv(site: Site, rank: Rank, command: str, request: RankRequest, extra: Sequence[str] = ()) -> list[str]:
    assert site.service is not None  # a service site (cli checks it)
    return ssh_argv(site.ssh, rank.ssh,
                    [*site.service.agent, command, "--request-json", request.to_json(), *extra])


def begin(site: Site, member: ServiceRank, command: str, extra: Sequence[str] = ()) -> StartedAgent:
    """The agent's session, started: ``finish`` for its reply, ``kill`` to end it first."""
    return StartedAgent(agent_argv(site, member.rank, command, member.request, extra))


def call(site: Site, member: ServiceRank, command: str, extra: Sequence[str] = (), *,
         request: RankRequest | None = None, timeout: float | None = None) -> AgentReply:
    argv = agent_argv(site, member.rank, command, request or member.request, extra)
    return StartedAgent(argv).finish("", timeout=timeout)


def watch(site: Site, member: ServiceRank, container: str) -> StartedAgent:
    """A session that ends when the rank's container ends (or SSH to the rank drops)."""
    return StartedAgent(agent_argv(site, member.rank, "watch", member.request, ["--name", container]))


def in_parallel(members: Sequence[ServiceRank], work: Callable[[ServiceRank], T]) -> list[T]:
    if not members:
        return []
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        return list(pool.map(work, members))


def timed(work: Callable[[], T]) -> tuple[T, float]:
    start = time.monotonic()
    result = work()
    return result, time.monotonic() - start
