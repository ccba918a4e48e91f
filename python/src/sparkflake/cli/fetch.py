"""`sparkflake fetch PROFILE|LOCK`: every locked input into the content-addressed cache."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.blob_cache import BlobCache, default_opener, offline_opener
from ..core.errors import InputError
from ..core.records import InvalidField, require_git_url
from ..core.urls import redacted
from ..fetch import FetchReport, fetch_all
from ..fetch.git import GitCache, GitOutcome, fetch_git_inputs
from ..lock.lock_file import load_lock
from ..lock.pins import GitPin, Lock
from ..lock.resolve import artifacts, default_cache, load_profile_lock, profile_from_arg
from . import _arguments as arguments
from ._output import Progress, print_json, print_line, warn
from ._parsers import add_command

KINDS = ("wheel", "sdist", "deb", "file", "git")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "fetch", run,
        help="download every locked input into the cache, verified",
        description=(
            "Download every input of PROFILE's lock (or of the lock file LOCK) into "
            "$XDG_CACHE_HOME/sparkflake: files into blobs/sha256 (parallel, resumable; size and "
            "sha256 checked before anything enters the cache; mirror URLs tried in order), git "
            "inputs by commit into git/trees/<tree> (admitted only when the commit names the "
            "locked tree and the files written have that git tree id). Exit 0 all present, 2 an "
            "input is missing (each is named with the URLs tried and how to supply it), 1 a file "
            "supplied with --from or a fetched commit does not match the lock."
        ),
    )
    parser.add_argument("profile", metavar="PROFILE|LOCK", help="profile name, path to its profile.toml, or a .lock file")
    parser.add_argument("--from", dest="from_dirs", action="append", default=[], metavar="DIR",
                        help="import operator-supplied files from DIR, matched by sha256; a DIR that "
                        "is a git repository is also tried for every git input (repeatable)")
    parser.add_argument("--git-mirror", action="append", default=[], metavar="NAME=URL",
                        help="try URL for the git input NAME before the lock's URLs (repeatable)")
    parser.add_argument("--jobs", type=arguments.workers, default=6, help="parallel downloads (default 6)")
    parser.add_argument("--offline", action="store_true",
                        help="no network: only the cache, --from directories and file:// mirrors")
    parser.add_argument("--cache", metavar="DIR", help="cache root (default $XDG_CACHE_HOME/sparkflake)")
    parser.add_argument("--kind", action="append", choices=KINDS,
                        help="only inputs of this kind (repeatable; default all)")
    parser.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    parser.add_argument("--json", action="store_true", help="print the outcome per input as JSON")


def parse_mirrors(values: list[str], git_names: list[str] | None) -> dict[str, tuple[str, ...]]:
    """``NAME=URL`` options: URL one of git's transports, NAME a git input (of ``git_names``,
    when they are known here)."""
    mirrors: dict[str, tuple[str, ...]] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name or (git_names is not None and name not in git_names):
            known = f" ({', '.join(git_names) or 'none'})" if git_names is not None else ""
            raise InputError(f"--git-mirror {redacted(value)!r}: expected NAME=URL with NAME a git input of the lock{known}")
        try:
            mirrors[name] = (*mirrors.get(name, ()), require_git_url("--git-mirror", url))
        except InvalidField as error:
            raise InputError(f"--git-mirror {redacted(value)!r}: {error.problem}") from None
    return mirrors


def fetch_lock(
    lock: Lock,
    cache: BlobCache,
    *,
    kinds: tuple[str, ...] = KINDS,
    workers: int = 6,
    from_dirs: list[str] | tuple[str, ...] = (),
    mirrors: Mapping[str, Sequence[str]] | None = None,
    progress: Progress | None = None,
    offline: bool = False,
) -> tuple[FetchReport, list[GitOutcome]]:
    """Files, then git inputs; when some are missing, one error naming every one of them."""
    missing: list[str] = []
    report = FetchReport()
    try:
        report = fetch_all(artifacts(lock, kinds=kinds), cache, workers=workers, progress=progress, from_dirs=from_dirs,
                           opener=offline_opener if offline else default_opener)
    except InputError as error:
        missing.append(error.message)
    git_outcomes: list[GitOutcome] = []
    try:
        git_outcomes = fetch_git_inputs(
            [pin for pin in lock.pins_of(GitPin) if "git" in kinds],
            GitCache(cache.root), mirrors=mirrors, local_repositories=from_dirs, offline=offline,
        )
    except InputError as error:
        missing.append(error.message)
    if missing:
        raise InputError("\n".join(missing), check_id="fetch-missing")
    return report, git_outcomes


def _lock_from_arg(argument: str) -> tuple[str, Lock]:
    """(what to call it, the lock): a ``.lock`` file as itself, else every lock the profile
    lists as one (an exact profile's git sources sit in its second lock)."""
    if argument.endswith(".lock") and Path(argument).exists():
        return argument, load_lock(argument)
    profile = profile_from_arg(argument)
    locks = [load_profile_lock(profile), *(load_lock(path) for path in profile.lock_paths()[1:])]
    merged = locks[0]
    for lock in locks[1:]:
        for pin in lock.inputs:
            if merged.get(pin.name) not in (None, pin):
                raise InputError(f"{profile.name}: input {pin.name!r} is pinned differently by two of its locks")
            merged = merged.replace_input(pin)
    return profile.name, merged


def run(args: argparse.Namespace) -> int:
    shown, lock = _lock_from_arg(args.profile)
    mirrors = parse_mirrors(args.git_mirror, [pin.name for pin in lock.of_kind("git")])
    cache = BlobCache(args.cache) if args.cache else default_cache()
    kinds = tuple(args.kind or KINDS)
    started = time.monotonic()
    report, git_outcomes = fetch_lock(
        lock, cache, kinds=kinds, workers=args.jobs, from_dirs=args.from_dirs, mirrors=mirrors,
        progress=Progress("fetch", enabled=True if args.progress else None), offline=args.offline,
    )
    elapsed = time.monotonic() - started
    for outcome in report.outcomes:  # a repaired entry is named, never dropped silently
        if outcome.altered is not None:
            warn(f"sparkflake: {outcome.name}: the {outcome.altered}; downloaded again")
    if args.json:
        print_json(
            {
                "profile": shown,
                "cache": str(cache.blob_dir),
                "seconds": round(elapsed, 3),
                "total_bytes": report.total_bytes,
                "downloaded_bytes": report.downloaded_bytes,
                "inputs": [{**o.__dict__, "altered": str(o.altered) if o.altered else None} for o in report.outcomes],
                "git": [dataclasses.asdict(o) for o in git_outcomes],
            }
        )
        return 0
    counts: dict[str, int] = {}
    for source in [o.source for o in report.outcomes] + [f"git {o.source}" for o in git_outcomes]:
        counts[source] = counts.get(source, 0) + 1
    summary = ", ".join(f"{n} {source}" for source, n in sorted(counts.items()))
    print_line(
        f"{shown}: {len(report.outcomes) + len(git_outcomes)} inputs in {cache.root} ({summary}); "
        f"{report.downloaded_bytes} bytes downloaded of {report.total_bytes} in {elapsed:.1f}s"
    )
    return 0
