"""CPU of a rebuild after one patch, two versions of the code back to back (issue 32 item 2).

On a machine shared with other jobs the wall time of a rebuild says more about the load
than about the code, so this measures the CPU the build process used (user + sys, from
the kernel's accounting of the finished child), for a ``before`` source tree (another
commit's ``python/src``, e.g. from ``git archive``) and this checkout's, interleaved
(before, after, after, before, …) with the load average recorded beside each run.

Each run builds ``bench_build.changed_profile`` with the added file's content made unique
(a tag per run), so every rebuild has a new top layer, as a real one-patch rebuild has;
the caches (~/.cache/sparkflake, or --cache) are the warm ones of a full build. Every
output stays until the end: its layout hard-links the store, and removing it would make
the blobs' verification records stale (bench_build's module docstring). Only the
OCI layout is written (the other formats copy the same blobs). At the end one tag is
built by both versions and their outputs compared byte for byte: receipt.json beside the
image, the manifest (which names every layer, the in-image receipt's among them).

    .venv/bin/python bench/bench_rebuild_cpu.py --before-src /work/scratch/base/python/src --runs 4
    (a source tree of a commit: git archive COMMIT python/src | tar -x -C /work/scratch/base)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_build  # the one-patch profile of the build benchmark

REPO = bench_build.REPO
RESULTS = REPO / "bench" / "results" / "rebuild-cpu-issue32.json"
# the full build the goal is a share of: bench_build's median, measured on this machine
FULL_BUILD_RESULTS = REPO / "bench" / "results" / "build-issue32-rebuild.json"
ADDED = b'"""Added by bench/bench_build.py: a source-overlay change."""\nBENCHMARK = True\n'


def tagged_profile(profile: str, scratch: Path, tag: str) -> Path:
    """``changed_profile`` whose added file holds ``tag`` (a new post-image per tag)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    target = Path(bench_build.changed_profile(profile, scratch))
    patches = target / "patches"
    content = ADDED.replace(b"True", repr(tag).encode())
    diff = (patches / "9999-bench.diff").read_bytes().replace(b"True", repr(tag).encode())
    (patches / "9999-bench.diff").write_bytes(diff)
    toml = (patches / "patches.toml").read_text()
    (patches / "patches.toml").write_text(toml.replace(hashlib.sha256(ADDED).hexdigest(), hashlib.sha256(content).hexdigest()))
    return target


def build(source: Path, profile: Path, out: Path, cache: Path | None, bytecode: bool = True) -> dict:
    """One ``sparkflake build`` with ``source`` first on the import path; its CPU from the
    kernel (the children's rusage before and after). ``bytecode``: compiled modules are
    written and reused (as an installed package has them), else every run compiles."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()
    start = time.perf_counter()
    command = [sys.executable, "-m", "sparkflake.cli", "build", str(profile), "-o", str(out), "--json", "--offline",
               "--formats", "oci", *(["--cache", str(cache)] if cache else [])]
    completed = subprocess.run(command, capture_output=True, text=True, check=False,
                               env={**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" or not bytecode},
                                    "SOURCE_DATE_EPOCH": "1", "PYTHONPATH": str(source)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise SystemExit(f"build with {source} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    result = json.loads(completed.stdout)
    return {
        "user_s": round(after.ru_utime - before.ru_utime, 3),
        "sys_s": round(after.ru_stime - before.ru_stime, 3),
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3),
        "wall_s": round(wall, 3),
        "load_average": [round(x, 2) for x in load],
        "stages_wall_s": result.get("timings"),
        "manifest": result.get("manifest"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-src", type=Path, required=True, help="python/src of the code to compare with")
    parser.add_argument("--before-label", default="before")
    parser.add_argument("--after-src", type=Path, default=REPO / "python" / "src",
                        help="python/src of the code measured (default: this checkout's)")
    parser.add_argument("--after-label", default="this checkout")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--profile", default="glm53-dflash7")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--no-bytecode", action="store_true",
                        help="compile every module on every run (PYTHONDONTWRITEBYTECODE kept)")
    parser.add_argument("--scratch", type=Path, default=Path("/work/scratch/h32r-rebuild-cpu"))
    parser.add_argument("--full-build-results", type=Path, default=FULL_BUILD_RESULTS,
                        help="bench_build's results, whose median full build the goal is 5%% of")
    args = parser.parse_args()
    full_build_s = json.loads(args.full_build_results.read_text())["median_full_build_s"]
    versions = {"before": args.before_src.resolve(), "after": args.after_src.resolve()}
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    warm = {label: tagged_profile(args.profile, args.scratch / f"warm-{label}", f"warm-{label}-{time.time_ns()}")
            for label in versions}
    for label, source in versions.items():  # each version's own caches (e.g. the scan table) warm
        build(source, warm[label], args.scratch / f"warm-{label}" / "out", args.cache, not args.no_bytecode)
    for run in range(args.runs):
        order = ["before", "after"] if run % 2 == 0 else ["after", "before"]
        for label in order:
            work = args.scratch / f"{label}-{run}"
            profile = tagged_profile(args.profile, work, f"{label}-{run}-{time.time_ns()}")
            measured = build(versions[label], profile, work / "out", args.cache, not args.no_bytecode)
            runs[label].append(measured)
            print(f"run {run + 1} {label}: cpu {measured['cpu_s']:.2f}s (user {measured['user_s']:.2f} "
                  f"sys {measured['sys_s']:.2f}) wall {measured['wall_s']:.1f}s load {measured['load_average'][0]}",
                  file=sys.stderr, flush=True)
    # The same inputs through both versions: the outputs must be byte-identical.
    tag = f"same-{time.time_ns()}"
    outputs = {}
    for label, source in versions.items():
        work = args.scratch / f"same-{label}"
        profile = tagged_profile(args.profile, work, tag)
        measured = build(source, profile, work / "out", args.cache)
        outputs[label] = {"manifest": measured["manifest"],
                          "receipt_sha256": hashlib.sha256((work / "out" / "receipt.json").read_bytes()).hexdigest()}
    shutil.rmtree(args.scratch, ignore_errors=True)
    median = {label: statistics.median(r["cpu_s"] for r in runs[label]) for label in versions}
    record = {
        "what": "CPU (user+sys) of `sparkflake build` after one patch (bench_build.changed_profile, a new added-file "
                "content per run), warm caches, OCI layout only; two versions interleaved",
        "profile": args.profile,
        "versions": {"before": args.before_label, "after": args.after_label},
        "cpus": os.cpu_count(),
        "bytecode": "compiled modules reused (written by the warm-up run)" if not args.no_bytecode else "compiled on every run",
        "runs": runs,
        "median_cpu_s": median,
        "full_build_wall_s": full_build_s,
        "full_build_from": str(args.full_build_results),
        "goal_s": round(0.05 * full_build_s, 2),
        "median_after_vs_full": round(median["after"] / full_build_s, 4),
        "same_inputs_both_versions": outputs,
        "same_outputs": outputs["before"] == outputs["after"],
    }
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({"median_cpu_s": median, "same_outputs": record["same_outputs"],
                      "after_vs_full": record["median_after_vs_full"]}), flush=True)
    return 0 if record["same_outputs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
