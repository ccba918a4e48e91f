"""``sparkflake publish OUT REGISTRY/REPO:TAG``: push an image digest-preserving."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import _arguments as arguments
from ._output import Progress, print_json, print_line
from ._parsers import add_command
from ._registry import add_registry_arguments
from ._requests import request_from


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
    add_registry_arguments(parser)
    parser.add_argument("--no-sbom", dest="push_sbom", action="store_false",
                        help="do not push the SBOM artifact of the build")
    parser.add_argument("--record", dest="record_file", metavar="RECORD", type=arguments.output_file,
                        default=Path("publish.json"),
                        help="where to record the result (default ./publish.json in the working directory)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from ..workflows.publish import PublishRequest, publish

    request = request_from(args, PublishRequest)
    result = publish(request, Progress("publish"))
    pushed = result.pushed
    if args.json:
        print_json(result.record)
    else:
        print_line(f"pushed {pushed.reference}")
        print_line(f"manifest {pushed.manifest_digest}")
        print_line(f"pull by digest: {pushed.pinned}")
        print_line(f"blobs sent {len(pushed.blobs_pushed)}, already present {len(pushed.blobs_present)}")
        print_line(f"recorded in {request.record_file}")
        if result.sbom is not None:
            how = result.sbom.via + (f" {result.sbom.tag}" if result.sbom.tag else "")
            print_line(f"SBOM artifact {result.sbom.manifest_digest} (subject {pushed.manifest_digest}, {how})")
    return 0
