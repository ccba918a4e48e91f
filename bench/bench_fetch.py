"""Fetch throughput: `sparkflake` fetch (parallel, verified into the blob cache) against
`pip download --no-deps` of the very same wheel URLs, in the same run, alternating.

Default: wheels from profiles/glm53.lock totalling at least 500 MB (torch excluded so the
set is many files, as a real lock is). ``--small``: about 60 MB. Each side starts from an
empty directory every run (pip with --no-cache-dir). Prints a table, writes
bench/results/fetch.json.

    .venv/bin/python bench/bench_fetch.py [--small] [--runs N]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "src"))

from sparkflake.core.blob_cache import Artifact, BlobCache
from sparkflake.fetch import fetch_all
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.target import InstallTarget


def choose(target_bytes: int) -> list[Artifact]:
    lock = load_lock(REPO / "profiles" / "glm53.lock")
    wheels = sorted(
        (pin for pin in lock.of_kind("wheel") if pin.name != "torch" and pin.size <= target_bytes // 3),
        key=lambda pin: (-pin.size, pin.name),
    )
    chosen: list[Artifact] = []
    total = 0
    # alternate large and small files, as a lock's closure mixes both
    order = []
    while wheels:
        order.append(wheels.pop(0))
        if wheels:
            order.append(wheels.pop())
    for pin in order:
        if total >= target_bytes:
            break
        chosen.append(Artifact(pin.name, pin.filename, pin.sha256, pin.size, tuple(pin.urls)))
        total += pin.size
    return chosen


def run_ours(artifacts: list[Artifact], workers: int) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-fetch-ours-") as scratch:
        started = time.perf_counter()
        fetch_all(artifacts, BlobCache(scratch), workers=workers)
        return time.perf_counter() - started


def run_pip(artifacts: list[Artifact]) -> float:
    platforms = [arg for tag in InstallTarget().platform_tags() for arg in ("--platform", tag)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    environment["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory(prefix="bench-fetch-pip-") as scratch:
        argv = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--quiet",
            "--disable-pip-version-check", "--only-binary=:all:", *platforms,
            "--python-version", "3.11", "--implementation", "cp",
            "--abi", "cp311", "--abi", "abi3", "--abi", "none",
            "--index-url", "https://pypi.org/simple", "-d", scratch,
            *[a.urls[0] for a in artifacts],
        ]
        started = time.perf_counter()
        subprocess.run(argv, check=True, env=environment)
        elapsed = time.perf_counter() - started
        got = sorted(os.listdir(scratch))
        if got != sorted(a.filename for a in artifacts):
            raise SystemExit(f"pip downloaded other files: {got}")
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="about 60 MB instead of at least 500 MB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()
    artifacts = choose(60_000_000 if args.small else 500_000_000)
    total = sum(a.size or 0 for a in artifacts)
    ours, pip = [], []
    for run in range(args.runs):
        ours.append(run_ours(artifacts, args.workers))
        pip.append(run_pip(artifacts))
        print(f"run {run + 1}: ours {ours[-1]:.2f}s  pip {pip[-1]:.2f}s", flush=True)
    ours_median, pip_median = statistics.median(ours), statistics.median(pip)
    result = {
        "files": len(artifacts),
        "bytes": total,
        "runs": args.runs,
        "workers": args.workers,
        "ours_seconds": ours,
        "pip_seconds": pip,
        "ours_median_seconds": ours_median,
        "pip_median_seconds": pip_median,
        "ours_mb_per_s": total / ours_median / 1e6,
        "pip_mb_per_s": total / pip_median / 1e6,
        "throughput_ratio": pip_median / ours_median,
        "load_average": os.getloadavg(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
    }
    print(f"\n{len(artifacts)} files, {total / 1e6:.1f} MB, {args.runs} runs each (medians)")
    print(f"{'tool':<28}{'seconds':>10}{'MB/s':>10}")
    print(f"{'sparkflake fetch':<28}{ours_median:>10.2f}{result['ours_mb_per_s']:>10.1f}")
    print(f"{'pip download --no-deps':<28}{pip_median:>10.2f}{result['pip_mb_per_s']:>10.1f}")
    print(f"throughput ratio ours/pip: {result['throughput_ratio']:.2f}x (goal >= 1.0x)")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fetch.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(Path(tempfile.gettempdir()) / "bench-fetch", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
