"""``sparkflake fanout ARCHIVE --site SITE --sha256 HEX``: an archive to every rank;
``sparkflake fanout OUT --site SITE``: an OCI layout, only the blobs each rank lacks."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for, warn
from ._parsers import add_command
from ._requests import request_from


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "fanout", run,
        help="distribute an image to every rank over adjacent links (an archive, or only missing blobs)",
        description=(
            "Archive route (with --sha256): rank 0 holds ARCHIVE (a path on rank 0, or an http(s) "
            "URL it downloads, resumable); it is forwarded rank i -> i+1 over the site's links, "
            "pipelined. Every rank verifies sha256 before the copy takes its final name; a verified "
            "copy is reused, a wrong one moved aside. Blob route (without --sha256): OUT is an OCI "
            "layout on rank 0 (or a build output holding oci/); each rank's image store "
            "(DATA_DIR/image-store) receives only the blobs it does not hold verified, each checked "
            "by size and sha256 before admission; the manifest and index.json are written last; "
            "--import podman copies into podman's store with skopeo, reusing the layers it has. "
            "Exit 0 all ranks verified (and imported), 1 a rank failed, 2 bad input."
        ),
    )
    parser.add_argument("source", metavar="ARCHIVE|OUT", nargs="?")
    parser.add_argument("--site", required=True, type=Path, help="site file (TOML)")
    parser.add_argument("--sha256", help="expected sha256 of the archive (hex): the archive route")
    parser.add_argument("--from-registry", metavar="REGISTRY/REPO@sha256:…",
                        help="registry mode: every rank pulls this digest-pinned image instead")
    parser.add_argument("--platform", default="linux/arm64", type=arguments.platform, help="registry mode: platform (default linux/arm64)")
    parser.add_argument("--insecure-registry", action="store_true",
                        help="registry mode: plain HTTP (loopback registries only)")
    parser.add_argument("--ca-file", help="registry mode: CA certificate path on every rank")
    parser.add_argument("--auth-file", help="registry mode: credentials JSON path on every rank")
    parser.add_argument("--image-id", help="expected image ID (sha256:…), checked before tagging")
    parser.add_argument("--import", dest="engine", choices=("podman", "docker"),
                        help="load the verified archive into this engine on every rank")
    parser.add_argument("--tag", type=arguments.image_reference, help="tag applied after the image ID matched")
    parser.add_argument("--verify", dest="verify_only", action="store_true", help="read-only: report what every rank holds")
    parser.add_argument("--retry-seconds", type=arguments.seconds, default=120.0,
                        help="how long a broken hop keeps resuming after a copy last grew (default 120)")
    parser.add_argument("--evidence-dir", type=Path, help="write one JSON evidence record per rank here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress_flag(parser)


def run(args: argparse.Namespace) -> int:
    from ..workflows.fanout import DistributionRequest, distribute

    result = distribute(request_from(args, DistributionRequest), progress_for("fanout", args))
    if args.json:
        print_json(result.report)
    else:
        for record in result.ranks:
            line = f"{record['rank']}: {record['status']}"
            if record.get("reused"):
                line += " (reused)"
            if record.get("kind") == "fanout-blobs" and record.get("role") != "source":
                line += f", {len(record['blobs_sent'])} blobs sent, {record['blobs_reused']} reused"
            received = record.get("bytes_received", record.get("bytes"))
            if received:
                line += f", {received} bytes received"
            if record.get("imported"):
                line += f", image {record['image_id']}"
            print_line(line)
    for record in result.ranks:
        if record.get("error"):
            warn(f"sparkflake: error: {record['error']}")
    return 0 if result.complete else 1
