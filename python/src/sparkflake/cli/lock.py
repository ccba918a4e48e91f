"""`sparkflake lock validate FILE`: is this lock file well formed? (and the dispatch to
`sparkflake lock PROFILE`, which lives in ``cli/lock_profile.py``)

The ``lock`` command reads its first word as a positional, not as a sub-parser choice, so
that resolution, ``sparkflake lock PROFILE [--check | --update NAME]`` (``sparkflake.lock``),
can share the command: a first word found in ``ACTIONS`` runs that action, any other word
is for the profile mode, which adds its options in ``register`` and its branch in ``run``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable

from ..core.errors import InputError
from ..lock.lock_file import load_lock, lock_to_dict
from ..lock.pins import KINDS
from ._output import print_json, print_line
from ._parsers import add_command

EXIT_OK = 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "lock", run,
        help="validate a lock file, or resolve a profile's lock",
        description=(
            "sparkflake lock validate FILE [--json]: check a lock file (schema, every pin's "
            "hashes, URLs, sizes, unique names); exit 0 valid, 2 invalid, the message names the "
            "file and the place (e.g. inputs[3].sha256). "
            "sparkflake lock PROFILE [--check | --update NAME]: resolve the profile's inputs "
            "into its lock, verify the lock offline (--check), or refresh one input. "
            "Format: docs/lock-format.md."
        ),
    )
    parser.add_argument(
        "action", metavar="ACTION", help="validate, or a PROFILE to resolve its lock"
    )
    parser.add_argument("file", metavar="FILE", nargs="?", help="the lock file (TOML)")
    parser.add_argument("--json", action="store_true", help="print the parsed lock as JSON")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="PROFILE mode: verify offline that the lock is complete and matches the profile",
    )
    mode.add_argument(
        "--update",
        metavar="NAME",
        action="append",
        help="PROFILE mode: refresh this input, keep every other pin; repeat it to refresh "
        "inputs that must move together (a compiler and its headers) in one resolution",
    )
    parser.add_argument(
        "--exclude-newer",
        metavar="DATE",
        help="PROFILE mode: resolve the Python inputs from the files the index had before this UTC "
        "date or time (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ), so a resolution made again later gives "
        "the same pins; the Debian indices are read as they are now",
    )


def run(args: argparse.Namespace) -> int:
    action = ACTIONS.get(args.action)
    if action is None:
        if args.file is not None:
            raise InputError(
                f"lock {args.action}: unexpected argument {args.file!r} (FILE goes with `lock validate`)"
            )
        from .lock_profile import run_profile  # resolution: sparkflake.lock

        return run_profile(args)
    return action(args)


def run_validate(args: argparse.Namespace) -> int:
    if args.file is None:
        raise InputError("lock validate: missing FILE")
    if getattr(args, "check", False) or getattr(args, "update", None) or getattr(args, "exclude_newer", None):
        raise InputError("lock validate: --check, --update and --exclude-newer belong to `sparkflake lock PROFILE`")
    lock = load_lock(args.file)
    if args.json:
        print_json({"file": args.file, "valid": True, "lock": lock_to_dict(lock)})
        return EXIT_OK
    counts = Counter(pin.kind for pin in lock.inputs)
    summary = ", ".join(f"{counts[kind]} {kind}" for kind in KINDS if counts[kind]) or "no inputs"
    print_line(f"{args.file}: valid (schema {lock.schema}, {lock.target.platform}, {summary})")
    return EXIT_OK


ACTIONS: dict[str, Callable[[argparse.Namespace], int]] = {"validate": run_validate}
