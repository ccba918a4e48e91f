"""``sparkflake sign REF --key KEY``: sign an image in a registry the way cosign does."""

from __future__ import annotations

import argparse

from ..compose.receipt import load_receipt
from ..oci.remote import parse_reference
from ..signing.cosign import sign_image
from ..signing.keys import PASSWORD_VARIABLE, key_password, load_private_key
from ._output import print_json, print_line
from ._parsers import add_command
from ._registry import add_registry_arguments, add_signed_image_arguments, registry_client


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "sign", run,
        help="sign an image's manifest digest (cosign's format) and attest its provenance",
        description=(
            "Sign the manifest digest REGISTRY/REPO:TAG (or @sha256:...) names with a cosign "
            f"private key (password from {PASSWORD_VARIABLE}): the simple-signing payload under "
            "the tag sha256-<hex>.sig, as `cosign sign --key` stores it. With --receipt (the "
            "receipt.json of the build), its SLSA provenance v1 is attached as an in-toto "
            "attestation in a DSSE envelope under sha256-<hex>.att, as `cosign attest --type "
            "slsaprovenance1` stores it; the receipt must be of this manifest digest. Offline: "
            "no transparency log. Verify with `sparkflake verify` or `cosign verify --key PUB "
            "--insecure-ignore-tlog`."
        ),
    )
    add_signed_image_arguments(parser, key_help="cosign private key file (ENCRYPTED SIGSTORE/COSIGN PRIVATE KEY)")
    parser.add_argument("--receipt", help="OUT/receipt.json: attest its provenance too")
    add_registry_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    reference = parse_reference(args.reference)
    key = load_private_key(args.key, key_password())
    receipt = load_receipt(args.receipt) if args.receipt else None
    result = sign_image(registry_client(args, reference.registry), reference, key, receipt, args.receipt or "")
    if args.json:
        print_json(result.as_record())
        return 0
    print_line(f"signed {reference.registry}/{reference.repository}@{result.manifest_digest}")
    print_line(f"signature   :{result.signature.tag}  manifest {result.signature.manifest}")
    if result.attestation:
        print_line(f"attestation :{result.attestation.tag}  manifest {result.attestation.manifest}")
    return 0
