"""`sparkflake runtime check OUT`: the image's own code judges every launch we would make."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for, warn
from ._parsers import add_command, add_group
from ._requests import request_from


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "runtime",
        help="runtime conformance of a built image (its own vLLM, SparkCache, B12X judge)",
    )
    check = add_command(
        commands, "check", run_check_command,
        help="run the image's interpreter on every launch spec of the profile",
        description=(
            "Unpack the verified layers of OUT (a build output directory, an OCI layout or an "
            "archive), run the image's own Python in its root (natively on arm64, under "
            "qemu-user through binfmt_misc elsewhere) and have vLLM's, SparkCache's and the "
            "other components' code accept every launch spec of the profile. Writes "
            "OUT/runtime-capabilities.json and records it in OUT/receipt.json (OUT a build "
            "directory), keeps it in the cache by image ID (where `launch-rank --image` finds it), "
            "and --capabilities FILE if given. "
            "Exit 0 ok, 1 a check failed, 2 bad input."
        ),
    )
    check.add_argument("out", metavar="OUT", type=Path, help="build output directory, OCI layout or archive")
    check.add_argument("--profile", help="profile name or path (default: the image's org.sparkflake.profile label)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress_flag(check)
    check.add_argument("--capabilities", dest="capabilities_file", metavar="FILE", type=arguments.output_file,
                       help="also write the capability manifest here")
    check.add_argument("--scratch", metavar="DIR", type=arguments.path_or_default,
                       help="where the image root is unpacked and kept for reuse after verification "
                            "(default: CACHE/runtime/PROFILE)")
    check.add_argument("--cache", dest="cache_root", metavar="DIR", type=arguments.path_or_default,
                       help="cache root (default $XDG_CACHE_HOME/sparkflake): the capabilities are kept in "
                            "CACHE/capabilities/<image ID hex>.json for launches of this image")
    check.add_argument("--timeout", type=arguments.seconds, default=3600.0, help="seconds the probe may take (default 3600)")


def run_check_command(args: argparse.Namespace) -> int:
    from ..workflows.runtime_check import RuntimeCheckRequest, check_runtime

    result = check_runtime(request_from(args, RuntimeCheckRequest), progress_for("runtime check", args))
    report = result.report
    if args.json:
        print_json(report.as_record())
    else:
        for check in report.checks:
            print_line(f"[{check.status}] {check.id}: {check.detail}")
        seconds = ", ".join(f"{key} {value:.1f} s" for key, value in
                            (("unpack", report.unpack_seconds), ("probe", report.probe_seconds)) if value is not None)
        print_line(f"{result.launch_specs} launch specs judged by the image's code ({seconds})")
    failed = report.failures
    if failed:
        warn(f"sparkflake: runtime check failed: {', '.join(sorted({check.id for check in failed}))}")
    return report.exit_code
