"""Python environment assembly: sparkflake (pypa/installer, RECORD verified, ELF checked,
wheels in parallel) against `pip install --no-deps --no-compile --target` of the same
wheel files on this host, in the same run, alternating.

Default: every wheel of profiles/glm53.lock (the full glm53 environment, ~4.4 GB of
wheels; fetch them first with `sparkflake fetch glm53-dflash7`). ``--small``: the wheels
under 20 MB. Prints a table, writes bench/results/assemble.json.

    .venv/bin/python bench/bench_assemble.py [--small] [--runs N]
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

from sparkflake.compose.locked_inputs import (
    AssemblyPolicy,
    load_policy,
    policy_path_for,
    wheel_inputs,
)
from sparkflake.compose.python_env import WheelInput, assemble_python_env
from sparkflake.core.blob_cache import BlobCache
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.target import InstallTarget


def count_files(root: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _dirs, filenames in os.walk(root):
        for name in filenames:
            files += 1
            size += os.lstat(os.path.join(dirpath, name)).st_size
    return files, size


def run_ours(wheels: list[WheelInput], scratch: Path, policy: AssemblyPolicy) -> tuple[float, int, int]:
    output = scratch / "ours"
    started = time.perf_counter()
    assemble_python_env(wheels, output, waivers=policy.waivers, collisions=policy.collisions)
    elapsed = time.perf_counter() - started
    files, size = count_files(output)
    shutil.rmtree(output)
    return elapsed, files, size


def run_pip(wheels: list[WheelInput], scratch: Path) -> tuple[float, int, int]:
    links = scratch / "wheels"
    links.mkdir(exist_ok=True)
    for wheel in wheels:
        link = links / wheel.filename
        if not link.exists():
            os.symlink(wheel.path, link)
    output = scratch / "pip"
    platforms = [arg for tag in InstallTarget().platform_tags() for arg in ("--platform", tag)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    environment["PIP_CONFIG_FILE"] = os.devnull
    argv = [
        sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--no-index",
        "--no-cache-dir", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
        *platforms, "--python-version", "3.11", "--implementation", "cp",
        "--abi", "cp311", "--abi", "abi3", "--abi", "none",
        "--target", str(output), *[str(links / w.filename) for w in wheels],
    ]
    started = time.perf_counter()
    subprocess.run(argv, check=True, env=environment)
    elapsed = time.perf_counter() - started
    files, size = count_files(output)
    shutil.rmtree(output)
    return elapsed, files, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="only the wheels under 20 MB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    lock_path = REPO / "profiles" / "glm53.lock"
    lock = load_lock(lock_path)
    cache = BlobCache(os.environ.get("SPARKFLAKE_CACHE") or None)
    wheels = wheel_inputs(lock, cache)
    if args.small:
        wheels = [w for w in wheels if w.path.stat().st_size < 20_000_000]
    policy = load_policy(policy_path_for(lock_path), lock)
    wheel_bytes = sum(w.path.stat().st_size for w in wheels)
    ours, pip = [], []
    trees = {}
    with tempfile.TemporaryDirectory(prefix="bench-assemble-", dir=os.environ.get("BENCH_TMP")) as scratch_name:
        scratch = Path(scratch_name)
        for run in range(args.runs):
            seconds, files, size = run_ours(wheels, scratch, policy)
            ours.append(seconds)
            trees["ours"] = {"files": files, "bytes": size}
            seconds, files, size = run_pip(wheels, scratch)
            pip.append(seconds)
            trees["pip"] = {"files": files, "bytes": size}
            print(f"run {run + 1}: ours {ours[-1]:.1f}s  pip {pip[-1]:.1f}s  (load {os.getloadavg()[0]:.1f})", flush=True)
    ours_median, pip_median = statistics.median(ours), statistics.median(pip)
    result = {
        "wheels": len(wheels),
        "wheel_bytes": wheel_bytes,
        "runs": args.runs,
        "ours_seconds": ours,
        "pip_seconds": pip,
        "ours_median_seconds": ours_median,
        "pip_median_seconds": pip_median,
        "time_ratio": ours_median / pip_median,
        "trees": trees,
        "load_average": os.getloadavg(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
    }
    print(f"\n{len(wheels)} wheels, {wheel_bytes / 1e6:.0f} MB; {args.runs} runs each (medians)")
    print(f"{'tool':<44}{'seconds':>10}{'files':>9}{'MB':>9}")
    print(f"{'sparkflake assemble (python env)':<44}{ours_median:>10.1f}{trees['ours']['files']:>9}{trees['ours']['bytes'] / 1e6:>9.0f}")
    print(f"{'pip install --no-deps --no-compile --target':<44}{pip_median:>10.1f}{trees['pip']['files']:>9}{trees['pip']['bytes'] / 1e6:>9.0f}")
    print(f"time ratio ours/pip: {result['time_ratio']:.2f}x (goal <= 1.0x)")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "assemble.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
