"""``sparkflake replicate`` of a 50-file checkpoint to three ranks vs the physical bound, in one run.

Four network namespaces chained by veth pairs (python/tests/netns_ranks.py), one sshd each.
The checkpoint has FILES files (default 50: 48 shards of SHARD_MIB, a config and a tokenizer),
random (incompressible) bytes. Measured, several runs each, medians:

- replicate: rank0 -> rank1 -> rank2 -> rank3, every file verified on every rank, nothing held
  before (the copies are removed between runs);
- replicate again: every rank already holds every file (the check-only cost);
- one stream: the same bytes as one file through ``fanout`` (the transport's own rate, which
  is what a per-file cost is measured against).

Ratios: replicate / one stream (goal: close to 1; a fixed cost per file shows as the excess
divided by FILES). Writes bench/results/replicate.json.
Usage: nice -n 10 .venv/bin/python bench/bench_replicate.py [--files 50] [--shard-mib 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))

from fixtures.netns_ranks import NetnsRanks
from sparkflake.distribute.fanout import FanoutRequest, fanout
from sparkflake.distribute.replicate import ReplicateRequest, replicate

MIB = 1 << 20


def make_checkpoint(root: Path, files: int, shard_bytes: int) -> int:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "glm", "shards": files - 2}))
    (root / "tokenizer.json").write_bytes(os.urandom(64 << 10))
    total = 0
    for index in range(files - 2):
        (root / f"model-{index + 1:05d}-of-{files - 2:05d}.safetensors").write_bytes(os.urandom(shard_bytes))
        total += shard_bytes
    return total


def concatenate(root: Path, target: Path) -> str:
    hasher = hashlib.sha256()
    with open(target, "wb") as sink:
        for path in sorted(root.iterdir()):
            content = path.read_bytes()
            sink.write(content)
            hasher.update(content)
    return hasher.hexdigest()


def timed(action) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--shard-mib", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--label", default="current", help="key under which this run's figures are stored")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "replicate.json")
    args = parser.parse_args()

    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="sfk-bench-replicate-"))
    ranks = NetnsRanks(workdir / "ranks")
    ranks.start()
    seconds: dict[str, list[float]] = {"replicate": [], "replicate_again": [], "one_stream": []}
    try:
        site = ranks.site()
        model = workdir / "ckpt"
        payload = make_checkpoint(model, args.files, args.shard_mib * MIB)
        stream = workdir / "stream.bin"
        stream_sha = concatenate(model, stream)
        request = ReplicateRequest(model_dir=str(model))

        def copies_removed() -> None:
            for index in range(1, ranks.count):
                shutil.rmtree(ranks.data_dir(index) / "models", ignore_errors=True)
                for leftover in ranks.data_dir(index).glob("*stream.bin*"):
                    leftover.unlink()

        def run_replicate() -> None:
            report = replicate(site, request)
            assert report["complete"], report

        def run_stream() -> None:
            report = fanout(site, FanoutRequest(archive=str(stream), sha256=stream_sha))
            assert report["complete"], report

        copies_removed()
        run_stream()  # warm up host keys and the page cache
        for _ in range(args.runs):
            copies_removed()
            seconds["replicate"].append(timed(run_replicate))
            seconds["replicate_again"].append(timed(run_replicate))
            copies_removed()
            seconds["one_stream"].append(timed(run_stream))
        copies_removed()
    finally:
        ranks.close()
        shutil.rmtree(workdir, ignore_errors=True)

    median = {name: statistics.median(values) for name, values in seconds.items()}
    figures = {
        "files": args.files,
        "payload_bytes": payload,
        "runs": args.runs,
        "seconds": seconds,
        "median_seconds": median,
        "seconds_per_file_over_one_stream": (median["replicate"] - median["one_stream"]) / args.files,
        "ratios": {"replicate_over_one_stream": median["replicate"] / median["one_stream"]},
        "machine": {"cores": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
    }
    previous = json.loads(args.output.read_text()) if args.output.exists() else {}
    previous[args.label] = figures
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
    print(f"{args.files} files, {payload / MIB:.0f} MiB, {args.runs} runs, medians ({args.label})")
    for name, value in median.items():
        print(f"{name:<18}{value:>8.2f} s")
    print(f"per-file cost beyond one stream: {figures['seconds_per_file_over_one_stream']:.3f} s; "
          f"replicate / one stream {figures['ratios']['replicate_over_one_stream']:.2f}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
