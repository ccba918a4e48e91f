"""`sparkflake fetch PROFILE`: every locked input into the content-addressed cache."""

from __future__ import annotations

import argparse
import time

from ..fetch import BlobCache, fetch_all
from ..resolve.profile_lock import artifacts, default_cache, load_profile_lock, profile_from_arg
from ._output import Progress, print_json, print_line


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fetch",
        help="download every locked input into the cache, verified",
        description=(
            "Download every input of PROFILE's lock into $XDG_CACHE_HOME/sparkflake/blobs/sha256 "
            "(parallel, resumable; size and sha256 checked before anything enters the cache; "
            "mirror URLs tried in order). Exit 0 all present, 2 an input is missing (each is named "
            "with the URLs tried and how to supply it), 1 a file supplied with --from does not match."
        ),
    )
    parser.add_argument("profile", metavar="PROFILE", help="profile name or path to its profile.toml")
    parser.add_argument("--from", dest="from_dirs", action="append", default=[], metavar="DIR",
                        help="import operator-supplied files from DIR, matched by sha256 (repeatable)")
    parser.add_argument("--jobs", type=int, default=6, help="parallel downloads (default 6)")
    parser.add_argument("--cache", metavar="DIR", help="cache root (default $XDG_CACHE_HOME/sparkflake)")
    parser.add_argument("--kind", action="append", choices=["wheel", "sdist", "deb", "file"],
                        help="only inputs of this kind (repeatable; default all)")
    parser.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    parser.add_argument("--json", action="store_true", help="print the outcome per input as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    profile = profile_from_arg(args.profile)
    lock = load_profile_lock(profile)
    cache = BlobCache(args.cache) if args.cache else default_cache()
    wanted = artifacts(lock, kinds=tuple(args.kind or ("wheel", "sdist", "deb", "file")))
    started = time.monotonic()
    report = fetch_all(
        wanted,
        cache,
        workers=args.jobs,
        progress=Progress("fetch", enabled=True if args.progress else None),
        from_dirs=args.from_dirs,
    )
    elapsed = time.monotonic() - started
    if args.json:
        print_json(
            {
                "profile": profile.name,
                "cache": str(cache.blob_dir),
                "seconds": round(elapsed, 3),
                "total_bytes": report.total_bytes,
                "downloaded_bytes": report.downloaded_bytes,
                "inputs": [o.__dict__ for o in report.outcomes],
            }
        )
        return 0
    counts: dict[str, int] = {}
    for outcome in report.outcomes:
        counts[outcome.source] = counts.get(outcome.source, 0) + 1
    summary = ", ".join(f"{n} {source}" for source, n in sorted(counts.items()))
    print_line(
        f"{profile.name}: {len(report.outcomes)} inputs in {cache.blob_dir} ({summary}); "
        f"{report.downloaded_bytes} bytes downloaded of {report.total_bytes} in {elapsed:.1f}s"
    )
    return 0
