"""``sparkflake publish OUT REGISTRY/REPO:TAG``: push an image digest-preserving."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..atomic_write import write_bytes_atomic
from ..errors import InputError
from ..registry import RegistryClient, load_credentials, parse_reference, push_layout
from ._output import Progress, print_json, print_line


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="push an image (our blobs and manifest bytes) to an OCI registry",
        description=(
            "Push OUT/oci (the layout `sparkflake image build` writes; OUT may also be the "
            "layout itself) to REGISTRY/REPO:TAG. Blobs the registry already has are not "
            "sent again (HEAD first); the manifest goes up byte for byte, and the digest the "
            "registry answers must equal ours. The registry digest is recorded in "
            "OUT/publish.json (or --record)."
        ),
    )
    parser.add_argument("out", metavar="OUT", type=Path)
    parser.add_argument("target", metavar="REGISTRY/REPO:TAG")
    parser.add_argument("--insecure", action="store_true", help="plain HTTP (loopback registries only)")
    parser.add_argument("--ca-file", help="CA certificate for a registry with a private CA")
    parser.add_argument("--auth-file", help='JSON {"username": ..., "password": ...} for Basic/token auth')
    parser.add_argument("--record", type=Path, help="where to record the result (default OUT/publish.json)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run)


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
    record = args.record or (args.out / "publish.json")
    write_bytes_atomic(record, (json.dumps(result.as_dict(), indent=2, sort_keys=True) + "\n").encode())
    if args.json:
        print_json(result.as_dict())
    else:
        print_line(f"pushed {result.reference}")
        print_line(f"manifest {result.manifest_digest}")
        print_line(f"pull by digest: {result.pinned}")
        print_line(f"blobs sent {len(result.blobs_pushed)}, already present {len(result.blobs_present)}")
    return 0
