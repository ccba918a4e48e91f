"""`sparkflake checkpoint pin DIR --role target|draft`: record a checkpoint's identity files."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..core.atomic_write import check_output_parent
from ..core.errors import InputError
from ..launch.checkpoint_pins import pin_checkpoint, pins_of_profile, update_pins
from ..lock.profile_locks import load_profile
from . import _arguments as arguments
from ._output import Progress, print_json, print_line, warn
from ._parsers import add_command, add_group

DEFAULT_PINS = "checkpoint-pins.json"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "checkpoint", help="pin a model checkpoint's identity-bearing files", metavar="SUBCOMMAND"
    )
    pin = add_command(
        commands, "pin", run_pin,
        help="record sizes and sha256 of a checkpoint's identity files in the site's pins file",
        description=(
            "Hash the files the profile's [checkpoints.ROLE] pin list names (size, then sha256, "
            "streamed) and record them for ROLE in the pins file (other roles kept; written "
            "atomically, nothing on error). launch-rank checks them when runtime.env sets "
            "CHECKPOINT_PINS to the file. Exit 0 ok, 2 bad input."
        ),
    )
    pin.add_argument("directory", metavar="MODEL_DIR", help="the checkpoint directory")
    pin.add_argument("--role", required=True, choices=("target", "draft"), help="which checkpoint of the profile")
    pin.add_argument("--profile", default="glm53-dflash7", help="profile name or path (default glm53-dflash7)")
    pin.add_argument(
        "-o", "--output", metavar="FILE", default=DEFAULT_PINS, type=arguments.output_file,
        help=f"the pins file to create or update (default {DEFAULT_PINS})",
    )
    pin.add_argument("--json", action="store_true", help="print the pinned files as JSON")
    pin.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")


def run_pin(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile, check_locks=False)
    checkpoint = profile.checkpoints.get(args.role)
    if checkpoint is None:
        raise InputError(f"profile {profile.name} has no {args.role} checkpoint (it has {', '.join(profile.checkpoints)})")
    # Read the existing file first: a malformed one is refused before anything is hashed.
    pins_of_profile(args.output, profile.name)
    check_output_parent(Path(args.output))  # before the hashing, which can take minutes
    bar = Progress("pin", enabled=True if args.progress else None)
    pinned = pin_checkpoint(
        args.directory, checkpoint.pin or (), f"checkpoints.{args.role}.pin",
        lambda done, total, name: bar(done, total, f"pin {name}"),
    )
    # Read again, merged and written under the file's lock: another run may have pinned
    # the other role meanwhile.
    updated = update_pins(args.output, profile.name, args.role, pinned)
    if args.json:
        print_json({"pins": str(args.output), "role": args.role, **updated.as_record()})
        return 0
    for entry in pinned.files:
        print_line(f"{entry.sha256}  {entry.size:>14}  {entry.path}")
    print_line(f"pinned {len(pinned.files)} {args.role} files of {pinned.pinned_from} in {args.output}")
    if not os.path.isabs(args.output):
        warn(f"sparkflake: set CHECKPOINT_PINS={os.path.abspath(args.output)} in runtime.env")
    return 0
