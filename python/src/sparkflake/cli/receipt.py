"""`sparkflake receipt verify RECEIPT IMAGE`: re-check a build receipt against an image."""

from __future__ import annotations

import argparse

from ..audit.receipt import ReceiptCheckFailed, verify_receipt
from ._output import print_json, print_line, warn
from ._parsers import add_command, add_group


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "receipt",
        help="verify build receipts (in-toto Statement v1, SLSA provenance v1) against images",
        description="Build receipts written by `sparkflake build` (receipt.json next to the image).",
    )
    verify = add_command(
        commands, "verify", run_verify,
        help="re-derive every digest of IMAGE and compare with RECEIPT",
        description=(
            "IMAGE is an OCI layout directory (optionally DIR:TAG), an oci-archive or a "
            "docker-archive. Checks: subject = manifest digest, config and layer digests, labels, "
            "the in-image receipt and manifests, retained ELF files and overlay targets. "
            "Exit 0 all equal, 1 a check failed, 2 unreadable input."
        ),
    )
    verify.add_argument("receipt", metavar="RECEIPT")
    verify.add_argument("image", metavar="IMAGE")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")


def run_verify(args: argparse.Namespace) -> int:
    try:
        report = verify_receipt(args.receipt, args.image)
    except ReceiptCheckFailed as failure:
        if args.json:
            print_json(failure.report.as_record())
        else:
            for link in failure.report.links:
                print_line(f"{link.status:<6} {link.link}: {link.detail}")
        warn(f"sparkflake: error: {failure}")
        return failure.exit_code
    if args.json:
        print_json(report.as_record())
        return 0
    for link in report.links:
        print_line(f"{link.status:<6} {link.link}: {link.detail}")
    print_line(f"receipt matches {args.image} (manifest {report.manifest_digest}, config {report.config_digest})")
    return 0
