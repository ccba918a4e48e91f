"""``sparkflake verify REF --key PUB``: the image's signature and provenance attestation."""

from __future__ import annotations

import argparse

from ..core.errors import CheckFailed
from ..oci.remote import parse_reference
from ..signing.cosign import resolve_digest, verify_image_signing
from ..signing.keys import load_public_key
from ._output import print_json, print_line
from ._parsers import add_command
from ._registry import add_registry_arguments, add_signed_image_arguments, registry_client


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "verify", run,
        help="verify an image's cosign signature and SLSA provenance attestation",
        description=(
            "Resolve REGISTRY/REPO:TAG to its manifest digest now, then check: a signature by "
            "PUB over a simple-signing payload naming that digest (tag sha256-<hex>.sig), and "
            "an attestation signed by PUB whose in-toto statement is SLSA provenance v1 with "
            "that digest as subject (tag sha256-<hex>.att). Each failure names its check "
            "(signature.present, signature.valid, signature.subject, attestation.*). Exit 0 "
            "both verified, 1 a check failed, 2 unreadable input."
        ),
    )
    add_signed_image_arguments(parser, key_help="PEM public key (cosign.pub)")
    parser.add_argument("--no-attestation", action="store_true", help="check the signature only")
    add_registry_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def run(args: argparse.Namespace) -> int:
    reference = parse_reference(args.reference)
    key = load_public_key(args.key)
    client = registry_client(args, reference.registry)
    digest = resolve_digest(client, reference)
    checks = [
        {"id": outcome.check_id or name, "status": "fail", "detail": outcome.message}
        if isinstance(outcome, CheckFailed) else {"id": name, "status": "pass", "detail": outcome}
        for name, outcome in verify_image_signing(client, reference, key, digest, attestation=not args.no_attestation)
    ]
    failed = any(check["status"] == "fail" for check in checks)
    if args.json:
        print_json({"reference": str(reference), "manifest_digest": digest, "passed": not failed, "checks": checks})
    else:
        print_line(f"verify {reference} -> {digest}")
        for check in checks:
            print_line(f"  {'ok  ' if check['status'] == 'pass' else 'FAIL'} {check['id']:<22} {check['detail']}")
        print_line(f"result: {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0
