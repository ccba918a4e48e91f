"""Benchmark of writing a multi-GB archive of blobs, ours vs the peer and the disk, same run.

What `sparkflake build` pays for its oci-archive/docker-archive: the layer blobs (already
compressed) copied into one tar, made durable (fsync) and renamed into place.

- ours: ``atomic_stream`` + ``tar_stream.write_tar_file`` (``DirectWriter``: O_DIRECT
  from page-aligned buffers, one on the disk while the next is filled);
- the same writer with O_DIRECT off (buffered writes, then fsync): what the engine did
  before, to show where the time goes;
- peer: GNU tar (``tar -cf OUT --sort=name --mtime=@1 ... BLOBS``) then ``sync OUT``
  (coreutils: fsync of that file);
- bound: ``dd if=/dev/zero of=OUT bs=8M count=N oflag=direct conv=fsync`` — the disk's
  own sequential write rate for the same number of bytes (no reads, no copies).

The sources are read from the page cache in every run (they are read once before the
first run). Runs are interleaved; medians and ratios are printed and written to
bench/results/archive-write.json.

    .venv/bin/python bench/bench_archive_write.py                      # out/glm53-dflash7/oci blobs
    .venv/bin/python bench/bench_archive_write.py --blobs DIR          # any directory of files
    .venv/bin/python bench/bench_archive_write.py --small              # 512 MiB of generated blobs
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

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "archive-write.json"
DEFAULT_BLOBS = REPO / "out" / "glm53-dflash7" / "oci" / "blobs" / "sha256"

_OURS = """
import os, sys, time
from sparkflake.core.atomic_write import atomic_stream
from sparkflake.oci.tar_stream import EntryKind, TarEntry, write_tar_file
out, direct, *sources = sys.argv[1:]
entries = [TarEntry("blobs/sha256/" + os.path.basename(s), EntryKind.FILE, 0o644, size=os.path.getsize(s), source=s)
           for s in sources]
start = time.perf_counter()
with atomic_stream(out, direct=direct == "direct") as sink:
    write_tar_file(entries, sink, 1)
print(time.perf_counter() - start)
"""


def run_ours(out: Path, sources: list[Path], mode: str) -> float:
    completed = subprocess.run(
        [sys.executable, "-c", _OURS, str(out), mode, *map(str, sources)], capture_output=True, text=True, check=True
    )
    return float(completed.stdout)


def run_peer(out: Path, sources: list[Path]) -> float:
    start = time.perf_counter()
    subprocess.run(
        ["tar", "-cf", str(out), "--sort=name", "--mtime=@1", "--owner=0", "--group=0", "--numeric-owner",
         "-C", str(sources[0].parent), *[s.name for s in sources]],
        check=True,
    )
    subprocess.run(["sync", str(out)], check=True)
    return time.perf_counter() - start


def run_bound(out: Path, size: int) -> float:
    block = 8 << 20
    start = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={out}", f"bs={block}", f"count={-(-size // block)}", "oflag=direct", "conv=fsync"],
        check=True, capture_output=True,
    )
    return time.perf_counter() - start


def make_blobs(directory: Path, total: int) -> list[Path]:
    directory.mkdir(parents=True)
    sizes = [total // 2, total // 4, total // 8, total // 8 - 12345]
    paths = []
    for index, size in enumerate(sizes):
        path = directory / f"blob{index}"
        with open(path, "wb") as handle:
            left = size
            while left:
                piece = os.urandom(min(left, 4 << 20))
                handle.write(piece)
                left -= len(piece)
        paths.append(path)
    return paths


def warm(sources: list[Path]) -> None:
    for source in sources:
        with open(source, "rb", buffering=0) as handle:
            while handle.read(8 << 20):
                pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blobs", default=None, help="a directory of files to archive (default: the real image's blobs)")
    parser.add_argument("--small", action="store_true", help="512 MiB of generated blobs")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="sparkflake-bench-archive-", dir=REPO))
    try:
        if args.small:
            sources = make_blobs(scratch / "blobs", 512 << 20)
        else:
            folder = Path(args.blobs) if args.blobs else DEFAULT_BLOBS
            if not folder.is_dir():
                raise SystemExit(f"{folder}: no blobs (build the image first: ./bin/sparkflake build glm53-dflash7)")
            sources = sorted(p for p in folder.iterdir() if p.is_file())
        size = sum(p.stat().st_size for p in sources)
        warm(sources)
        timings: dict[str, list[float]] = {"ours": [], "ours_buffered": [], "gnu_tar_sync": [], "disk_bound": []}
        out = scratch / "archive.tar"
        for run in range(args.runs):
            for name, action in (
                ("ours", lambda: run_ours(out, sources, "direct")),
                ("ours_buffered", lambda: run_ours(out, sources, "buffered")),
                ("gnu_tar_sync", lambda: run_peer(out, sources)),
                ("disk_bound", lambda: run_bound(out, size)),
            ):
                timings[name].append(action())
                out.unlink()
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
            "ratio_ours_vs_gnu_tar_sync": medians["ours"] / medians["gnu_tar_sync"],
            "ratio_ours_vs_disk_bound": medians["ours"] / medians["disk_bound"],
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{'writer':<34} {'median s':>9} {'GB/s':>6} {'vs ours':>8}")
        for name, label in (("ours", "ours (O_DIRECT, 2 buffers in flight)"), ("ours_buffered", "ours, buffered + fsync"),
                            ("gnu_tar_sync", "GNU tar + sync"), ("disk_bound", "dd oflag=direct (disk bound)")):
            print(f"{label:<34} {medians[name]:>9.2f} {size / medians[name] / 1e9:>6.2f} {medians[name] / medians['ours']:>8.2f}")
        print(f"{size / 1e9:.2f} GB in {len(sources)} files; results in {RESULTS.relative_to(REPO)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
