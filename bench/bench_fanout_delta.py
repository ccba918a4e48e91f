"""Delta distribution: a full fan-out + import of a >= 1 GB five-layer image vs the fan-out +
import of a rebuild that changed one layer, on four ranks, at the same shaped link rate.

Four network namespaces chained by veth pairs (python/tests/netns_ranks.py), one sshd each,
links shaped with tc tbf (default 400mbit: on this machine's two cores the link, not the
CPU, is then the bottleneck, as on the real fabric). The image is built by our own OCI
engine from random (incompressible) layer trees written in 8 MiB chunks: four large layers
(OS base, Python environment, libraries, kernels) and a small top layer (the source overlay a
patch changes); the rebuild changes only the top layer. Every rank imports into podman's
containers-storage (overlay driver: the driver of a real host; vfs would copy every lower
layer's tree into each new layer). Measured, several runs each, medians:

- full (blob route): empty image stores and engines; ``sparkflake fanout OUT --import podman``;
- delta (blob route): right after the full install, the rebuilt image, same command;
- full (archive route): the checksum-bound docker-archive of the first image, ``podman load``
  on every rank (today's route).

Ratios: delta / full (blob route; goal <= 0.05) and delta / full (archive route).
Writes bench/results/fanout-delta.json.
Usage: nice -n 10 .venv/bin/python bench/bench_fanout_delta.py [--scale 1.0] [--runs 3] [--rate 400mbit]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))

from fixtures.netns_ranks import NetnsRanks
from sparkflake.core.digest import sha256_file
from sparkflake.distribute.blobs import LayoutFanoutRequest, layout_fanout
from sparkflake.distribute.fanout import FanoutRequest, fanout
from sparkflake.distribute.site import Site
from sparkflake.distribute.verified_prefixes import VERIFIED_PREFIXES_NAME

MIB = 1 << 20
# layer payloads in MiB, bottom to top; the top one is what the rebuild changes
LAYERS_MIB = (384, 320, 192, 128, 4)
CHUNK = 8 * MIB


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as sink:
        remaining = size
        while remaining:
            count = min(CHUNK, remaining)
            sink.write(os.urandom(count))
            remaining -= count


def build(workdir: Path, name: str, trees: list[str]) -> dict:
    spec = workdir / f"{name}.json"
    spec.write_text(json.dumps({
        "platform": "linux/arm64", "compression": "none", "repository": "localhost/sfk-delta", "tag": name,
        "layers": [{"tree": tree} for tree in trees], "config": {"Entrypoint": ["/opt/top/payload.bin"]},
    }))
    out = workdir / f"{name}-out"
    env = dict(os.environ, XDG_CACHE_HOME=str(workdir / "cache"))  # never the shared cache
    subprocess.run([sys.executable, "-m", "sparkflake.cli", "image", "build", str(spec), "-o", str(out),
                    "--cache", str(workdir / "cache" / "oci")], check=True, env=env, stdout=subprocess.DEVNULL)
    digests = json.loads((out / "digests.json").read_text())
    digests["out"] = str(out)
    return digests


def overlay_site(ranks: NetnsRanks) -> Site:
    site = ranks.site()
    changed = []
    for rank in site.ranks:
        args = list(rank.engine_args)
        args[args.index("--storage-driver") + 1] = "overlay"
        changed.append(dataclasses.replace(rank, engine_args=tuple(args)))
    return dataclasses.replace(site, ranks=tuple(changed))


def clear(ranks: NetnsRanks, site: Site) -> None:
    """Every rank back to nothing: image stores, archive copies, podman stores, the runs of
    layers each rank has checked (a full install checks every layer entry again), all of
    them made by this bench in its scratch directory."""
    for index, rank in enumerate(site.ranks):
        root = rank.engine_args[rank.engine_args.index("--root") + 1]
        subprocess.run(["ip", "netns", "exec", ranks.namespace(index), "podman", *rank.engine_args,
                        "system", "reset", "--force"], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ranks.data_dir(index) / VERIFIED_PREFIXES_NAME, ignore_errors=True)
        if index:
            shutil.rmtree(ranks.data_dir(index) / "image-store", ignore_errors=True)
            for leftover in ranks.data_dir(index).glob("*docker-archive.tar*"):
                leftover.unlink()


def timed(action) -> tuple[float, dict]:
    began = time.perf_counter()
    report = action()
    seconds = time.perf_counter() - began
    assert report["complete"], json.dumps(report, indent=1)
    return seconds, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the layer sizes (0.05 for a quick look)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", default="400mbit", help="tc tbf rate of every link")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "fanout-delta.json")
    args = parser.parse_args()
    sizes = [max(1, int(mib * args.scale * MIB)) for mib in LAYERS_MIB]

    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="sfk-bench-delta-"))
    ranks = NetnsRanks(workdir / "ranks")
    ranks.start()
    seconds: dict[str, list[float]] = {"full_blobs": [], "delta_blobs": [], "full_archive": []}
    reports: dict[str, dict] = {}
    try:
        trees = []
        for position, size in enumerate(sizes[:-1]):
            write_random(workdir / f"layer{position}" / "opt" / f"layer{position}" / "payload.bin", size)
            trees.append(f"layer{position}")
        write_random(workdir / "top-a" / "opt" / "top" / "payload.bin", sizes[-1])
        write_random(workdir / "top-b" / "opt" / "top" / "payload.bin", sizes[-1])
        began = time.perf_counter()
        first = build(workdir, "first", [*trees, "top-a"])
        build_seconds = time.perf_counter() - began
        began = time.perf_counter()
        second = build(workdir, "second", [*trees, "top-b"])
        rebuild_seconds = time.perf_counter() - began
        shutil.rmtree(workdir / "cache", ignore_errors=True)  # the outputs hold every blob now
        for unused in ("oci-archive.tar", "docker-archive.tar"):  # the rebuild travels as a layout only
            (Path(second["out"]) / unused).unlink()
        for tree in [*trees, "top-a", "top-b"]:
            shutil.rmtree(workdir / tree)
        image_bytes = sum(layer["size"] for layer in first["layers"])
        archive = Path(first["out"]) / "docker-archive.tar"
        archive_sha = sha256_file(archive)

        site = overlay_site(ranks)
        ranks.shape(args.rate)

        def blobs(image: dict):
            return lambda: layout_fanout(site, LayoutFanoutRequest(
                layout=image["out"], image_id=image["image_id"], engine="podman", tag="localhost/sfk-delta:serving"))

        def archive_route():
            return fanout(site, FanoutRequest(archive=str(archive), sha256=archive_sha, image_id=first["image_id"],
                                              engine="podman", tag="localhost/sfk-delta:serving"))

        for _ in range(args.runs):
            clear(ranks, site)
            spent, reports["full_blobs"] = timed(blobs(first))
            seconds["full_blobs"].append(spent)
            spent, reports["delta_blobs"] = timed(blobs(second))
            seconds["delta_blobs"].append(spent)
            clear(ranks, site)
            spent, reports["full_archive"] = timed(archive_route)
            seconds["full_archive"].append(spent)
        clear(ranks, site)
    finally:
        ranks.shape(None)
        ranks.close()
        shutil.rmtree(workdir, ignore_errors=True)

    median = {name: statistics.median(values) for name, values in seconds.items()}
    delta_ranks = reports["delta_blobs"]["ranks"]
    result = {
        "machine": {"cores": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
        "link_rate": args.rate,
        "engine": "podman containers-storage, overlay driver",
        "image": {"layers": len(sizes), "layer_bytes": [layer["size"] for layer in first["layers"]],
                  "image_bytes": image_bytes, "changed_layer_bytes": second["layers"][-1]["size"],
                  "build_seconds": build_seconds, "rebuild_seconds": rebuild_seconds},
        "runs": args.runs,
        "seconds": seconds,
        "median_seconds": median,
        "ratios": {
            "delta_over_full_blobs": median["delta_blobs"] / median["full_blobs"],
            "delta_over_full_archive": median["delta_blobs"] / median["full_archive"],
        },
        "goal": {"delta_over_full_at_most": 0.05},
        "last_delta_evidence": [
            {key: record.get(key) for key in ("rank", "blobs_sent", "blobs_reused", "bytes_received", "seconds",
                                              "settle_seconds", "image_id", "layers_reused_by_engine",
                                              "layers_checked", "source_entry_check")}
            for record in delta_ranks
        ],
        "last_full_checks": [
            {key: record.get(key) for key in ("rank", "seconds", "settle_seconds", "layers_checked",
                                              "source_entry_check")}
            for record in reports["full_blobs"]["ranks"]
        ],
        "last_full_bytes_received": [record.get("bytes_received") for record in reports["full_blobs"]["ranks"]],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")

    print(f"image {image_bytes / MIB:.0f} MiB in {len(sizes)} layers, top layer {sizes[-1] / MIB:.1f} MiB changed; "
          f"links {args.rate}; {args.runs} runs, medians; load {load_before[0]:.1f} -> "
          f"{result['machine']['load_after'][0]:.1f} on {os.cpu_count()} cores")
    for name, value in median.items():
        runs = ", ".join(f"{v:.2f}" for v in seconds[name])
        print(f"{name:<14}{value:>8.2f} s   ({runs})")
    for name, ratio in result["ratios"].items():
        print(f"{name:<26}{ratio:>8.3f}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
