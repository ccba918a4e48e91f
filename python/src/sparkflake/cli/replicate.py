"""``sparkflake replicate MODEL_DIR --site SITE``: a checkpoint to every rank, verified."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _arguments as arguments
from ._output import Progress, print_json, print_line, warn
from ._parsers import add_command
from ._requests import request_from


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "replicate", run,
        help="copy a checkpoint directory from rank 0 to every rank, verified per file",
        description=(
            "MODEL_DIR (a directory on rank 0) is listed once into a manifest of per-file size "
            "and sha256; every other rank reuses the files it already holds correctly and "
            "receives the rest over the chain, each file verified before it takes its name. "
            "Exit 0 every rank complete, 1 a rank failed, 2 bad input."
        ),
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR")
    parser.add_argument("--site", required=True, type=Path, help="site file (TOML)")
    parser.add_argument("--dest", help="directory on every other rank (default DATA_DIR/models/NAME)")
    parser.add_argument("--retry-seconds", type=arguments.seconds, default=120.0,
                        help="how long a broken hop keeps resuming after a copy last grew (default 120)")
    parser.add_argument("--evidence-dir", type=Path, help="write one JSON evidence record per rank here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from ..workflows.replicate import ReplicationRequest, replicate_checkpoint

    result = replicate_checkpoint(request_from(args, ReplicationRequest), Progress("replicate"))
    if args.json:
        print_json(result.report)
    else:
        for record in result.ranks:
            print_line(f"{record['rank']}: {record['status']}, {record['files_reused']} reused, "
                       f"{record['files_copied']} copied ({record['bytes_copied']} bytes)")
    for record in result.ranks:
        if record.get("error"):
            warn(f"sparkflake: error: {record['error']}")
    return 0 if result.complete else 1
