"""``sparkflake fanout ARCHIVE --site SITE --sha256 HEX``: an archive to every rank;
``sparkflake fanout OUT --site SITE``: an OCI layout, only the blobs each rank lacks."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.errors import InputError
from ..distribute.blobs import LayoutFanoutRequest, layout_fanout
from ..distribute.fanout import FanoutRequest, fanout
from ..distribute.registry_mode import RegistryFanoutRequest, registry_fanout
from ..distribute.site import load_site
from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for, warn
from ._parsers import add_command


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
    parser.add_argument("archive", metavar="ARCHIVE|OUT", nargs="?")
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
    parser.add_argument("--verify", action="store_true", help="read-only: report what every rank holds")
    parser.add_argument("--retry-seconds", type=arguments.seconds, default=120.0,
                        help="how long a broken hop keeps resuming (default 120)")
    parser.add_argument("--evidence-dir", type=Path, help="write one JSON evidence record per rank here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress_flag(parser)


def run(args: argparse.Namespace) -> int:
    if args.from_registry:
        if args.archive or args.sha256 or args.verify:
            raise InputError("--from-registry replaces ARCHIVE and --sha256 (and has no --verify)")
        site = load_site(args.site)
        report = registry_fanout(site, RegistryFanoutRequest(
            reference=args.from_registry, platform=args.platform, image_id=args.image_id,
            engine=args.engine, tag=args.tag, insecure=args.insecure_registry,
            ca_file=args.ca_file, auth_file=args.auth_file,
        ))
        return _report(args, report)
    if not args.archive:
        raise InputError("fanout needs ARCHIVE and --sha256, a layout OUT, or --from-registry")
    site = load_site(args.site)
    if not args.sha256:
        report = layout_fanout(site, LayoutFanoutRequest(
            layout=args.archive, image_id=args.image_id, engine=args.engine, tag=args.tag,
            verify_only=args.verify, retry_seconds=args.retry_seconds,
        ), progress=progress_for("fanout", args))
        return _report(args, report)
    report = fanout(site, FanoutRequest(
        archive=args.archive, sha256=args.sha256, image_id=args.image_id, engine=args.engine, tag=args.tag,
        verify_only=args.verify, retry_seconds=args.retry_seconds,
    ), progress=progress_for("fanout", args))
    return _report(args, report)


def _report(args: argparse.Namespace, report: dict[str, Any]) -> int:
    if args.evidence_dir:
        for record in report["ranks"]:
            write_bytes_atomic(
                args.evidence_dir / f"{record['rank']}.json",
                readable_json_bytes(record),
            )
    if args.json:
        print_json(report)
    else:
        for record in report["ranks"]:
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
    for record in report["ranks"]:
        if record.get("error"):
            warn(f"sparkflake: error: {record['error']}")
    return 0 if report["complete"] else 1
