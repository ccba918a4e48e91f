"""`sparkflake recipe import|export`: TOML launch recipes to and from profile + env file."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core import canonical_toml
from ..core.atomic_write import write_bytes_atomic
from ..core.container_engine import Engine
from ..core.generated_files import check_replaceable_file, marked_text
from ..core.records import read_toml
from ..launch.contract import load_contract
from ..launch.plan import plan_launch
from ..launch.recipe import dump_recipe, export_recipe, import_recipe, read_recipe, summarize
from . import _arguments as arguments
from ._output import print_json, print_line
from ._parsers import add_command, add_group


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(subparsers, "recipe", help="import or export TOML launch recipes")
    importer = add_command(
        commands, "import", run_import,
        help="recipe -> profile fragment (profile.toml) + runtime.env",
        description=(
            "Map a TOML launch recipe onto the settings catalog. Writes OUT/profile.toml "
            "([runtime] and everything without a setting, verbatim, under [recipe]) and "
            "OUT/runtime.env. Unknown fields and unmapped arguments are reported, never dropped. "
            "An existing file there is replaced only while it is what an import wrote (its first "
            "line names its sha256), not once edited, unless --force."
        ),
    )
    importer.add_argument("recipe", metavar="FILE.toml")
    importer.add_argument("-o", "--output", required=True, metavar="DIR")
    importer.add_argument("--force", action="store_true",
                          help="replace DIR/profile.toml and DIR/runtime.env even when sparkflake did not write them "
                               "or they were edited since")
    importer.add_argument("--json", action="store_true")
    exporter = add_command(commands, "export", run_export, help="write the recipe of one rank's launch")
    exporter.add_argument("rank", metavar="RANK")
    exporter.add_argument("env_file", metavar="ENVFILE")
    exporter.add_argument("--profile", default="glm53-dflash7")
    exporter.add_argument("--image", metavar="sha256:ID")
    exporter.add_argument(
        "--imported", metavar="PROFILE.toml",
        help="the profile.toml a `recipe import` wrote: its [recipe] (env, mounts, mods, unmapped arguments, "
             "other fields) is carried into the export (default: profile.toml beside ENVFILE, if it has [recipe])",
    )
    exporter.add_argument("-o", "--output", required=True, metavar="FILE.toml", type=arguments.output_file)


def run_import(args: argparse.Namespace) -> int:
    imported = import_recipe(read_recipe(args.recipe), args.recipe)
    out = Path(args.output)
    written = {out / "profile.toml": canonical_toml.dumps(imported.profile_document()),
               out / "runtime.env": imported.env_text(args.recipe)}
    for path in written:  # both checked before either is written
        check_replaceable_file(path, force=args.force)
    for path, text in written.items():
        write_bytes_atomic(path, marked_text(text).encode())
    if args.json:
        print_json(imported.report())
        return 0
    print_line(f"wrote {out / 'profile.toml'} and {out / 'runtime.env'}")
    print_line(f"settings: {summarize(sorted(imported.runtime))}")
    print_line(f"unknown fields (kept under [recipe]): {summarize(imported.unknown_fields)}")
    print_line(f"unmapped arguments (kept under [recipe]): {summarize(imported.unmapped_args)}")
    for conflict in imported.conflicts:
        print_line(f"conflict: {conflict}")
    for note in imported.notes:
        print_line(f"note: {note}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from ..core.digest import is_digest
    from ..core.errors import InputError
    from .launch import parse_rank

    rank = parse_rank(args.rank)
    if args.image and not is_digest(args.image):
        raise InputError(f"--image {args.image!r}: expected sha256:<64 lowercase hex>")
    plan = plan_launch(
        rank=rank,
        env_file=args.env_file,
        contract=load_contract(args.profile),
        engine=Engine("podman", "podman"),
        image_id=args.image,
        run_checks=False,
    )
    fragment = Path(args.imported) if args.imported else Path(args.env_file).parent / "profile.toml"
    recipe_table = None
    if args.imported or fragment.is_file():
        recipe_table = read_toml(fragment).get("recipe")
        if recipe_table is None and args.imported:
            raise InputError(f"--imported {fragment}: has no [recipe] table (not written by `recipe import`)")
        if recipe_table is not None and not isinstance(recipe_table, dict):
            raise InputError(f"{fragment}: recipe: expected a table")
    exported = export_recipe(plan, recipe_table)
    write_bytes_atomic(args.output, dump_recipe(exported.document).encode())
    if recipe_table is not None:
        print_line(f"carried [recipe] of {fragment}")
    for note in exported.notes:
        print_line(f"note: {note}")
    print_line(f"wrote {args.output}")
    return 0
