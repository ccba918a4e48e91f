"""Benchmark of copying layer blobs from the blob store into an output's OCI layout, ours vs
the peer and the disk, same run.

What `sparkflake build` pays per output for layout blobs that are copies (an output must
not share a writable inode with the store, so no hard links) on a file system without
copy-on-write clones (ext4): every blob copied and made durable.

- ours: ``blob_store.copy_blob`` (FICLONE where it works; else O_DIRECT from page-aligned
  buffers via ``DirectWriter``, then fsync), one blob after the other;
- before: ``copy_file_range`` then fsync per blob (what issue 14's first version did;
  buffered, so throttled on dirty pages);
- peer: ``cp --reflink=auto SOURCES DIR`` then ``sync FILES`` (coreutils);
- bound: ``dd if=/dev/zero ... oflag=direct conv=fsync`` for the same bytes (the disk's
  sequential write rate; nothing read).

The sources are read once before the first run (page cache warm). Runs are interleaved;
medians and ratios are printed and written to bench/results/layout-copy.json.

    .venv/bin/python bench/bench_layout_copy.py                    # the user's blob store, blobs >= 1 MiB
    .venv/bin/python bench/bench_layout_copy.py --blobs DIR --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_archive_write import run_bound, warm

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "layout-copy.json"
DEFAULT_BLOBS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sparkflake" / "oci" / "blobs" / "sha256"

_COPY = """
import os, sys, time
from pathlib import Path
from sparkflake.core.atomic_write import copy_bytes
from sparkflake.oci.blob_store import copy_blob
method, out, *sources = sys.argv[1:]
start = time.perf_counter()
for source in sources:
    target = Path(out) / os.path.basename(source)
    if method == "ours":
        copy_blob(Path(source), target)
    else:
        with open(source, "rb", buffering=0) as original, open(target, "xb", buffering=0) as copy:
            copy_bytes(original.fileno(), copy.fileno(), os.fstat(original.fileno()).st_size)
            os.fsync(copy.fileno())
print(time.perf_counter() - start)
"""


def run_python(method: str, out: Path, sources: list[Path]) -> float:
    completed = subprocess.run([sys.executable, "-c", _COPY, method, str(out), *map(str, sources)],
                               capture_output=True, text=True, check=True)
    return float(completed.stdout)


def run_peer(out: Path, sources: list[Path]) -> float:
    start = time.perf_counter()
    subprocess.run(["cp", "--reflink=auto", *map(str, sources), str(out)], check=True)
    subprocess.run(["sync", *[str(out / s.name) for s in sources]], check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blobs", default=str(DEFAULT_BLOBS), help="a directory of blobs (those of 1 MiB or more are copied)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sources = sorted(p for p in Path(args.blobs).iterdir() if p.is_file() and p.stat().st_size >= 1 << 20)
    if not sources:
        raise SystemExit(f"{args.blobs}: no blobs of 1 MiB or more")
    size = sum(p.stat().st_size for p in sources)
    scratch = Path(tempfile.mkdtemp(prefix="sparkflake-bench-layout-copy-", dir=REPO))
    try:
        warm(sources)
        timings: dict[str, list[float]] = {"ours": [], "copy_file_range_fsync": [], "cp_sync": [], "disk_bound": []}
        for run in range(args.runs):
            for name, action in (
                ("ours", lambda out: run_python("ours", out, sources)),
                ("copy_file_range_fsync", lambda out: run_python("before", out, sources)),
                ("cp_sync", lambda out: run_peer(out, sources)),
                ("disk_bound", lambda out: run_bound(out / "zeros", size)),
            ):
                out = scratch / name
                out.mkdir()
                timings[name].append(action(out))
                shutil.rmtree(out)
                time.sleep(1)
            print(f"run {run + 1}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in timings.items()), file=sys.stderr)
        medians = {name: statistics.median(values) for name, values in timings.items()}
        result = {
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()},
            "bytes": size,
            "files": len(sources),
            "runs": args.runs,
            "seconds": timings,
            "median_s": medians,
            "gb_per_s": {name: size / value / 1e9 for name, value in medians.items()},
            "ratio_ours_vs_cp_sync": medians["ours"] / medians["cp_sync"],
            "ratio_ours_vs_copy_file_range_fsync": medians["ours"] / medians["copy_file_range_fsync"],
            "ratio_ours_vs_disk_bound": medians["ours"] / medians["disk_bound"],
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{'copy':<36} {'median s':>9} {'GB/s':>6} {'vs ours':>8}")
        for name, label in (("ours", "ours (copy_blob: O_DIRECT + fsync)"),
                            ("copy_file_range_fsync", "copy_file_range + fsync"),
                            ("cp_sync", "cp --reflink=auto + sync"), ("disk_bound", "dd oflag=direct (disk bound)")):
            print(f"{label:<36} {medians[name]:>9.2f} {size / medians[name] / 1e9:>6.2f} {medians[name] / medians['ours']:>8.2f}")
        print(f"{size / 1e9:.2f} GB in {len(sources)} files; results in {RESULTS.relative_to(REPO)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
