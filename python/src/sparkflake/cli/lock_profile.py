"""`sparkflake lock PROFILE [--check | --update NAME ...] [--exclude-newer DATE]` (the profile mode of `lock`).

Resolves the Python closure with uv and the Debian base closure from the signed indices,
and writes the lock the profile lists (shared by every profile listing the same file).
"""

from __future__ import annotations

import argparse
import time

from ..core.errors import InputError
from ..lock.lock_file import dump_lock, load_lock
from ..lock.pins import Lock
from ..lock.resolve import (
    check_lock,
    default_cache,
    profile_from_arg,
    resolve_lock,
    update_profile_input,
    write_profile_lock,
)
from ..lock.resolve_python import resolution_cutoff
from ._output import print_json, print_line


def run_profile(args: argparse.Namespace) -> int:
    profile = profile_from_arg(args.action)
    cutoff = resolution_cutoff(args.exclude_newer) if args.exclude_newer is not None else None
    if args.check:
        if cutoff is not None:
            raise InputError("lock --check reads the lock offline: --exclude-newer goes with a resolution")
        summary = check_lock(profile)
        if args.json:
            print_json({"valid": True, **summary})
        else:
            print_line(
                f"{summary['lock']}: complete for {', '.join(summary['profiles'])} "
                f"({summary['wheels']} wheels, {summary['debs']} debs, {summary['bytes']} bytes)"
                + (f"; git inputs {', '.join(summary['git'])} in {', '.join(summary['locks'][1:])}"
                   if summary["git"] else "")
            )
        return 0
    started = time.monotonic()
    before: Lock | None
    if args.update:
        before, lock = update_profile_input(profile, args.update, cache=default_cache(), exclude_newer=cutoff)
    else:
        path = profile.lock_paths()[0]
        before = load_lock(path) if path.is_file() else None
        lock = resolve_lock(profile, cache=default_cache(), exclude_newer=cutoff)
    path = write_profile_lock(profile, lock)
    changed = before is None or dump_lock(before) != dump_lock(lock)
    old = {pin.name: pin for pin in before.inputs} if before is not None else {}
    changes = sorted(
        name
        for name in {pin.name for pin in lock.inputs} | set(old)
        if name not in old or lock.get(name) is None or old[name] != lock.get(name)
    )
    elapsed = time.monotonic() - started
    if args.json:
        print_json({"lock": str(path), "changed": changed, "changed_inputs": changes, "inputs": len(lock.inputs), "seconds": round(elapsed, 3)})
    else:
        kinds = {kind: len(lock.of_kind(kind)) for kind in ("wheel", "sdist", "deb")}
        print_line(
            f"{path}: {len(lock.inputs)} inputs ({kinds['wheel']} wheels, {kinds['sdist']} sdists, "
            f"{kinds['deb']} debs); {len(changes)} changed; {elapsed:.1f}s"
        )
    return 0
