"""`sparkflake profile show NAME [--json]` and `sparkflake profile validate [NAME]`."""

from __future__ import annotations

import argparse

from ..core.records import record_to_dict
from ..lock.profile_locks import load_all_profiles, load_profile
from ..profile.lookup import check_profiles_distinct, find_profiles_dir, list_profiles
from ..profile.profile_file import dump_profile
from ..profile.settings_catalog import validate_runtime_table
from . import _arguments as arguments
from ._output import print_json, print_line
from ._parsers import add_command, add_group

EXIT_OK = 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    actions = add_group(
        subparsers, "profile",
        help="show and validate runtime profiles",
        description=(
            "Profiles live in profiles/<name>/profile.toml; NAME is a profile name (looked up "
            "in --profiles-dir, $SPARKFLAKE_PROFILES_DIR, or the nearest profiles/ directory "
            "upward from the working directory) or a path to a profile.toml."
        ),
        metavar="ACTION",
    )

    show = add_command(actions, "show", run_show, help="print a profile (canonical TOML, or --json)")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true", help="print the model as JSON")
    show.add_argument("--profiles-dir", metavar="DIR", type=arguments.profiles_dir)

    validate = add_command(
        actions, "validate", run_validate,
        help="validate a profile (all profiles when NAME is omitted)",
        description=(
            "Checks the profile's structure, its roles and Debian seed against its lock files "
            "when they exist, and that no two profiles of the directory share a served-model "
            "name, cache root or JIT root. Exit 0 valid, 2 invalid."
        ),
    )
    validate.add_argument("name", metavar="NAME", nargs="?")
    validate.add_argument("--json", action="store_true", help="print the result as JSON")
    validate.add_argument("--profiles-dir", metavar="DIR", type=arguments.profiles_dir)

    listing = add_command(actions, "list", run_list, help="list the profiles of the profiles directory")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--profiles-dir", metavar="DIR", type=arguments.profiles_dir)


def run_show(args: argparse.Namespace) -> int:
    profile = load_profile(args.name, args.profiles_dir)
    if args.json:
        print_json(record_to_dict(profile))
    else:
        print_line(f"# {profile.path}")
        print_line(dump_profile(profile).rstrip("\n"))
    return EXIT_OK


def run_validate(args: argparse.Namespace) -> int:
    if args.name is None:
        profiles = load_all_profiles(args.profiles_dir)
    else:
        profile = load_profile(args.name, args.profiles_dir)
        siblings = [
            load_profile(profile.directory.parent / name / "profile.toml", check_locks=False)
            for name in list_profiles(profile.directory.parent)
            if name != profile.name
        ]
        check_profiles_distinct([profile, *siblings])
        profiles = [profile]
    for profile in profiles:
        # the launcher owns the catalog of runtime keys; a profile may only use known keys
        validate_runtime_table(profile.runtime, f"{profile.path}: runtime")
        validate_runtime_table(profile.qualified.settings, f"{profile.path}: qualified.settings")
    results = [
        {
            "name": profile.name,
            "path": str(profile.path),
            "status": profile.status,
            "locks_checked": all(path.is_file() for path in profile.lock_paths()),
            "valid": True,
        }
        for profile in profiles
    ]
    if args.json:
        print_json({"profiles": results, "valid": True})
        return EXIT_OK
    for result in results:
        locks = (
            "roles checked against locks" if result["locks_checked"] else "locks not written yet"
        )
        print_line(f"{result['path']}: valid ({result['status']}; {locks})")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    directory = args.profiles_dir or find_profiles_dir()
    names = list_profiles(directory)
    if args.json:
        print_json({"profiles_dir": str(directory), "profiles": names})
    else:
        for name in names:
            print_line(name)
    return EXIT_OK
