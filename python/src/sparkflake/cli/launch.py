"""`sparkflake launch-rank RANK ENVFILE`: verify and start one rank (or --dry-run)."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from typing import Any

from ..core.check_result import exit_code_of
from ..core.errors import InputError
from . import _arguments as arguments
from ._output import print_json, print_line, warn
from ._parsers import add_command
from ._requests import request_from


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "launch-rank", run,
        help="verify and start one rank from runtime.env and the profile's contract",
        description=(
            "Parse ENVFILE as data, resolve every setting (auto rules, compatibility and "
            "coupling checks), verify the image, the checkpoints (against the site's pins "
            "file, CHECKPOINT_PINS), the cache root and the ports, then exec the container "
            "engine (replacing this process). Exit 0 ok, "
            "1 a check failed (nothing started), 2 bad input."
        ),
    )
    parser.add_argument("rank", metavar="RANK", help="this host's rank (0 is the master)")
    parser.add_argument("env_file", metavar="ENVFILE", help="runtime.env of this rank")
    parser.add_argument("--profile", default="glm53-dflash7", help="profile name or path (default glm53-dflash7)")
    parser.add_argument("--engine", choices=("podman", "docker"), help="container engine (default: detected)")
    parser.add_argument(
        "--engine-arg",
        dest="engine_args",
        action="append",
        default=[],
        metavar="ARG",
        help="global engine option, repeatable (also SPARKFLAKE_PODMAN_ARGS / SPARKFLAKE_DOCKER_ARGS)",
    )
    parser.add_argument("--image", metavar="sha256:ID", help="image ID to launch (default: the profile's pin)")
    parser.add_argument("--digests", dest="digests_file", metavar="FILE", help="a build's digests.json: launch its config digest")
    parser.add_argument("--cache", dest="cache_root", metavar="DIR", type=arguments.path_or_default,
                        help="where `runtime check` kept the capabilities of each image "
                        "(default $XDG_CACHE_HOME/sparkflake; CACHE/capabilities/<image ID hex>.json)")
    parser.add_argument("--dry-run", action="store_true", help="check and print, start nothing")
    parser.add_argument("--json", action="store_true", help="print the launch report as JSON")
    parser.add_argument("--explain", action="store_true", help="say where each value came from and what vLLM selects per layer kind (runtime-capabilities)")
    parser.add_argument("--rehash", action="store_true", help="ignore the verified-hash cache")
    parser.add_argument("--detach", action="store_true", help="start the container detached")


def parse_rank(text: str) -> int:
    """RANK as ASCII decimal digits only: ``str.isdigit`` (and ``int``) also take ``²``
    or other scripts' digits."""
    if not re.fullmatch(r"0|[1-9][0-9]{0,3}", text):
        raise InputError(f"RANK {text!r}: expected a non-negative decimal integer (ASCII digits, at most 9999)")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from ..workflows.launch import LaunchRequest, exec_rank, launch_inputs, plan_rank, start_rank

    request = request_from(args, LaunchRequest, rank=parse_rank(args.rank))
    inputs = launch_inputs(request)
    if inputs.engine_problem is not None:
        warn(f"sparkflake: {inputs.engine_problem}")
    plan = plan_rank(request, inputs)
    report = plan.report(explain=args.explain)
    if args.json:
        print_json(report)
    else:
        _print_human(report, explain=args.explain)
    if not plan.ok:
        failed = ", ".join(c.id for c in plan.checks if c.status != "pass")
        warn(f"sparkflake: refusing to start rank {request.rank}: failed check(s): {failed}")
        return exit_code_of(plan.checks)  # 2 where a check could not judge its input
    if args.dry_run:
        return 0
    for decision in start_rank(plan):
        if decision.action == "quarantined":
            warn(f"sparkflake: {decision.path}: moved to {decision.quarantine} ({decision.reason}); cold start")
    sys.stdout.flush()
    sys.stderr.flush()
    exec_rank(plan)


def _print_human(report: dict[str, Any], *, explain: bool) -> None:
    print_line(f"profile {report['profile']} rank {report['rank']}: {report['qualification']['status']}")
    for difference in report["qualification"]["differences"]:
        print_line(f"  differs from qualified: {difference}")
    print_line(f"runtime identity {report['identity_hash']} (namespace {report['namespace']})")
    for check in report["checks"]:
        print_line(f"  [{check['status']}] {check['id']}: {check['detail']}")
    if explain:
        for key, origin in report["explain"].items():
            print_line(f"  {key}={report['resolved'][key]!r}  <- {origin}")
        selection = report["kernel_selection"]
        if not selection["judged"]:
            print_line(f"  kernel selection: not judged: {selection['why']}")
        else:
            print_line(f"  kernel selection by vLLM on the profile's device ({selection['source']}), "
                       f"KV block size {selection['block_size']}:")
            for kind, choice in selection["layers"].items():
                print_line(f"    {kind}: {choice.get('choice') or 'refused: ' + str(choice.get('refusal'))}")
    print_line(shlex.join(report["argv"]))


def main(argv: list[str] | None = None) -> int:
    """`launch-rank` alone, without importing every other command group (a launcher
    started on every rank should not pay for the build stages' imports)."""
    from . import _Parser
    from ._output import run_command

    def parse() -> argparse.Namespace:
        parser = _Parser(prog="sparkflake-launch-rank")
        register(parser.add_subparsers(dest="command", parser_class=_Parser))
        return parser.parse_args(["launch-rank", *(sys.argv[1:] if argv is None else argv)])

    return run_command(parse, process_ends=argv is None)

if __name__ == "__main__":
    sys.exit(main())
