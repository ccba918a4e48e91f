"""``sparkflake fanout ARCHIVE --site SITE --sha256 HEX``: an archive to every rank."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..atomic_write import write_bytes_atomic
from ..fanout.distribute import FanoutRequest, fanout
from ..fanout.site import load_site
from ._output import Progress, print_json, print_line, warn


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fanout",
        help="distribute a checksum-bound archive to every rank over adjacent links",
        description=(
            "Rank 0 holds ARCHIVE (a path on rank 0, or an http(s) URL it downloads, resumable); "
            "it is forwarded rank i -> i+1 over the site's links, pipelined. Every rank verifies "
            "sha256 before the copy takes its final name; a verified copy is reused, a wrong one "
            "moved aside. Exit 0 all ranks verified (and imported), 1 a rank failed, 2 bad input."
        ),
    )
    parser.add_argument("archive", metavar="ARCHIVE")
    parser.add_argument("--site", required=True, type=Path, help="site file (TOML)")
    parser.add_argument("--sha256", required=True, help="expected sha256 of the archive (hex)")
    parser.add_argument("--image-id", help="expected image ID (sha256:…), checked before tagging")
    parser.add_argument("--import", dest="engine", choices=("podman", "docker"),
                        help="load the verified archive into this engine on every rank")
    parser.add_argument("--tag", help="tag applied after the image ID matched")
    parser.add_argument("--verify", action="store_true", help="read-only: report what every rank holds")
    parser.add_argument("--retry-seconds", type=float, default=120.0,
                        help="how long a broken hop keeps resuming (default 120)")
    parser.add_argument("--evidence-dir", type=Path, help="write one JSON evidence record per rank here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    request = FanoutRequest(
        archive=args.archive,
        sha256=args.sha256,
        image_id=args.image_id,
        engine=args.engine,
        tag=args.tag,
        verify_only=args.verify,
        retry_seconds=args.retry_seconds,
    )
    report = fanout(site, request, progress=Progress("fanout"))
    if args.evidence_dir:
        import json

        for record in report["ranks"]:
            write_bytes_atomic(
                args.evidence_dir / f"{record['rank']}.json",
                (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(),
            )
    if args.json:
        print_json(report)
    else:
        for record in report["ranks"]:
            line = f"{record['rank']}: {record['status']}"
            if record.get("reused"):
                line += " (reused)"
            if record.get("bytes_received"):
                line += f", {record['bytes_received']} bytes received"
            if record.get("imported"):
                line += f", image {record['image_id']}"
            print_line(line)
    for record in report["ranks"]:
        if record.get("error"):
            warn(f"sparkflake: error: {record['error']}")
    return 0 if report["complete"] else 1
