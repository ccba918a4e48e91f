"""`sparkflake status`: per profile, the built digests, the evidence, and whether it applies."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..launch import evidence
from ..lock.profile_locks import load_profile
from ..oci.digests_file import DIGESTS_FILE
from ..profile.lookup import find_profiles_dir, list_profiles
from . import _arguments as arguments
from ._output import print_json, print_line
from ._parsers import add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "status", run,
        help="show each profile's built image, its evidence, and whether claims transfer",
        description=(
            "For each profile: the declared status, the digests of the image built here "
            "(RESULT/PROFILE/digests.json), every evidence record in profiles/PROFILE/evidence/, "
            "and why each claim does or does not transfer (a claim binds to an exact manifest "
            "and config digest; a rebuilt image with another digest keeps the declared status)."
        ),
    )
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="default: every profile")
    parser.add_argument("--result", default="out", metavar="DIR", help="build output root (default: out, where build writes)")
    parser.add_argument("--profiles-dir", type=arguments.profiles_dir, help="where profiles live (default: search upward)")
    parser.add_argument("--settings-hash", type=arguments.settings_hash, help="also require this resolved-settings hash")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    profiles_dir = Path(args.profiles_dir) if args.profiles_dir else find_profiles_dir()
    names = args.profiles or list_profiles(profiles_dir)
    statuses = []
    for name in names:
        profile = load_profile(name, profiles_dir, check_locks=False)
        built = evidence.load_built_image(Path(args.result) / profile.name / DIGESTS_FILE)
        records = evidence.load_evidence_dir(profiles_dir / profile.name / "evidence")
        statuses.append(
            evidence.profile_status(
                profile.name, profile.status, built, records, args.settings_hash
            )
        )
    if args.json:
        print_json({"schema": evidence.SCHEMA_VERSION, "profiles": [s.as_record() for s in statuses]})
        return 0
    for status in statuses:
        print_line(f"{status.profile}: {status.effective_status} (declared {status.declared_status})")
        if status.built is None:
            print_line("  built: none here")
        else:
            print_line(f"  built manifest digest: {status.built.manifest_digest}")
            print_line(f"  built config digest (image ID): {status.built.config_digest}")
        if not status.assessments:
            print_line("  evidence: none")
        for assessment in status.assessments:
            verdict = "applies" if assessment.applies else "does not apply"
            record = assessment.record
            print_line(f"  evidence {record.path}: {record.status} ({record.origin}), {verdict}")
            print_line(f"    manifest {record.manifest_digest}")
            print_line(f"    config   {record.config_digest}")
            print_line(f"    because: {assessment.reason}")
    return 0
