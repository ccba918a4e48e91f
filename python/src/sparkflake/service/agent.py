"""The per-rank program of ``sparkflake service``: ``python -m sparkflake.service.agent``.

Fan-out's agent protocol (distribute/agent_protocol.py): stdout is one JSON
object per line, the last one is the result. Exit 0 done, 1 a check failed, 2 bad input,
3 the controller went away (``watch``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from ..core.errors import SparkflakeError
from ..distribute.agent_protocol import controller_gone, emit, run_protocol
from .rank_admission import admit_rank, rank_engine
from .rank_request import RankRequest
from .rank_state import (
    Children,
    commit_rank,
    count_down,
    downs_of,
    kept_deployments,
    rank_lock,
    remove_kept,
    service_containers,
    start_rank,
    stop_service,
    watch_container,
)


def _request(args: argparse.Namespace) -> RankRequest:
    return RankRequest.from_json(args.request_json, "--request-json")


def _admit(args: argparse.Namespace) -> int:
    request = _request(args)
    running: dict[str, str] | None
    try:
        running = {c["name"]: c["deployment"] for c in service_containers(rank_engine(request), request.service)}
    except SparkflakeError:  # no engine: admission's engine.reachable says why
        running = None
    admission = admit_rank(request, running=running)
    # the downs seen now: the start refuses to create a container after another
    facts = {**admission.facts, "downs": downs_of(request.state_dir)}
    emit({"status": "ok" if admission.ok else "failed", "checks": [c.as_record() for c in admission.checks],
           "facts": facts, "argv": admission.argv})
    return 0 if admission.ok else 1


def _start(args: argparse.Namespace) -> int:
    result = start_rank(_request(args), controller_gone)
    emit(result)
    return 0 if result["status"] == "ok" else 1


def _commit(args: argparse.Namespace) -> int:
    request = _request(args)
    emit(commit_rank(request.state_dir, request.deployment))
    return 0


def _kept(args: argparse.Namespace) -> int:
    emit(kept_deployments(_request(args).state_dir))
    return 0


def _status(args: argparse.Namespace) -> int:
    request = _request(args)
    emit({"status": "ok", "containers": service_containers(rank_engine(request), request.service),
           **{k: v for k, v in kept_deployments(request.state_dir).items() if k != "status"}})
    return 0


def _stop(args: argparse.Namespace) -> int:
    request = _request(args)
    # after any start still creating its container; a down is counted (in a state directory
    # it makes) for the starts admitted before it, which then create none
    with rank_lock(request.state_dir, create=args.down):
        if args.down:
            count_down(request.state_dir)
        result = stop_service(rank_engine(request), request.service, args.deployment, args.timeout)
        if args.discard and args.deployment:
            remove_kept(request.state_dir, args.deployment)
    emit(result)
    return 0 if result["status"] == "ok" else 1


def _watch(args: argparse.Namespace) -> int:
    request = _request(args)
    children = Children()

    def until_controller_gone() -> None:
        # the raw fd: end of stdin means the controller closed the watch or lost us;
        # `podman wait` ends with us, not when the container does
        while os.read(0, 65536):
            pass
        children.end_all()
        os._exit(3)

    threading.Thread(target=until_controller_gone, daemon=True).start()
    emit(watch_container(request, args.name, children))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkflake.service.agent")
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--request-json", required=True, help="a RankRequest (service/rank_request.py)")
    for name, handler in (("admit", _admit), ("start", _start), ("commit", _commit), ("kept", _kept),
                          ("status", _status)):
        commands.add_parser(name, parents=[common]).set_defaults(handler=handler)
    stopping = commands.add_parser("stop", parents=[common])
    stopping.add_argument("--deployment", help="only this deployment's containers (default: the whole service)")
    stopping.add_argument("--timeout", type=int, default=30, help="seconds between SIGTERM and SIGKILL")
    stopping.add_argument("--discard", action="store_true", help="and forget the deployment (it never served)")
    stopping.add_argument("--down", action="store_true",
                          help="a `service down`: starts admitted before it create no container")
    stopping.set_defaults(handler=_stop)
    watching = commands.add_parser("watch", parents=[common])
    watching.add_argument("--name", required=True)
    watching.set_defaults(handler=_watch)
    return parser


if __name__ == "__main__":
    sys.exit(run_protocol(build_parser()))
