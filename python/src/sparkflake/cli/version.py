"""``sparkflake version [--json]``: the tool's version and the builder identity."""

from __future__ import annotations

import argparse

from ..core.builder_identity import builder_identity
from ._output import print_json, print_line
from ._parsers import add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "version", run,
        help="print sparkflake's version and the versions of what decides image bytes",
        description=(
            "Print sparkflake's version, the interpreter's, and those of the libraries whose "
            "code decides image bytes or check results (deflate, installer, packaging, "
            "zstandard, zlib, zstd). The receipt beside each image records the same as its "
            "builder."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print the versions as a JSON object")


def run(args: argparse.Namespace) -> int:
    versions = builder_identity()
    if args.json:
        print_json(versions)
    else:
        width = max(map(len, versions))
        for name, version in versions.items():
            print_line(f"{name:<{width}}  {version}")
    return 0
