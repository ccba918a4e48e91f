"""``sparkflake load OUT``: load a built image into podman or docker and check its image ID."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import InputError
from ..distribute.engine import ENGINES, import_archive
from ..oci.digests_file import DIGESTS_FILE, read_digests_file
from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for
from ._parsers import add_command

ARCHIVES = ("docker-archive.tar", "oci-archive.tar")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "load", run,
        help="load a built image into podman or docker; its image ID must equal our config digest",
        description=(
            "Load OUT/docker-archive.tar (else OUT/oci-archive.tar; else, into podman, the "
            "layout OUT/oci, what a build writes by default) of a `sparkflake build` "
            "output into the engine's local store and check that the image ID the engine "
            "reports equals the config digest of OUT/digests.json; then tag it (--tag). "
            "docker loads archives only: `sparkflake export OUT --format docker-archive` first."
        ),
    )
    parser.add_argument("out", metavar="OUT", type=Path)
    parser.add_argument("--engine", choices=ENGINES, default="podman")
    parser.add_argument("--engine-arg", dest="engine_args", action="append", default=[], metavar="ARG",
                        help="an argument for the engine before its command (repeatable), e.g. --storage-driver=vfs")
    parser.add_argument("--tag", type=arguments.image_reference, help="tag the loaded image (default: none)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_progress_flag(parser)


def run(args: argparse.Namespace) -> int:
    config_digest = read_digests_file(args.out / DIGESTS_FILE).image_id
    archive = next((args.out / name for name in ARCHIVES if (args.out / name).is_file()), None)
    if archive is None:
        archive = loadable_layout(args.out, args.engine)
    result = import_archive(args.engine, args.engine_args, str(archive), config_digest, args.tag,
                            progress_for("load", args))
    if args.json:
        print_json({"engine": result.engine, "archive": str(archive), "image_id": result.image_id,
                    "loaded": list(result.loaded), "tag": result.tag})
    else:
        print_line(f"{result.engine}: loaded {archive}, image ID {result.image_id} (equal to the config digest)")
    return 0


def loadable_layout(out: Path, engine: str) -> Path:
    """OUT/oci when there is no archive (a build's default): `podman load -i DIR` loads
    an OCI layout directory as it loads an archive (Debian 12's podman 4.3.1 does; the image
    ID is still checked against the config digest); docker loads tar archives only."""
    layout = out / "oci"
    if not (layout / "index.json").is_file():
        raise InputError(f"{out}: no {' or '.join(ARCHIVES)} and no OCI layout oci/")
    if engine != "podman":
        raise InputError(f"{out}: {engine} loads archives only, and this output has the OCI layout alone; "
                         f"write its archive first: sparkflake export {out} --format docker-archive")
    return layout
