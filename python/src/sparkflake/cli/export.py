"""``sparkflake export OUT --format KIND``: the archive of a build output, written from its layout."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..oci.archive_export import ARCHIVE_KINDS, export_archive
from ._output import add_progress_flag, human_bytes, print_json, print_line, progress_for
from ._parsers import add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "export", run,
        help="write the oci-archive or docker-archive of a build output from its OCI layout",
        description=(
            "Write OUT/KIND.tar (or -o FILE) from the OCI layout OUT/oci of a `sparkflake build`: "
            "the bytes a build with --formats KIND writes. The archive is read back and verified "
            "(every blob and diffID re-derived) against OUT/digests.json before it replaces "
            "FILE; nothing is written when a check fails. OUT/KIND.tar replaces only the archive "
            "sparkflake wrote there: an operator's file or a symlink of that name is refused."
        ),
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="the output directory of a build")
    parser.add_argument("--format", dest="kind", required=True, choices=ARCHIVE_KINDS,
                        help="docker-archive (docker load, the fan-out's archive route) or oci-archive")
    parser.add_argument("-o", "--output", metavar="FILE", type=Path, help="where to write it (default OUT/KIND.tar)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_progress_flag(parser)


def run(args: argparse.Namespace) -> int:
    exported = export_archive(args.out, args.kind, args.output, progress_for("export", args))
    if args.json:
        print_json({"format": exported.kind, "archive": str(exported.path), "size": exported.size,
                    "manifest": exported.manifest_digest, "config": exported.config_digest})
    else:
        print_line(f"wrote {exported.path} ({exported.kind}, {human_bytes(exported.size)}), verified: "
                   f"manifest {exported.manifest_digest}, image ID {exported.config_digest}")
    return 0
