"""``sparkflake publish OUT REGISTRY/REPO:TAG``: push an image digest-preserving."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..compose import receipt
from ..core.atomic_write import record_written_entry, write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.errors import InputError
from ..oci.artifact import ReferringArtifact, read_referring_artifact
from ..oci.referrers import push_referrer
from ..oci.registry_auth import load_credentials
from ..oci.registry_transfer import push_layout
from ..oci.remote import RegistryClient, parse_reference
from . import _arguments as arguments
from ._output import Progress, print_json, print_line
from ._parsers import add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "publish", run,
        help="push an image (our blobs and manifest bytes) to an OCI registry",
        description=(
            "Push OUT/oci (the layout `sparkflake image build` writes; OUT may also be the "
            "layout itself) to REGISTRY/REPO:TAG. Blobs the registry already has are not "
            "sent again (HEAD first); the manifest goes up byte for byte, and the digest the "
            "registry answers must equal ours. The registry digest is recorded in "
            "publish.json in the working directory (or --record FILE), never in OUT, which may be a "
            "read-only /nix/store path. The build's SBOM (an OCI artifact whose subject is "
            "the image, found through OUT/receipt.json) is pushed too: the registry's referrers "
            "API lists it, or, without that API, the fallback tag sha256-<hex> (an index)."
        ),
    )
    parser.add_argument("out", metavar="OUT", type=Path)
    parser.add_argument("target", metavar="REGISTRY/REPO:TAG")
    parser.add_argument("--insecure", action="store_true", help="plain HTTP (loopback registries only)")
    parser.add_argument("--ca-file", help="CA certificate for a registry with a private CA")
    parser.add_argument("--auth-file", help='JSON {"username": ..., "password": ...} for Basic/token auth')
    parser.add_argument("--no-sbom", action="store_true", help="do not push the SBOM artifact of the build")
    parser.add_argument("--record", type=arguments.output_file,
                        help="where to record the result (default ./publish.json in the working directory)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    target = parse_reference(args.target)
    if target.digest:
        raise InputError(f"{args.target}: publish to a tag, not a digest (the digest is the result)")
    layout = args.out / "oci" if (args.out / "oci" / "index.json").is_file() else args.out
    if not (layout / "index.json").is_file():
        raise InputError(f"{args.out}: neither OUT/oci/index.json nor OUT/index.json exists")
    credentials = load_credentials(args.auth_file) if args.auth_file else None
    client = RegistryClient(target.registry, insecure=args.insecure, ca_file=args.ca_file,
                            credentials=credentials)
    result = push_layout(client, layout, target, progress=Progress("publish"))
    outcome = result.as_record()
    sbom = None if args.no_sbom else sbom_artifact(args.out, layout, result.manifest_digest)
    if sbom is not None:
        outcome["sbom"] = push_referrer(client, target.repository, sbom, result.manifest_digest).as_record()
    record = args.record or Path("publish.json")
    write_bytes_atomic(record, readable_json_bytes(outcome))
    record_written_entry(record.parent, record.name)  # a record put in a build output: the next build may replace it
    if args.json:
        print_json(outcome)
    else:
        print_line(f"pushed {result.reference}")
        print_line(f"manifest {result.manifest_digest}")
        print_line(f"pull by digest: {result.pinned}")
        print_line(f"blobs sent {len(result.blobs_pushed)}, already present {len(result.blobs_present)}")
        print_line(f"recorded in {record}")
        if "sbom" in outcome:
            how = outcome["sbom"]["via"] + (f" {outcome['sbom']['tag']}" if outcome["sbom"]["tag"] else "")
            print_line(f"SBOM artifact {outcome['sbom']['manifest']} (subject {result.manifest_digest}, {how})")
    return 0


def sbom_artifact(out: Path, layout: Path, manifest_digest: str) -> ReferringArtifact | None:
    """The SBOM artifact the build put in the layout, found through OUT/receipt.json (its
    sbom-artifact-manifest byproduct); None for a layout without a receipt beside it."""
    receipt_path = out / "receipt.json"
    if layout == out or not receipt_path.is_file():
        return None
    statement = receipt.load_receipt(receipt_path)
    try:
        found = receipt.byproduct(statement, receipt.SBOM_ARTIFACT)
    except (AttributeError, KeyError, TypeError) as exc:
        raise InputError(f"{receipt_path}: not a receipt with predicate.runDetails.byproducts: {exc}") from None
    if found is None:
        return None
    digest = found.get("digest", {}).get("sha256") if isinstance(found.get("digest"), dict) else None
    if not isinstance(digest, str):
        raise InputError(f"{receipt_path}: byproduct {receipt.SBOM_ARTIFACT}: digest.sha256: expected a hex string")
    return read_referring_artifact(layout, f"sha256:{digest}", manifest_digest)
