"""`sparkflake assemble PROFILE -o DIR`: the OS base and Python env trees from the cache."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..compose.locked_inputs import (
    assemble_base_from_lock,
    assemble_env_from_lock,
    load_policy,
    policy_path_for,
)
from ..core.blob_cache import BlobCache
from ..lock.resolve import default_cache, load_profile_lock, profile_from_arg
from . import _arguments as arguments
from ._output import Progress, print_json, print_line
from ._parsers import add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "assemble", run,
        help="build the OS base and Python environment trees from fetched inputs",
        description=(
            "Assemble DIR/base (Debian packages unpacked, maintainer-script effects done "
            "declaratively) and DIR/python (every wheel installed into /opt/venv) from PROFILE's "
            "lock and the cache, without running any target binary. Each tree appears atomically. "
            "Exit 0 ok, 1 a check failed (ELF machine, wheel tags, RECORD, path conflict or escape), "
            "2 an input is missing."
        ),
    )
    parser.add_argument("profile", metavar="PROFILE")
    parser.add_argument("-o", "--output", required=True, metavar="DIR")
    parser.add_argument("--only", choices=["base", "python"], help="assemble one tree only")
    parser.add_argument("--jobs", type=arguments.workers, default=None, help="parallel wheel installs (default: CPUs, at most 4)")
    parser.add_argument("--cache", metavar="DIR", help="cache root (default $XDG_CACHE_HOME/sparkflake)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    profile = profile_from_arg(args.profile)
    lock = load_profile_lock(profile)
    cache = BlobCache(args.cache) if args.cache else default_cache()
    output = Path(args.output)
    result: dict[str, object] = {"profile": profile.name}
    if args.only in (None, "base"):
        started = time.monotonic()
        base = assemble_base_from_lock(lock, cache, output / "base", progress=Progress("base"))
        result["base"] = {
            "path": str(output / "base"),
            "packages": len(base.packages),
            "elf_files": base.elf_files,
            "ld_so_cache_entries": base.ld_so_cache_entries,
            "declarative_steps": list(base.steps),
            "owners_and_special_modes": base.ownership,
            "seconds": round(time.monotonic() - started, 3),
        }
    if args.only in (None, "python"):
        started = time.monotonic()
        policy = load_policy(policy_path_for(profile.lock_paths()[0]), lock)
        env = assemble_env_from_lock(
            lock, cache, output / "python", workers=args.jobs, progress=Progress("python"), policy=policy
        )
        result["python"] = {
            "path": str(output / "python"),
            "prefix": env.prefix,
            "distributions": len(env.distributions),
            "files": len(env.owners),
            "elf_files": env.elf_files,
            "identical_shared_paths": len(env.shared_identical),
            "record_waivers_used": env.waived,
            "collision_rules_used": env.collisions,
            "seconds": round(time.monotonic() - started, 3),
        }
    if args.json:
        print_json(result)
        return 0
    for part in ("base", "python"):
        if part in result:
            summary = result[part]
            assert isinstance(summary, dict)
            details = ", ".join(f"{k} {v}" for k, v in summary.items() if k not in ("path", "declarative_steps", "owners_and_special_modes"))
            print_line(f"{part}: {summary['path']} ({details})")
    return 0
