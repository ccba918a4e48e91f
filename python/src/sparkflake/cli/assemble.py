"""`sparkflake assemble PROFILE -o DIR`: the OS base and Python env trees from the cache."""

from __future__ import annotations

import argparse
from typing import Any

from ..workflows.assemble import TREES, AssembleRequest, assemble_trees
from . import _arguments as arguments
from ._output import Progress, print_json, print_line
from ._parsers import add_command
from ._requests import request_from


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "assemble", run,
        help="build the OS base and Python environment trees from fetched inputs",
        description=(
            "Assemble DIR/base (Debian packages unpacked, maintainer-script effects done "
            "declaratively) and DIR/python (every wheel installed into /opt/venv) from PROFILE's "
            "lock and the cache, without running any target binary. Each tree appears atomically, "
            "where nothing stood (a tree is a layer's content: no marker says who wrote it, so "
            "anything at DIR/base or DIR/python, its own earlier tree too, is replaced only with --force). "
            "Exit 0 ok, 1 a check failed (ELF machine, wheel tags, RECORD, path conflict or escape), "
            "2 an input is missing."
        ),
    )
    parser.add_argument("profile", metavar="PROFILE")
    arguments.add_output_dir(parser)
    parser.add_argument("--only", choices=list(TREES), help="assemble one tree only")
    parser.add_argument("--jobs", dest="workers", metavar="JOBS", type=arguments.workers, default=None,
                        help="parallel wheel installs (default: CPUs, at most 4)")
    parser.add_argument("--cache", dest="cache_root", metavar="DIR",
                        help="cache root (default $XDG_CACHE_HOME/sparkflake)")
    parser.add_argument("--force", action="store_true",
                        help="replace what stands at DIR/base, DIR/python (its contents are lost)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    trees = assemble_trees(request_from(args, AssembleRequest), base_progress=Progress("base"),
                           python_progress=Progress("python"))
    result: dict[str, Any] = {"profile": trees.profile}
    if trees.base is not None:
        base = trees.base
        result["base"] = {
            "path": str(args.output_dir / "base"),
            "packages": len(base.packages),
            "elf_files": base.elf_files,
            "ld_so_cache_entries": base.ld_so_cache_entries,
            "declarative_steps": list(base.steps),
            "owners_and_special_modes": base.ownership,
            "seconds": round(trees.seconds["base"], 3),
        }
    if trees.python is not None:
        env = trees.python
        result["python"] = {
            "path": str(args.output_dir / "python"),
            "prefix": env.prefix,
            "distributions": len(env.distributions),
            "files": len(env.owners),
            "elf_files": env.elf_files,
            "identical_shared_paths": len(env.shared_identical),
            "record_waivers_used": env.waived,
            "collision_rules_used": env.collisions,
            "seconds": round(trees.seconds["python"], 3),
        }
    if args.json:
        print_json(result)
        return 0
    for part in TREES:
        if part in result:
            summary = result[part]
            details = ", ".join(f"{k} {v}" for k, v in summary.items() if k not in ("path", "declarative_steps", "owners_and_special_modes"))
            print_line(f"{part}: {summary['path']} ({details})")
    return 0
