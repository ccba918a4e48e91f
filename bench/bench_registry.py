"""Benchmark: pulling an image from a local distribution registry into an OCI layout, ours
(the rank agent's `pull`: every blob streamed, hashed once and verified before it takes its
name) against `skopeo copy docker://… oci:…` (which verifies digests too), in one run,
interleaved, medians of --runs, ratio ours/skopeo.

The image is one layer of --size-mib random bytes (nothing compresses it, and neither side
unpacks it), a config and a manifest, pushed once by skopeo. Each timed pull writes into a
new, empty layout, so both sides fetch every byte. With --against SRC, ours is timed a
third time with PYTHONPATH=SRC (another checkout's python/src): an A/B of a change.

    .venv/bin/python bench/bench_registry.py [--size-mib 512] [--runs 5] [--against SRC]

Results go to bench/results/registry-pull.json (or --results), with the load average.
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
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "registry-pull.json"
sys.path.insert(0, str(REPO / "python" / "tests"))
from fixtures.oci import RegistryServer

MIB = 1 << 20
LAYER = "application/vnd.oci.image.layer.v1.tar"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_blob(layout: Path, content: bytes) -> dict:
    digest = hashlib.sha256(content).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(content)
    return {"digest": f"sha256:{digest}", "size": len(content)}


def make_layout(layout: Path, size: int) -> None:
    """One image: a layer of ``size`` random bytes, written in 8 MiB pieces and hashed as written."""
    (layout / "blobs" / "sha256").mkdir(parents=True)
    hasher, scratch = hashlib.sha256(), layout / "layer.partial"
    with open(scratch, "wb") as sink:
        for start in range(0, size, 8 * MIB):
            piece = os.urandom(min(8 * MIB, size - start))
            sink.write(piece)
            hasher.update(piece)
    layer = {"mediaType": LAYER, "digest": f"sha256:{hasher.hexdigest()}", "size": size}
    scratch.rename(layout / "blobs" / "sha256" / hasher.hexdigest())
    config = json.dumps({"architecture": "arm64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      **write_blob(layout, config)},
                           "layers": [layer]}).encode()
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **write_blob(layout, manifest),
                            "annotations": {"org.opencontainers.image.ref.name": "v1"},
                            "platform": {"architecture": "arm64", "os": "linux"}}]}
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def timed(argv: list[str], env: dict[str, str], target: Path, cpu: list[float]) -> float:
    shutil.rmtree(target, ignore_errors=True)  # a new, empty layout every run: every byte fetched
    start, used = time.perf_counter(), children_cpu()
    completed = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    cpu.append(children_cpu() - used)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {completed.stdout}{completed.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", metavar="SRC", help="also time ours with this python/src (an A/B of a change)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-registry."))
    env = {**os.environ, "HOME": str(work)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an operator runs it: bytecode cached after the warm-up
    source = work / "source"
    make_layout(source, args.size_mib * MIB)
    registry = RegistryServer.start(work / "registry")
    try:
        reference = f"{registry.host}/bench/big:v1"
        subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false", f"oci:{source}:v1", f"docker://{reference}"],
                       env=env, check=True, capture_output=True)
        target = work / "pulled"
        ours = [sys.executable, "-m", "sparkflake.distribute.agent", "pull", "--reference", reference,
                "--layout", str(target), "--platform", "linux/arm64", "--insecure"]
        skopeo = ["skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{reference}", f"oci:{target}:v1"]
        sides = {"sparkflake": (ours, env), "skopeo": (skopeo, env)}
        if args.against:
            sides["against"] = (ours, {**env, "PYTHONPATH": args.against})
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        for argv, side_env in sides.values():  # warm-up: caches, bytecode
            timed(argv, side_env, target, [])
        loads = [os.getloadavg()]
        for _ in range(args.runs):
            for name, (argv, side_env) in sides.items():
                seconds[name].append(timed(argv, side_env, target, cpu[name]))
            loads.append(os.getloadavg())
    finally:
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)  # the image, the registry, the pulls: this run's scratch
    size = args.size_mib * MIB
    report = {"size_mib": args.size_mib, "runs": args.runs, "cpus": os.cpu_count(),
              "load_per_run": [[round(x, 2) for x in load] for load in loads],
              "seconds": {name: [round(t, 4) for t in values] for name, values in seconds.items()},
              "cpu_seconds": {name: [round(t, 4) for t in values] for name, values in cpu.items()},
              "results": {}}
    skopeo_median = statistics.median(seconds["skopeo"])
    for name in sides:
        median = statistics.median(seconds[name])
        report["results"][name] = {"median_s": round(median, 3), "mb_per_s": round(size / median / 1e6, 1),
                                   "cpu_median_s": round(statistics.median(cpu[name]), 3),
                                   "ratio_to_skopeo": round(median / skopeo_median, 2)}
        print(f"{name:<11} {median:7.3f} s  {size / median / 1e6:7.1f} MB/s  CPU {statistics.median(cpu[name]):6.3f} s"
              f"  ratio to skopeo {median / skopeo_median:.2f}")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
