"""`sparkflake hash`: NAR hashes, git tree ids, file digests, hash form conversion."""

from __future__ import annotations

import argparse
import os

from ..core import digest, tree_digest
from ._output import print_json, print_line
from ._parsers import add_command, add_group


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "hash",
        help="hash paths and files; convert hash forms",
        description=(
            "Hashes as Nix and git compute them. Forms: SRI (sha256-<base64>), base16, "
            "nix32 (Nix's base-32). Exit 0 success, 2 bad input."
        ),
        metavar="HASH_COMMAND",
    )

    path_parser = add_command(
        commands, "path", run_path,
        help="NAR hash of a path (as `nix hash path`), or its git tree id with --git",
        description=(
            "Print the NAR hash of PATH as SRI (equal to `nix hash path`), or with --git the "
            "tree id `git add -A && git write-tree` would store for the directory."
        ),
        form="sri",
    )
    path_parser.add_argument("path", metavar="PATH")
    form = path_parser.add_mutually_exclusive_group()
    form.add_argument(
        "--sri", dest="form", action="store_const", const="sri", help="SRI form (default)"
    )
    form.add_argument(
        "--base16", dest="form", action="store_const", const="base16", help="base16 form"
    )
    form.add_argument(
        "--nix32", dest="form", action="store_const", const="nix32", help="nix32 form"
    )
    form.add_argument("--git", action="store_true", help="print the git tree id instead")
    path_parser.add_argument(
        "--type",
        dest="algorithm",
        choices=sorted(digest.HASH_SIZES),
        default="sha256",
        help="NAR hash algorithm (default sha256)",
    )
    path_parser.add_argument(
        "--object-format",
        choices=tree_digest.GIT_OBJECT_FORMATS,
        default="sha1",
        help="git object format for --git (default sha1)",
    )

    file_parser = add_command(
        commands, "file", run_file,
        help="sha256 of a file's bytes (SRI and base16)",
        description="Print the sha256 of FILE's bytes: the SRI form, then base16.",
    )
    file_parser.add_argument("path", metavar="FILE")

    convert_parser = add_command(
        commands, "convert", run_convert,
        help="re-encode a hash (SRI, algo:base16, algo:nix32, or bare with --type)",
        description=(
            "Re-encode HASH. Accepted: SRI (sha256-…=), sha256:<base16|nix32|base64>, or a "
            "bare base16/nix32 digest with --type."
        ),
    )
    convert_parser.add_argument("hash", metavar="HASH")
    convert_parser.add_argument("--to", required=True, choices=("sri", "base16", "nix32", "base64"))
    convert_parser.add_argument(
        "--type",
        dest="algorithm",
        choices=sorted(digest.HASH_SIZES),
        default=None,
        help="algorithm of a bare digest (also checked against a prefixed one)",
    )
    for parser in (path_parser, file_parser, convert_parser):
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def run_path(args: argparse.Namespace) -> int:
    if args.git:
        tree_id = tree_digest.git_tree_id(args.path, args.object_format)
        if args.json:
            print_json(
                {
                    "path": os.path.abspath(args.path),
                    "git_tree": tree_id,
                    "object_format": args.object_format,
                }
            )
        else:
            print_line(tree_id)
        return 0
    nar = tree_digest.nar_digest(args.path, args.algorithm)
    if args.json:
        print_json(
            {
                "path": os.path.abspath(args.path),
                "nar_hash": nar.nar_hash.sri,
                "base16": nar.nar_hash.base16,
                "nix32": nar.nar_hash.nix32,
                "nar_size": nar.nar_size,
            }
        )
    else:
        print_line(nar.nar_hash.format(args.form))
    return 0


def run_file(args: argparse.Namespace) -> int:
    flat = digest.file_digest(args.path, "sha256")
    if args.json:
        print_json(
            {
                "path": os.path.abspath(args.path),
                "sha256": flat.file_hash.base16,
                "sri": flat.file_hash.sri,
                "size": flat.size,
            }
        )
    else:
        print_line(flat.file_hash.sri)
        print_line(flat.file_hash.base16)
    return 0


def run_convert(args: argparse.Namespace) -> int:
    parsed = digest.parse_hash(args.hash, args.algorithm, what="HASH", algorithm_option="--type")
    converted = parsed.format(args.to)
    if args.json:
        print_json(
            {
                "algorithm": parsed.algorithm,
                "hash": converted,
                "sri": parsed.sri,
                "base16": parsed.base16,
                "nix32": parsed.nix32,
            }
        )
    else:
        print_line(converted)
    return 0
