"""Benchmark: `sparkflake receipt verify RECEIPT IMAGE` of this checkout against another
checkout's `python/src` (an A/B of a change), in one run, on an image with a sizeable layer.

The image (gzip, three layers: a ~600 MB tree of large and small files, a layer that
deletes and adds files, the manifests on top listing retained native files and overlay
targets) and its receipt are built once with this checkout's oci library under /tmp and
reused. Each verify is a fresh process; runs are interleaved; medians, ratio, peak RSS (from
wait4). Both sides must print the same report (the same links, statuses and details).

    .venv/bin/python bench/bench_receipt_verify.py --against /tmp/old/python/src
    .venv/bin/python bench/bench_receipt_verify.py --against SRC --small --runs 2

Results go to bench/results/receipt-verify.json; ``--clean`` removes the image afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "receipt-verify.json"
sys.path.insert(0, str(REPO / "python" / "tests"))  # the image and receipt the tests make too
PREFIX = "opt/app"


def make_tree(root: Path, total_bytes: int, small_files: int, seed: int = 11) -> dict[str, bytes]:
    """Half random, half repetitive bytes (compresses about 2:1, like a Python env); the
    sha256 of each file, by image path below PREFIX."""
    rng = random.Random(seed)
    hashes: dict[str, bytes] = {}
    large_count = 6
    large_each = (total_bytes - small_files * 8192) // large_count
    for index in range(large_count):
        path = root / PREFIX / "lib" / f"libbig{index}.so"
        path.parent.mkdir(parents=True, exist_ok=True)
        hasher = hashlib.sha256()
        with open(path, "wb") as handle:
            written = 0
            while written < large_each:
                block = (rng.randbytes(1 << 19) + bytes([index]) * (1 << 19))[: large_each - written]
                handle.write(block)
                hasher.update(block)
                written += len(block)
        hashes[f"lib/libbig{index}.so"] = hasher.digest()
    for index in range(small_files):
        name = f"site-packages/pkg{index % 200}/mod{index}.py"
        size = rng.randint(100, 16000)
        content = (f"# module {index}\n" * (size // 12 + 1)).encode()[:size]
        (root / PREFIX / name).parent.mkdir(parents=True, exist_ok=True)
        (root / PREFIX / name).write_bytes(content)
        hashes[name] = hashlib.sha256(content).digest()
    return hashes


def build_image(work: Path, total_bytes: int, small_files: int) -> tuple[Path, Path]:
    """The image's layout and its receipt (right about everything but the labels and the
    in-image receipt, which only a profile build writes: verify reads every layer all the same)."""
    from fixtures.receipts import image_with_receipt
    from sparkflake import oci

    marker = work / f"image-{total_bytes}-{small_files}"
    if (marker / "receipt.json").is_file():
        return marker / "out" / "oci", marker / "receipt.json"
    shutil.rmtree(marker, ignore_errors=True)
    hashes = make_tree(marker / "tree", total_bytes, small_files)
    added = b"# added by the overlay\n"
    (marker / "tree1" / PREFIX).mkdir(parents=True)
    (marker / "tree1" / PREFIX / "added.py").write_bytes(added)
    deleted = sorted(name for name in hashes if name.endswith(".py"))[:50]
    retained = {"files": [{"path": name, "sha256": hashes[name].hex(), "size": (marker / "tree" / PREFIX / name).stat().st_size}
                          for name in sorted(hashes) if name.endswith(".so")]}
    overlay = {"install_prefix": f"/{PREFIX}", "entries": [
        *({"path": name, "target_sha256": ""} for name in deleted),
        *({"path": name, "target_sha256": hashes[name].hex()} for name in sorted(hashes)[::10] if name not in deleted),
        {"path": "added.py", "target_sha256": hashlib.sha256(added).hexdigest()}]}
    layers = (
        oci.LayerInput(sources=(oci.TreeSource(str(marker / "tree")),)),
        oci.LayerInput(sources=(oci.TreeSource(str(marker / "tree1")),), deletions=tuple(f"/{PREFIX}/{n}" for n in deleted)),
        oci.LayerInput(),  # the manifests' own layer, as a profile build's top layer holds them
    )
    layout, receipt_path = image_with_receipt(marker, layers, json.dumps(retained).encode(), json.dumps(overlay).encode(),
                                              image_name="localhost/bench:1")
    shutil.rmtree(marker / "store")  # the layout holds the blobs; keep one copy on disk
    return layout, receipt_path


def verify(source: str, receipt_path: Path, layout: Path) -> tuple[float, int, str]:
    """Seconds, peak RSS in KiB and the printed report of one `receipt verify --json`."""
    env = {**os.environ, "PYTHONPATH": source}
    argv = [sys.executable, "-m", "sparkflake.cli", "receipt", "verify", str(receipt_path), str(layout), "--json"]
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"receipt verify with {source} exited {os.waitstatus_to_exitcode(status)}")
    return elapsed, usage.ru_maxrss, out.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="SRC", required=True, help="the other checkout's python/src")
    parser.add_argument("--small", action="store_true", help="a 120 MB tree")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clean", action="store_true", help="remove the image afterwards")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"where the figures go (default {RESULTS})")
    args = parser.parse_args()
    total, small = (120 << 20, 1500) if args.small else (600 << 20, 12000)
    work = Path(tempfile.gettempdir()) / "sparkflake-bench-receipt-verify"
    work.mkdir(exist_ok=True)
    layout, receipt_path = build_image(work, total, small)
    ours_source = str(REPO / "python" / "src")
    blob_bytes = sum(p.stat().st_size for p in (layout / "blobs" / "sha256").iterdir())
    times: dict[str, list[float]] = {"ours": [], "against": []}
    rss: dict[str, list[int]] = {"ours": [], "against": []}
    for _ in range(args.runs):
        reports = {}
        for key, source in (("ours", ours_source), ("against", args.against)):
            elapsed, peak, reports[key] = verify(source, receipt_path, layout)
            times[key].append(elapsed)
            rss[key].append(peak)
        if reports["ours"] != reports["against"]:
            raise SystemExit(f"the reports differ:\nours {reports['ours']}\nagainst {reports['against']}")
    result = {
        "image_bytes": blob_bytes,
        "tree_bytes": total,
        "files": small + 6,
        "runs": args.runs,
        "against": args.against,
        "ours_s": statistics.median(times["ours"]),
        "against_s": statistics.median(times["against"]),
        "ratio_vs_against": statistics.median(times["ours"]) / statistics.median(times["against"]),
        "peak_rss_kib": {key: max(values) for key, values in rss.items()},
        "all": times,
        "load": os.getloadavg(),
        "cores": os.cpu_count(),
        "same_report": True,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    print(f"image: {blob_bytes / 1e6:.0f} MB compressed ({total / 1e6:.0f} MB tree), {args.runs} runs (medians)")
    print(f"  receipt verify (this checkout)  {result['ours_s']:.2f} s  peak {result['peak_rss_kib']['ours'] / 1024:.0f} MiB")
    print(f"  receipt verify ({args.against})  {result['against_s']:.2f} s  peak "
          f"{result['peak_rss_kib']['against'] / 1024:.0f} MiB   ratio {result['ratio_vs_against']:.2f}x")
    if args.clean:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
