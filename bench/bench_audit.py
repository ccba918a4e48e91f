"""Benchmark: `sparkflake audit` of a gzip image of >= 1 GB against the physical bound and
against `skopeo copy oci:A oci:B`, in one run.

The bound re-derives the same digests with the fastest stock tools: `sha256sum` of every
blob, then `gzip -dc LAYER | sha256sum` per layer (two processes, so decompression and
hashing overlap on two cores); the result file states it (``bound``). Our audit reads each
blob once, hashing it as stored and inflating its gzip members on every core, and also
parses every tar header to find the ELF files. `skopeo copy` between two OCI layouts reads and re-verifies every
blob. Runs are interleaved; medians and ratios.

    .venv/bin/python bench/bench_audit.py            # >= 1 GiB compressed (2.3 GB of files)
    .venv/bin/python bench/bench_audit.py --small
    .venv/bin/python bench/bench_audit.py --small --against /tmp/main/python/src --results R.json

``--against SRC`` also times the audit of another checkout's ``python/src`` (an A/B of a
change, interleaved with the other runs).

The image is built once with our engine under /tmp and reused; results go to
bench/results/audit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "audit.json"
SPARKFLAKE = [sys.executable, "-m", "sparkflake.cli"]


def make_tree(root: Path, total_bytes: int, small_files: int, seed: int = 7) -> None:
    """Half random, half repetitive bytes: compresses about 2:1, like a Python env."""
    rng = random.Random(seed)
    large_count = 6
    large_each = (total_bytes - small_files * 8192) // large_count
    for index in range(large_count):
        folder = root / f"layer{index % 3}" / "lib"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"blob{index}.bin", "wb") as handle:
            written = 0
            while written < large_each:
                block = rng.randbytes(1 << 19) + bytes([index]) * (1 << 19)
                handle.write(block[: large_each - written])
                written += len(block)
    for index in range(small_files):
        folder = root / f"layer{index % 3}" / "site-packages" / f"pkg{index % 200}"
        folder.mkdir(parents=True, exist_ok=True)
        size = rng.randint(100, 16000)
        (folder / f"mod{index}.py").write_bytes((f"# module {index}\n" * (size // 12 + 1)).encode()[:size])


def build_image(work: Path, total_bytes: int, small_files: int) -> Path:
    marker = work / f"image-{total_bytes}-{small_files}"
    if (marker / "out" / "digests.json").is_file():
        return marker / "out"
    shutil.rmtree(marker, ignore_errors=True)
    tree = marker / "tree"
    make_tree(tree, total_bytes, small_files)
    spec = {
        "platform": "linux/arm64",
        "compression": "gzip",
        "layers": [{"tree": f"tree/layer{i}"} for i in range(3)],
        "config": {"Entrypoint": ["/bin/true"]},
        "tag": "latest",
    }
    (marker / "spec.json").write_text(json.dumps(spec))
    subprocess.run([*SPARKFLAKE, "image", "build", str(marker / "spec.json"), "-o", str(marker / "out")], check=True)
    return marker / "out"


def children_cpu() -> float:
    """CPU seconds (user + system) of the waited-for children so far: on a loaded machine
    the share of the cores a run gets varies, the CPU it costs does not."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


CPU: dict[str, list[float]] = {"ours": [], "bound": [], "skopeo": [], "against": []}


def timed(argv_list, env=None, cpu_key: str | None = None) -> float:
    start, cpu = time.perf_counter(), children_cpu()
    for argv in argv_list:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    if cpu_key is not None:
        CPU[cpu_key].append(children_cpu() - cpu)
    return time.perf_counter() - start


def bound(layout: Path) -> float:
    blobs = sorted(str(p) for p in (layout / "blobs" / "sha256").iterdir())
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_text())
    start, cpu = time.perf_counter(), children_cpu()
    subprocess.run(["sha256sum", *blobs], check=True, stdout=subprocess.DEVNULL)
    for layer in manifest["layers"]:
        path = layout / "blobs" / "sha256" / layer["digest"][7:]
        gunzip = subprocess.Popen(["gzip", "-dc", str(path)], stdout=subprocess.PIPE)
        hasher = subprocess.run(["sha256sum"], stdin=gunzip.stdout, stdout=subprocess.DEVNULL, check=True)
        gunzip.stdout.close()
        if gunzip.wait() != 0 or hasher.returncode != 0:
            raise SystemExit("bound pipeline failed")
    CPU["bound"].append(children_cpu() - cpu)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 120 MB image, 2 runs")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--image", help="audit this already built output (OUT with oci/) instead")
    parser.add_argument("--against", metavar="SRC", help="also audit with this python/src (A/B of a change)")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"where the figures go (default {RESULTS})")
    args = parser.parse_args()
    total, small, runs = (120 << 20, 1500, 2) if args.small else (2300 << 20, 12000, 5)
    runs = args.runs or runs
    work = Path(tempfile.gettempdir()) / "sparkflake-bench-audit"
    work.mkdir(exist_ok=True)
    out = Path(args.image) if args.image else build_image(work, total, small)
    layout = out / "oci"
    image_bytes = sum(p.stat().st_size for p in (layout / "blobs" / "sha256").iterdir())
    audit = [*SPARKFLAKE, "audit", f"oci:{layout}"]
    if (out / "digests.json").is_file():  # the build's digests: the audit compares every one
        audit += ["--expect-file", str(out / "digests.json")]
    ours, bounds, skopeo, against, loads = [], [], [], [], [os.getloadavg()]
    for _ in range(runs):
        ours.append(timed([audit], cpu_key="ours"))
        if args.against:
            env = {**os.environ, "PYTHONPATH": args.against}
            against.append(timed([audit], env=env, cpu_key="against"))
        bounds.append(bound(layout))
        copy_target = work / "skopeo-copy"
        shutil.rmtree(copy_target, ignore_errors=True)
        tag = json.loads((layout / "index.json").read_text())["manifests"][0]["annotations"][
            "org.opencontainers.image.ref.name"
        ]
        skopeo.append(timed(cpu_key="skopeo", argv_list=[["skopeo", "copy", "-q", f"oci:{layout}:{tag}", f"oci:{copy_target}:{tag}"]]))
        shutil.rmtree(copy_target, ignore_errors=True)
        loads.append(os.getloadavg())
    result = {
        "bound": "sha256sum of every blob, then gzip -dc LAYER | sha256sum for each layer (GNU gzip, "
                 "coreutils; two processes per layer), timed in the same run as the audit",
        "image_bytes": image_bytes,
        "runs": runs,
        "ours_s": statistics.median(ours),
        "bound_s": statistics.median(bounds),
        "skopeo_copy_s": statistics.median(skopeo),
        "ratio_vs_bound": statistics.median(ours) / statistics.median(bounds),
        "ratio_vs_skopeo_copy": statistics.median(ours) / statistics.median(skopeo),
        "all": {"ours": ours, "bound": bounds, "skopeo": skopeo},
        "cpu_s": {key: statistics.median(values) for key, values in CPU.items() if values},
        "cpu_ratio_vs_bound": statistics.median(CPU["ours"]) / statistics.median(CPU["bound"]),
        "all_cpu": {key: values for key, values in CPU.items() if values},
        "load": os.getloadavg(),
        "load_per_run": loads,  # 1/5/15-minute load before the first run and after each
        "cores": os.cpu_count(),
    }
    if against:
        result.update(against=args.against, against_s=statistics.median(against),
                      ratio_vs_against=statistics.median(ours) / statistics.median(against))
        result["all"]["against"] = against
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    print(f"image: {image_bytes / 1e6:.0f} MB compressed, {runs} runs (medians)")
    print(f"  sparkflake audit           {result['ours_s']:.2f} s")
    print(f"  sha256sum + gzip -dc|sha   {result['bound_s']:.2f} s   ratio {result['ratio_vs_bound']:.2f}x (goal <= 1.1x)")
    print(f"  skopeo copy oci:A oci:B    {result['skopeo_copy_s']:.2f} s   ratio {result['ratio_vs_skopeo_copy']:.2f}x")
    if against:
        print(f"  audit with {args.against}  {result['against_s']:.2f} s   ratio {result['ratio_vs_against']:.2f}x")


if __name__ == "__main__":
    main()
