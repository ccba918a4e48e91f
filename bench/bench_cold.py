"""The cold path: a fresh machine to the glm53-dflash7 image, against the bound of downloading
the same bytes, in the same run, alternating.

One run of ours, from nothing sparkflake made:
  install  a new venv with the main job's Python side exactly as `bin/bootstrap --main-job`
           makes it (python -m venv, uv, `uv sync` of python/uv.lock without the test
           extra) with an empty uv cache, so every wheel is downloaded;
  build    `sparkflake build PROFILE --formats oci --json` with an empty cache root: its own
           timings split it into fetch, assemble (OS base, Python env, overlay), layers and
           write.
The Debian packages of the main job (python3-venv, git, ca-certificates) are on this machine
already and are not reinstalled: apt's share is stated, not measured, in the result.

The bound: every URL the build fetched (the profile's locked inputs), downloaded by plain
parallel HTTP GETs (the same worker count as ours) into an empty directory, no hashing, no
verifying, nothing else. No build can finish before its bytes have arrived.

Each run needs about 20 GB of scratch (the cache's inputs, trees and layers, the layout),
deleted after it. Prints a table; writes bench/results/cold.json.

    .venv/bin/python bench/bench_cold.py [--profile glm53-dflash7] [--runs N] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "src"))

from sparkflake.lock.profile_locks import load_locks, load_profile

UV_VERSION = "0.13.9"  # bin/bootstrap's uv_version
WORKERS = 6  # sparkflake fetch's default worker count (fetch/__init__.py)
CHUNK = 1 << 20


def fetched_urls(profile: str, fetched_sha256: set[str]) -> list[tuple[str, int]]:
    """(first URL, size) of every locked input whose bytes our build fetched (its cache's blobs)."""
    rows = []
    for lock in load_locks(load_profile(profile, REPO / "profiles")):
        for pin in lock.inputs:
            sha256, urls = getattr(pin, "sha256", None), getattr(pin, "urls", ())
            if sha256 in fetched_sha256 and urls:
                rows.append((str(urls[0]), int(getattr(pin, "size", 0) or 0)))
    return rows


def run_bound(urls: list[tuple[str, int]], scratch: Path) -> tuple[float, int]:
    target = Path(tempfile.mkdtemp(prefix="bench-cold-bound-", dir=scratch))

    def get(index_url: tuple[int, tuple[str, int]]) -> int:
        index, (url, _) = index_url
        written = 0
        with urllib.request.urlopen(url, timeout=120) as response, open(target / str(index), "wb") as out:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                written += len(chunk)
        return written

    started = time.perf_counter()
    try:
        # largest first, as a scheduler that knows the sizes would start them
        order = sorted(enumerate(urls), key=lambda row: -row[1][1])
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            total = sum(pool.map(get, order))
        return time.perf_counter() - started, total
    finally:
        shutil.rmtree(target, ignore_errors=True)


def run_ours(profile: str, scratch: Path, fetched: set[str]) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-cold-ours-", dir=scratch))
    try:
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
        environment["UV_CACHE_DIR"] = str(work / "uv-cache")
        environment["PIP_NO_CACHE_DIR"] = "1"
        venv = work / "venv"
        started = time.perf_counter()
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, env=environment)
        subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        f"uv=={UV_VERSION}"], check=True, env=environment)
        subprocess.run([str(venv / "bin/uv"), "sync", "--project", str(REPO / "python"), "--quiet", "--locked",
                        "--inexact"], check=True, env={**environment, "UV_PROJECT_ENVIRONMENT": str(venv)})
        install = time.perf_counter() - started
        started = time.perf_counter()
        completed = subprocess.run(
            [str(venv / "bin/sparkflake"), "build", profile, "-o", str(work / "out"), "--cache", str(work / "cache"),
             "--formats", "oci", "--json"],
            check=True, env=environment, capture_output=True, text=True, cwd=REPO)
        build = time.perf_counter() - started
        fetched.update(path.name for path in (work / "cache" / "blobs" / "sha256").iterdir())
        result = json.loads(completed.stdout)
        timings = {stage: float(seconds) for stage, seconds in result.get("timings", {}).items()}
        return {"install": install, "build": build, "total": install + build,
                "manifest_digest": result["manifest"],
                **{f"build.{stage}": seconds for stage, seconds in timings.items()}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="glm53-dflash7")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scratch", default=None, help="where each run's ~20 GB go (default: the system tmp)")
    parser.add_argument("--results", default=str(REPO / "bench" / "results" / "cold.json"))
    args = parser.parse_args()
    scratch = Path(args.scratch or tempfile.gettempdir())
    scratch.mkdir(parents=True, exist_ok=True)
    ours: list[dict] = []
    bound: list[float] = []
    loads = []
    fetched: set[str] = set()
    urls: list[tuple[str, int]] = []
    for run in range(args.runs):
        loads.append(os.getloadavg())
        # ours first in the first run: the bound downloads what ours fetched; then alternating
        for side in (("ours", "bound") if run % 2 == 0 else ("bound", "ours")):
            if side == "ours":
                ours.append(run_ours(args.profile, scratch, fetched))
                urls = fetched_urls(args.profile, fetched)
                print(f"run {run + 1}: ours {ours[-1]['total']:.1f} s (install {ours[-1]['install']:.1f}, "
                      f"build {ours[-1]['build']:.1f}) {ours[-1]['manifest_digest']}", flush=True)
            else:
                seconds, total = run_bound(urls, scratch)
                bound.append(seconds)
                print(f"run {run + 1}: bound {seconds:.1f} s for {total / 1e9:.2f} GB", flush=True)
        loads.append(os.getloadavg())
    keys = [key for key in ours[0] if key != "manifest_digest"]
    medians = {key: statistics.median(run[key] for run in ours) for key in keys}
    record = {
        "profile": args.profile,
        "runs": args.runs,
        "urls": len(urls),
        "bytes": sum(size for _, size in urls),
        "expected_manifest_digest": json.loads(
            (REPO / "profiles" / args.profile / "expected-digests.json").read_text())["manifest"],
        "bound": "plain parallel HTTP GET of every locked URL of the profile "
                 f"({WORKERS} workers, no hashing), same run, alternating with ours",
        "not_measured": "apt-get of the main job's Debian packages (python3-venv, git, ca-certificates): "
                        "present on this machine",
        "ours": ours,
        "bound_seconds": bound,
        "ours_median": medians,
        "bound_median_seconds": statistics.median(bound),
        "ratio_to_bound": medians["total"] / statistics.median(bound),
        "goal_seconds": 180,
        "load_average": loads,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
    }
    Path(args.results).write_text(json.dumps(record, indent=2) + "\n")
    print(f"ours median {medians['total']:.1f} s (install {medians['install']:.1f}, build {medians['build']:.1f}); "
          f"bound {statistics.median(bound):.1f} s; ratio {record['ratio_to_bound']:.2f}; goal 180 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
