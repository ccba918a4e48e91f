"""Benchmark of the OCI image engine, ours vs the peer tools in the same run.

1. One layer from a tree of >= 1 GB (>= 10,000 files, a few files of >= 100 MB):
   - gzip: ours vs `tar --sort=name --mtime=@1 --owner=0 --group=0 --numeric-owner -c |
     tee >(sha256sum) | gzip -n -6 | sha256sum` (goal <= 1.0x);
   - zstd: ours vs the same pipeline with `zstd -3 -T0` (goal <= 1.1x);
   The pipelines are built from argv lists (tee writes the second copy to a pipe
   inherited by the first sha256sum), no shell.
2. Tree -> gzip OCI layout (ours) vs `skopeo copy --dest-compress oci:A oci:B` compressing
   the same image's uncompressed layout (goal <= 0.8x).
3. Rebuild after changing one file in one of five layers vs the full build, both with the
   CLI (`sparkflake image build`, all outputs) (goal <= 20%).
4. Peak RSS of our runs (goal <= 200 MB).

Every "ours" run is a fresh subprocess (peak RSS from wait4). Runs are interleaved;
medians and ratios are printed and written to bench/results/oci.json.

    .venv/bin/python bench/bench_oci.py          # >= 1 GB tree
    .venv/bin/python bench/bench_oci.py --small  # ~120 MB, quick
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "oci.json"
SOURCE_DIRS = ("/usr/lib", "/usr/share", "/usr/bin")

_OURS_LAYER = """
import json, sys
from sparkflake.oci import BlobStore, Compression, LayerInput, LayerOptions, TreeSource, build_layer
tree, store, algorithm = sys.argv[1:4]
layer = build_layer(LayerInput(sources=(TreeSource(tree),)), LayerOptions(Compression(algorithm)),
                    BlobStore(store), None)
print(json.dumps({"digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size}))
"""

_DESCRIBE_GZIP = """
import sys
from sparkflake.oci import Compression
print(Compression("gzip", int(sys.argv[1]) if len(sys.argv) > 1 else None).description)
"""

_OURS_LAYOUT = """
import sys
from sparkflake.oci import (BlobStore, Compression, ImageSpec, LayerInput, LayerSpec,
    TreeSource, build_image, write_oci_layout)
tree, store, out, algorithm = sys.argv[1:5]
level = int(sys.argv[5]) if len(sys.argv) > 5 else None
spec = ImageSpec(layers=(LayerSpec(LayerInput(sources=(TreeSource(tree),)), "tree"),),
                 compression=Compression(algorithm, level))
write_oci_layout(build_image(spec, BlobStore(store)), out)
"""


def make_tree(
    root: Path, total_bytes: int, min_files: int, big_files: int, big_size: int
) -> None:
    """Real files from /usr (sorted, so the same machine gives the same tree), spread over
    five parts, plus ``big_files`` files of ``big_size`` made by concatenating /usr files."""
    if (root / ".complete").exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    candidates: list[Path] = []
    for top in SOURCE_DIRS:
        for directory, _dirs, names in os.walk(top):
            for name in sorted(names):
                path = Path(directory) / name
                if (
                    path.is_file()
                    and not path.is_symlink()
                    and 0 < path.stat().st_size < 8 << 20
                ):
                    candidates.append(path)
    candidates.sort()
    small_budget = total_bytes - big_files * big_size
    written = 0
    count = 0
    position = 0
    while (written < small_budget or count < min_files) and candidates:
        source = candidates[position % len(candidates)]
        position += 1
        try:
            content = source.read_bytes()
        except OSError:
            continue
        target = root / f"part{count % 5}" / f"d{count % 97}" / f"{count}-{source.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        if os.access(source, os.X_OK):
            target.chmod(0o755)
        written += len(content)
        count += 1
    big_sources = sorted(candidates, key=lambda p: -p.stat().st_size)[:200]
    for index in range(big_files):
        target = root / f"part{index % 5}" / "big" / f"model-{index}.bin"
        target.parent.mkdir(parents=True, exist_ok=True)
        filled = 0
        with open(target, "wb") as handle:
            cursor = index * 37
            while filled < big_size:
                content = big_sources[cursor % len(big_sources)].read_bytes()[
                    : big_size - filled
                ]
                handle.write(content)
                filled += len(content)
                cursor += 1
    (root / ".complete").write_text(f"{count} small files, {big_files} big files\n")


def tree_stats(root: Path) -> dict[str, int]:
    files = 0
    size = 0
    big = 0
    for directory, _dirs, names in os.walk(root):
        for name in names:
            if name == ".complete":
                continue
            st = os.lstat(os.path.join(directory, name))
            files += 1
            size += st.st_size
            big += st.st_size >= 100 << 20
    return {"files": files, "bytes": size, "files_of_100MB_or_more": big}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_child(argv: list[str], **kwargs) -> tuple[float, int, str, float]:
    """Wall seconds, peak RSS in bytes, stdout, CPU seconds of one child process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, **kwargs)
    stdout = process.stdout.read() if process.stdout else b""
    _pid, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {process.returncode}")
    return (
        elapsed,
        usage.ru_maxrss * 1024,
        stdout.decode(),
        usage.ru_utime + usage.ru_stime,
    )


def reference_pipeline(tree: Path, compressor: list[str]) -> tuple[float, str, str]:
    """tar ... | tee >(sha256sum) | COMPRESSOR | sha256sum, wired without a shell."""
    start = time.perf_counter()
    tar = subprocess.Popen(
        [
            "tar",
            "--sort=name",
            "--mtime=@1",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
            str(tree),
            "-c",
            ".",
        ],
        stdout=subprocess.PIPE,
    )
    read_end, write_end = os.pipe()
    diff_sum = subprocess.Popen(["sha256sum"], stdin=read_end, stdout=subprocess.PIPE)
    os.close(read_end)
    tee = subprocess.Popen(
        ["tee", f"/dev/fd/{write_end}"],
        stdin=tar.stdout,
        stdout=subprocess.PIPE,
        pass_fds=[write_end],
    )
    os.close(write_end)
    tar.stdout.close()
    compress = subprocess.Popen(compressor, stdin=tee.stdout, stdout=subprocess.PIPE)
    tee.stdout.close()
    blob_sum = subprocess.Popen(
        ["sha256sum"], stdin=compress.stdout, stdout=subprocess.PIPE
    )
    compress.stdout.close()
    blob_digest = blob_sum.communicate()[0].split()[0].decode()
    diff_digest = diff_sum.communicate()[0].split()[0].decode()
    for process in (tar, tee, compress):
        process.wait()
    return time.perf_counter() - start, diff_digest, blob_digest


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="~120 MB tree, quick run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default="/tmp/sparkflake-bench-oci")
    parser.add_argument(
        "--gzip-level",
        type=int,
        default=None,
        help="our gzip level in the skopeo comparison (default: the engine's default)",
    )
    parser.add_argument(
        "--parts",
        default="layer,skopeo,rebuild",
        help="comma-separated subset of layer,skopeo,rebuild (results merge into the JSON)",
    )
    parser.add_argument(
        "--source",
        default=str(REPO / "python" / "src"),
        help="the sparkflake source to measure (a snapshot keeps a long run consistent)",
    )
    args = parser.parse_args()
    work = Path(args.work)
    if args.small:
        tree = work / "tree-small"
        make_tree(tree, 120 << 20, 2000, 2, 25 << 20)
    else:
        tree = work / "tree"
        make_tree(tree, 1200 << 20, 12000, 3, 120 << 20)
    stats = tree_stats(tree)
    env = {**os.environ, "PYTHONPATH": args.source}
    python = sys.executable
    results: dict[str, object] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": os.getloadavg(),
        },
        "tree": stats,
        "runs": args.runs,
    }
    print(f"tree: {stats}")
    peak_rss: list[int] = []

    parts = set(args.parts.split(","))
    # 1. one layer, gzip and zstd
    for algorithm, compressor in (
        ()
        if "layer" not in parts
        else (
            ("gzip", ["gzip", "-n", "-6"]),
            ("zstd", ["zstd", "-3", "-T0", "-q", "-c"]),
        )
    ):
        ours_times, ref_times, ours_cpu, ref_cpu = [], [], [], []
        ours_size = ref_size = 0
        for _ in range(args.runs):
            store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
            seconds, rss, out, cpu = timed_child(
                [python, "-c", _OURS_LAYER, str(tree), str(store), algorithm], env=env
            )
            ours_size = json.loads(out)["size"]
            shutil.rmtree(store)
            ours_times.append(seconds)
            ours_cpu.append(cpu)
            peak_rss.append(rss)
            before = children_cpu()
            seconds, _diff, _blob = reference_pipeline(tree, compressor)
            ref_cpu.append(children_cpu() - before)
            ref_times.append(seconds)
        ref_size = _reference_size(tree, compressor)
        row = {
            "ours_s": median(ours_times),
            "reference_s": median(ref_times),
            "ratio": median(ours_times) / median(ref_times),
            "ours_runs": ours_times,
            "reference_runs": ref_times,
            "ours_cpu_s": median(ours_cpu),
            "reference_cpu_s": median(ref_cpu),
            "cpu_ratio": median(ours_cpu) / median(ref_cpu),
            "ours_blob_bytes": ours_size,
            "reference_blob_bytes": ref_size,
        }
        results[f"layer_{algorithm}"] = row
        print(
            f"layer {algorithm}: ours {row['ours_s']:.2f}s  pipeline {row['reference_s']:.2f}s  "
            f"ratio {row['ratio']:.2f}  CPU {row['ours_cpu_s']:.1f}s vs "
            f"{row['reference_cpu_s']:.1f}s  sizes {ours_size} vs {ref_size}"
        )

    # 2. tree -> gzip layout (ours) vs skopeo compressing the uncompressed layout
    if "skopeo" in parts:
        compare_with_skopeo(args, work, tree, python, env, results, peak_rss)
    if "rebuild" in parts:
        measure_rebuild(args, work, tree, python, env, results, peak_rss)
    results["peak_rss_bytes"] = max(peak_rss)
    results["load_after"] = os.getloadavg()
    print(f"peak RSS of our runs: {max(peak_rss) / (1 << 20):.1f} MiB")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = (
        json.loads(RESULTS.read_text())
        if RESULTS.exists() and parts != {"layer", "skopeo", "rebuild"}
        else {}
    )
    if previous.get("tree") == stats:
        results = {
            **previous,
            **results,
            "peak_rss_bytes": max(previous.get("peak_rss_bytes", 0), max(peak_rss)),
        }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


def compare_with_skopeo(args, work, tree, python, env, results, peak_rss) -> None:
    plain_store = work / f"plain-store-{tree.name}"
    plain_layout = work / f"plain-layout-{tree.name}"
    if not (plain_layout / "index.json").exists():
        subprocess.run(
            [
                python,
                "-c",
                _OURS_LAYOUT,
                str(tree),
                str(plain_store),
                str(plain_layout),
                "none",
            ],
            env=env,
            check=True,
        )
    ours_times, skopeo_times, ours_cpu, skopeo_cpu = [], [], [], []
    for _ in range(args.runs):
        store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
        out = work / "ours-layout"
        seconds, rss, _, cpu = timed_child(
            [
                python,
                "-c",
                _OURS_LAYOUT,
                str(tree),
                str(store),
                str(out),
                "gzip",
                *([] if args.gzip_level is None else [str(args.gzip_level)]),
            ],
            env=env,
        )
        ours_times.append(seconds)
        ours_cpu.append(cpu)
        peak_rss.append(rss)
        ours_bytes = _largest_blob(out)
        shutil.rmtree(store)
        shutil.rmtree(out)
        target = work / "skopeo-layout"
        shutil.rmtree(target, ignore_errors=True)
        start = time.perf_counter()
        before = children_cpu()
        subprocess.run(
            [
                "skopeo",
                "copy",
                "-q",
                "--dest-compress",
                "--dest-compress-format",
                "gzip",
                f"oci:{plain_layout}:latest",
                f"oci:{target}:latest",
            ],
            check=True,
        )
        skopeo_times.append(time.perf_counter() - start)
        skopeo_cpu.append(children_cpu() - before)
        skopeo_bytes = _largest_blob(target)
        shutil.rmtree(target)
    row = {
        "ours_s": median(ours_times),
        "skopeo_s": median(skopeo_times),
        "ratio": median(ours_times) / median(skopeo_times),
        "ours_runs": ours_times,
        "skopeo_runs": skopeo_times,
        "ours_cpu_s": median(ours_cpu),
        "skopeo_cpu_s": median(skopeo_cpu),
        "cpu_ratio": median(ours_cpu) / median(skopeo_cpu),
        "ours_layer_blob_bytes": ours_bytes,
        "skopeo_layer_blob_bytes": skopeo_bytes,
    }
    row["ours_gzip_level"] = args.gzip_level  # None: the engine's default
    row["ours_gzip"] = subprocess.run(
        [
            python,
            "-c",
            _DESCRIBE_GZIP,
            *([] if args.gzip_level is None else [str(args.gzip_level)]),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    suffix = "" if args.gzip_level is None else f"_level{args.gzip_level}"
    results[f"layout_vs_skopeo_copy{suffix}"] = row
    print(
        f"tree->gzip layout: ours {row['ours_s']:.2f}s  skopeo copy {row['skopeo_s']:.2f}s  "
        f"ratio {row['ratio']:.2f}  CPU {row['ours_cpu_s']:.1f}s vs {row['skopeo_cpu_s']:.1f}s  "
        f"layer blob {ours_bytes:,} vs {skopeo_bytes:,} bytes"
    )


def _largest_blob(layout: Path) -> int:
    """Size of the layer blob of a one-layer layout (its largest blob)."""
    return max(path.stat().st_size for path in (layout / "blobs" / "sha256").iterdir())


def measure_rebuild(args, work, tree, python, env, results, peak_rss) -> None:
    # 3. rebuild after one changed file in one of five layers (CLI, all outputs)
    spec = work / "five-layers.json"
    spec.write_text(
        json.dumps(
            {
                "compression": "gzip",
                "layers": [
                    {"tree": str(tree / f"part{i}"), "target": f"/part{i}"}
                    for i in range(5)
                ],
                "config": {"Entrypoint": ["/bin/sh"]},
            }
        )
    )
    victim_dir = tree / "part3" / "d3"
    victim = min(victim_dir.iterdir())
    original = victim.read_bytes()
    full_times, rebuild_times = [], []
    try:
        for run in range(args.runs):
            cache = work / "cli-cache"
            shutil.rmtree(cache, ignore_errors=True)
            cli = [
                python,
                "-m",
                "sparkflake.cli",
                "image",
                "build",
                str(spec),
                "-o",
                str(work / "cli-out"),
                "--cache",
                str(cache),
            ]
            seconds, rss, _, _cpu = timed_child(cli, env=env)
            full_times.append(seconds)
            peak_rss.append(rss)
            victim.write_bytes(original + f"changed {run}\n".encode())
            seconds, rss, _, _cpu = timed_child(cli, env=env)
            rebuild_times.append(seconds)
            peak_rss.append(rss)
            victim.write_bytes(original)
    finally:
        victim.write_bytes(original)
    part_sizes = [tree_stats(tree / f"part{i}")["bytes"] for i in range(5)]
    row = {
        "full_s": median(full_times),
        "rebuild_s": median(rebuild_times),
        "ratio": median(rebuild_times) / median(full_times),
        "full_runs": full_times,
        "rebuild_runs": rebuild_times,
        "layer_tree_bytes": part_sizes,
        "changed_layer": 3,
    }
    results["rebuild_one_of_five"] = row
    print(
        f"rebuild one of five layers: full {row['full_s']:.2f}s  rebuild {row['rebuild_s']:.2f}s  "
        f"ratio {row['ratio']:.2f}"
    )


def _reference_size(tree: Path, compressor: list[str]) -> int:
    tar = subprocess.Popen(
        [
            "tar",
            "--sort=name",
            "--mtime=@1",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
            str(tree),
            "-c",
            ".",
        ],
        stdout=subprocess.PIPE,
    )
    compress = subprocess.Popen(compressor, stdin=tar.stdout, stdout=subprocess.PIPE)
    tar.stdout.close()
    size = 0
    while chunk := compress.stdout.read(1 << 20):
        size += len(chunk)
    compress.wait()
    tar.wait()
    return size


if __name__ == "__main__":
    sys.exit(main())
