"""`sparkflake cache du|verify|gc|cleanup`: what the cache holds, whether its entries are
intact, and removing what no kept build uses or what runs left behind (dry run unless
--apply)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from ..core.blob_cache import default_cache_root
from ..core.digest import is_digest
from ..core.directory_lock import collecting_cache
from ..core.errors import InputError
from ..housekeeping.cache_entries import KINDS, scan_cache
from ..housekeeping.cache_gc import (
    Plan,
    Retention,
    deployed_from_json,
    plan_cleanup,
    plan_gc,
    remove_planned,
    verify_cache,
)
from ..housekeeping.deployments import deployed_images
from ..profile.lookup import find_profiles_dir
from . import _arguments as arguments
from ._output import add_progress_flag, human_bytes, print_json, print_line, progress_for
from ._parsers import add_command, add_group


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "cache",
        help="the cache's disk use, its integrity, and removing what is no longer used",
        description="The cache is $XDG_CACHE_HOME/sparkflake (or --cache). gc and cleanup print what they "
                    "would remove and remove it only with --apply; nothing sparkflake did not write is touched.",
    )
    du = add_command(commands, "du", run_du, help="bytes on disk by kind (input blobs, trees, layer store, …)")
    verify = add_command(commands, "verify", run_verify,
                         help="re-hash every content-addressed entry; move one that differs into quarantine/ (exit 1)")
    gc = add_command(
        commands, "gc", run_gc,
        help="remove what neither the last N builds of each profile nor a deployed image uses",
        description=(
            "Keeps everything the last --keep builds of each profile used (recorded in CACHE/builds at the end "
            "of each build), and the builds of every deployed image: the profiles' evidence records and "
            "qualified pins, --keep-image and --deployed. Assembled trees go first, then inputs, then the "
            "layer store. A dry run unless --apply."
        ),
    )
    cleanup = add_command(
        commands, "cleanup", run_cleanup,
        help="remove what runs left: scratch, quarantine, unfinished downloads, stale locks, mismatch files",
    )
    for parser in (du, verify, gc, cleanup):
        parser.add_argument("--cache", metavar="DIR", type=Path, help="cache root (default $XDG_CACHE_HOME/sparkflake)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_progress_flag(verify)
    gc.add_argument("--keep", type=arguments.count, default=3, metavar="N", help="builds of each profile to keep (default 3)")
    gc.add_argument("--keep-image", action="append", default=[], metavar="sha256:DIGEST",
                    help="a deployed image (manifest or config digest) whose builds stay; repeatable")
    gc.add_argument("--deployed", action="append", default=[], metavar="FILE", type=Path,
                    help="a digests.json (or deployment record) of a deployed image; repeatable")
    gc.add_argument("--profiles-dir", metavar="DIR", type=arguments.profiles_dir, help="where profiles live (default: search upward)")
    cleanup.add_argument("--received", action="append", default=[], metavar="DIR", type=Path,
                         help="a fan-out destination directory: its NAME.mismatch-* files and dead temporaries; repeatable")
    for parser in (gc, cleanup):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--dry-run", action="store_true", help="print what would go (the default)")
        mode.add_argument("--apply", action="store_true", help="remove it")


def _root(args: argparse.Namespace) -> Path:
    root = args.cache or default_cache_root()
    if not root.is_dir():
        raise InputError(f"{root}: no cache here (not a directory)")
    return root


def run_du(args: argparse.Namespace) -> int:
    root = _root(args)
    entries = scan_cache(root)
    by_kind = {kind: {"entries": 0, "bytes": 0, "leftover_bytes": 0} for kind in KINDS}
    for entry in entries:
        row = by_kind[entry.kind]
        row["entries"] += 1
        row["bytes"] += entry.bytes
        if entry.leftover is not None:
            row["leftover_bytes"] += entry.bytes
    total = sum(row["bytes"] for row in by_kind.values())
    if args.json:
        print_json({"cache": str(root), "kinds": by_kind, "bytes": total})
        return 0
    print_line(f"{root}")
    for kind, row in by_kind.items():
        if row["entries"]:
            leftover = f"  ({human_bytes(row['leftover_bytes'])} left by runs: `cache cleanup`)" if row["leftover_bytes"] else ""
            print_line(f"  {kind:<22} {human_bytes(row['bytes']):>10}  {row['entries']:>6} entries{leftover}")
    print_line(f"  {'total':<22} {human_bytes(total):>10}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    root = _root(args)
    checked, found = verify_cache(root, progress_for("cache verify", args))
    if args.json:
        print_json({"cache": str(root), "checked": checked, "quarantined": [
            {"entry": str(item.entry.path), "kind": item.entry.kind, "sha256": item.actual, "moved_to": str(item.moved_to)}
            for item in found]})
    else:
        for item in found:
            print_line(f"ALTERED {item.entry.path}: its bytes hash to sha256 {item.actual}; moved to {item.moved_to}")
        print_line(f"{checked} entries re-hashed, {len(found)} altered")
    return 1 if found else 0


def _print_plan(args: argparse.Namespace, root: Path, plan: Plan, what: str) -> int:
    freed = remove_planned(plan) if args.apply else 0
    record = {"cache": str(root), "applied": bool(args.apply), "bytes": plan.bytes, "removals": [
        {"path": str(removal.entry.path), "kind": removal.entry.kind, "bytes": removal.entry.bytes,
         "reason": removal.reason} for removal in plan.removals]}
    if plan.kept_builds:
        record["kept_builds"] = [str(stored.path) for stored in plan.kept_builds]
    if args.json:
        print_json(record)
        return 0
    verb = "removed" if args.apply else "would remove"
    for removal in plan.removals:
        print_line(f"{verb} {removal.entry.path} ({removal.entry.kind}, {human_bytes(removal.entry.bytes)}): {removal.reason}")
    for stored in plan.kept_builds:
        print_line(f"kept build {stored.record.profile} {stored.record.built_at} {stored.record.manifest_digest}")
    if args.apply:
        print_line(f"{what}: {len(plan.removals)} entries removed, {human_bytes(freed)} freed")
    else:
        print_line(f"{what}: {len(plan.removals)} entries, {human_bytes(plan.bytes)} would be freed; "
                   "nothing removed (dry run: pass --apply)")
    return 0


def run_gc(args: argparse.Namespace) -> int:
    root = _root(args)
    for digest in args.keep_image:
        if not is_digest(digest):
            raise InputError(f"--keep-image {digest!r}: expected sha256:<64 lowercase hex>")
    deployed = set(args.keep_image) | deployed_from_json(args.deployed)
    profiles_dir = args.profiles_dir or find_profiles_dir()
    deployed |= deployed_images(profiles_dir)
    # applied, the plan is made and carried out while no build uses the cache (refused otherwise)
    with collecting_cache(root, "gc --apply") if args.apply else contextlib.nullcontext():
        plan = plan_gc(root, Retention(keep_builds=args.keep, deployed=frozenset(deployed)))
        return _print_plan(args, root, plan, "gc")


def run_cleanup(args: argparse.Namespace) -> int:
    root = _root(args)
    return _print_plan(args, root, plan_cleanup(root, args.received), "cleanup")
