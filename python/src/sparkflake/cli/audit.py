"""`sparkflake audit TARGET`: re-derive every digest of an image and compare."""

from __future__ import annotations

import argparse

from ..audit.report import REPORT_SCHEMA
from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for
from ._parsers import add_command
from ._requests import request_from

_SYMBOL = {"pass": "ok  ", "fail": "FAIL", "error": "ERR ", "skip": "skip"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "audit", run,
        help="is this image exactly what the lock, receipt and profile say?",
        description=(
            "Re-derive every digest of an image from its bytes and compare it with the "
            "documents, the lock, the receipt, the profile and --expect. TARGET: oci:DIR[:TAG] (a build's OUT: OUT/oci), "
            "oci-archive:FILE, docker-archive:FILE (or a plain path), "
            "docker://HOST[:PORT]/REPO:TAG or docker://HOST/REPO@sha256:..., podman:NAME|ID, "
            "docker:NAME|ID. Exit 0 every check passed, 1 a mismatch, 2 unreadable."
        ),
    )
    parser.add_argument("target", metavar="TARGET")
    parser.add_argument("--profile", help="expect this profile's platform and labels (and its lock)")
    parser.add_argument("--lock", dest="lock_file", metavar="LOCK", help="the receipt's dependencies must equal this lock")
    parser.add_argument("--receipt", dest="receipt_file", metavar="RECEIPT",
                        help="the full receipt (in-toto statement) written next to the image")
    parser.add_argument(
        "--expect", action="append", default=[], metavar="sha256:HEX@KIND",
        help="expected digest; KIND: manifest, config (= image-id), index, chain-id, layer, diff-id",
    )
    parser.add_argument("--expect-file", help="expected digests (digests.json shape)")
    parser.add_argument("--platform", type=arguments.platform, help="platform to pick from an index (default: the profile's)")
    parser.add_argument("--insecure", action="store_true", help="plain HTTP to a registry on loopback")
    parser.add_argument("--engine-arg", dest="engine_args", action="append", default=[], metavar="ENGINE_ARG",
                        help="extra argument for podman/docker (repeat)")
    parser.add_argument("--max-layer-bytes", type=arguments.byte_count, help="refuse a layer that decompresses to more")
    parser.add_argument("--sbom", dest="sbom_file", metavar="FILE",
                        help="check this SPDX SBOM (OUT/sbom.spdx.json) against the image, receipt and lock; "
                        "for a registry target also that the registry lists it as a referrer of the image")
    parser.add_argument("--key", dest="key_file", metavar="PUB",
                        help="registry targets: verify the cosign signature and provenance attestation with this public key")
    parser.add_argument("--record", dest="record_file", metavar="FILE", type=arguments.output_file,
                        help="write the digest-verification record (JSON)")
    parser.add_argument("--json", action="store_true", help="machine-readable report (schema versioned)")
    add_progress_flag(parser)


def run(args: argparse.Namespace) -> int:
    from ..workflows.audit import AuditRequest, UnreadableTarget, audit_target

    try:
        report = audit_target(request_from(args, AuditRequest), progress_for("audit", args))
    except UnreadableTarget as exc:
        if args.json:
            print_json({
                "schema": REPORT_SCHEMA, "kind": "sparkflake.audit", "target": args.target,
                "passed": False, "checks": [{"id": exc.check_id or "image.readable", "status": "error", "detail": exc.message, "digest": None}],
            })
        raise
    if args.json:
        print_json(report.as_record())
        return report.exit_code
    print_line(f"audit of {report.target} ({report.source_kind})")
    for check in report.checks:
        digest = f"  [{check.digest}]" if check.digest and check.status in ("fail", "error") else ""
        print_line(f"  {_SYMBOL[check.status]} {check.id:<24} {check.detail}{digest}")
    print_line("digests:")
    print_line(f"  manifest (published digest)   {report.manifest_digest or '-'}")
    if report.index_digest:
        print_line(f"  index                         {report.index_digest}")
    print_line(f"  config (local image ID)       {report.config_digest or '-'}")
    if report.engine_image_id:
        print_line(f"  engine image ID               {report.engine_image_id}")
    print_line(f"  chainID                       {report.chain_id or '-'}")
    for position, layer in enumerate(report.layers):
        print_line(f"  layer {position}: {layer.digest}  diffID {layer.diff_id}  {layer.size} bytes")
    verdict = {0: "PASS", 1: "MISMATCH", 2: "UNREADABLE"}[report.exit_code]
    print_line(f"result: {verdict} ({len(report.failures)} failing of {len(report.checks)} checks)")
    return report.exit_code
