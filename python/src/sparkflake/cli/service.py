"""`sparkflake service up|status|down|rollback|restart SITE`: the whole service, from one
machine with SSH to the ranks. Parses and prints; the work is in workflows/service.py."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.canonical_json import canonical_json_bytes
from ..service.workflow import ProgressEvent
from ._output import print_json, print_line, warn
from ._parsers import add_command, add_group
from ._requests import request_from

if TYPE_CHECKING:  # imported where it is used, after the command is chosen
    from ..workflows.service import ServiceCommandRequest


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = add_group(
        subparsers, "service",
        help="start, check, stop and roll back the whole service across the site's ranks",
        description=(
            "Every rank is reached over SSH as the site file says (the [service] table and each "
            "rank's `rank` number; docs/operator-guide.md). Exit 0 done (up: rank 0 ready; status: "
            "ready), 1 a check or the start failed (every started rank stopped again), 2 bad input "
            "(the site file, an unreachable rank): nothing started."
        ),
    )
    for name, handler, text in (
        ("up", _deploy, "admit every rank, start rank 0 then the others, wait for rank 0's API"),
        ("rollback", _deploy, "start the deployment each rank kept as previous (same admission)"),
        ("restart", _deploy, "start the deployment each rank kept as current again (same admission)"),
        ("down", _down, "stop the service's containers (by label) on every rank"),
        ("status", _status, "per rank: image, settings hash, up since; rank 0 ready?"),
    ):
        parser = add_command(group, name, handler, help=text, description=text, action=name)
        parser.add_argument("site", metavar="SITE", help="the site file (site.toml)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        if name != "status":
            parser.add_argument("--progress", choices=("auto", "json", "none"), default="auto",
                                help="progress per rank on stderr: lines on a terminal (auto), JSON lines, none")
        if name in ("up", "rollback", "restart"):
            parser.add_argument("--ready-timeout", type=int, metavar="SECONDS",
                                help="override [service].ready_timeout")
            parser.add_argument("--sign-key", dest="sign_key_file", metavar="COSIGN_KEY",
                                help="sign the deployment record (password: COSIGN_PASSWORD)")
        if name == "up":
            parser.add_argument("--image", metavar="sha256:CONFIG", help="override [service].image")
            parser.add_argument("--manifest", metavar="sha256:MANIFEST", help="override [service].manifest")
            parser.add_argument("--digests", dest="digests_file", metavar="FILE",
                                help="a build's digests.json: its config and manifest digests")
            parser.add_argument("--replace", action="store_true",
                                help="an upgrade: stop the running deployment after admission, then start")


def _request(args: argparse.Namespace) -> ServiceCommandRequest:
    from ..workflows.service import ServiceCommandRequest

    return request_from(args, ServiceCommandRequest)


def _progress(mode: str) -> Callable[[ProgressEvent], None]:
    if mode == "none" or (mode == "auto" and not sys.stderr.isatty()):
        return lambda event: None

    def show(event: ProgressEvent) -> None:
        if mode == "json":
            sys.stderr.write(canonical_json_bytes(event.as_record()).decode() + "\n")
        else:
            who = f"rank {event.rank} ({event.name})" if event.rank is not None else "service"
            sys.stderr.write(f"{time.strftime('%H:%M:%S', time.localtime(event.at))} {who}: {event.phase}"
                             f"{': ' + event.detail if event.detail else ''}\n")
        sys.stderr.flush()

    return show


def _deploy(args: argparse.Namespace) -> int:
    from ..workflows.service import deploy_service

    request = _request(args)
    # SIGINT and SIGTERM are raised here by cli/_signals (exit 130, 143), as for every command:
    # the start stops what it started (service.workflow.deploy) on the way out
    result = deploy_service(args.action, request, _progress(args.progress))
    record = result.record
    if args.json:
        print_json({**record.to_document(), "record_path": str(result.record_path)})
    else:
        for rank in result.admission.ranks:
            print_line(f"rank {rank.number} ({rank.name}, {rank.host}): admission {'ok' if rank.ok else 'REFUSED'}"
                       f" in {rank.seconds:.1f}s")
            for check in rank.checks:
                if check.status != "pass":
                    print_line(f"  [{check.status}] {check.id}: {check.detail}")
        for check in result.admission.gang:
            print_line(f"  [{check.status}] {check.id}: {check.detail}")
        print_line(f"deployment {record.deployment}: {record.outcome} (record {result.record_path})")
        for rank_record in record.ranks:
            if rank_record.logs:
                print_line(f"rank {rank_record.rank} ({rank_record.name}) last log lines:")
                for line in rank_record.logs:
                    print_line(f"  | {line}")
    for warning in record.warnings:
        warn(f"sparkflake: warning: {warning}")
    if record.failure:
        who = f"rank {record.failure['rank']} ({record.failure['name']})" if record.failure["rank"] is not None \
            else "admission"
        warn(f"sparkflake: {args.action} failed at {who}: {record.failure['reason']}")
    return result.exit_code


def _down(args: argparse.Namespace) -> int:
    from ..workflows.service import stop_service

    result = stop_service(_request(args), _progress(args.progress))
    if args.json:
        print_json({"ranks": result.ranks})
    else:
        for rank in result.ranks:
            print_line(f"rank {rank['rank']} ({rank['name']}): {rank['detail']}")
    return result.exit_code


def _status(args: argparse.Namespace) -> int:
    from ..workflows.service import service_status

    result = service_status(_request(args))
    if args.json:
        print_json(result.as_record())
        return result.exit_code
    for rank in result.ranks:
        if not rank["reachable"]:
            print_line(f"rank {rank['rank']} ({rank['name']}): unreachable: {rank['message']}")
            continue
        if not rank["containers"]:
            print_line(f"rank {rank['rank']} ({rank['name']}): not running (kept deployment {rank['deployment']})")
        for container in rank["containers"]:
            shown = {key: _shown(container.get(key)) for key in ("status", "started_at", "image", "settings_hash",
                                                                  "deployment")}
            print_line(f"rank {rank['rank']} ({rank['name']}): {shown['status']} since {shown['started_at']}, "
                       f"image {shown['image']}, settings {shown['settings_hash']}, "
                       f"deployment {shown['deployment']}")
    print_line(f"service {result.service}: {'ready' if result.ready else 'NOT ready'} ({result.readiness})")
    return result.exit_code


def _shown(value: object) -> str:
    """A container's field as its rank said it; "?" where it said nothing (an agent of
    another version): status prints what there is."""
    return "?" if value is None or value == "" else str(value)
