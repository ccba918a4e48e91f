"""`sparkflake recipe import|export`: TOML launch recipes to and from profile + env file."""

from __future__ import annotations

import argparse

from ..launch.recipe import summarize
from . import _arguments as arguments
from ._output import print_json, print_line
from ._parsers import add_command, add_group
from ._requests import request_from


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
    arguments.add_output_dir(importer)
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
        "--imported", metavar="PROFILE.toml", type=arguments.path_or_default,
        help="the profile.toml a `recipe import` wrote: its [recipe] (env, mounts, mods, unmapped arguments, "
             "other fields) is carried into the export (default: profile.toml beside ENVFILE, if it has [recipe])",
    )
    exporter.add_argument("-o", "--output", required=True, metavar="FILE.toml", type=arguments.output_file)


def run_import(args: argparse.Namespace) -> int:
    from ..workflows.recipe import RecipeImportRequest, import_recipe_files

    imported = import_recipe_files(request_from(args, RecipeImportRequest))
    out = args.output_dir
    if args.json:
        print_json(imported.report())
        return 0
    print_line(f"wrote {out / 'profile.toml'} and {out / 'runtime.env'}")
    print_line(f"settings: {summarize(sorted(imported.runtime))}")
    print_line(f"unknown fields (kept under [recipe]): {summarize(imported.unknown_fields)}")
    print_line(f"unmapped arguments (kept under [recipe]): {summarize(imported.shown_unmapped_args())}")
    for conflict in imported.conflicts:
        print_line(f"conflict: {conflict}")
    for note in imported.notes:
        print_line(f"note: {note}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from ..workflows.recipe import RecipeExportRequest, export_recipe_file
    from .launch import parse_rank

    exported = export_recipe_file(request_from(args, RecipeExportRequest, rank=parse_rank(args.rank)))
    if exported.carried_from is not None:
        print_line(f"carried [recipe] of {exported.carried_from}")
    for note in exported.export.notes:
        print_line(f"note: {note}")
    print_line(f"wrote {args.output}")
    return 0
