"""Benchmark: NAR hash and git tree id of a large tree, ours against Nix and git.

Same run, same warm page cache: `sparkflake hash path` vs `nix hash path`, and
`sparkflake hash path --git` vs `git add -A && git write-tree` in a fresh repository each
run (so git really hashes every blob). Several runs each, interleaved; medians and ratios.

    .venv/bin/python bench/bench_digest.py            # >= 1 GiB, >= 10,000 files
    .venv/bin/python bench/bench_digest.py --small    # quick run

The tree is generated once (random bytes from a fixed seed) under a cache directory in
/tmp and reused. Results go to bench/results/digest.json.
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
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "digest.json"
CACHE = Path(tempfile.gettempdir()) / "sparkflake-bench-digest"
SPARKFLAKE = [sys.executable, "-m", "sparkflake.cli"]
NIX = ["nix", "--extra-experimental-features", "nix-command"]
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@invalid",
}
GIT_SETTINGS = [
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.filemode=true",
    "-c",
    "core.symlinks=true",
]


@dataclass(frozen=True)
class TreeShape:
    small_files: int
    small_max_bytes: int
    large_files: int
    large_bytes: int
    seed: int = 20261130

    @property
    def name(self) -> str:
        return (
            f"tree-{self.small_files}x{self.small_max_bytes}-"
            f"{self.large_files}x{self.large_bytes}-{self.seed}"
        )


FULL = TreeShape(small_files=10_000, small_max_bytes=64 << 10, large_files=7, large_bytes=100 << 20)
SMALL = TreeShape(small_files=1_000, small_max_bytes=64 << 10, large_files=1, large_bytes=20 << 20)


def make_tree(shape: TreeShape) -> Path:
    """Build (or reuse) the tree; a marker beside it says a previous build finished."""
    root = CACHE / shape.name
    marker = CACHE / f"{shape.name}.complete"
    if marker.exists() and root.is_dir():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(shape.seed)
    for index in range(shape.small_files):
        directory = root / f"d{index % 40:02d}" / f"e{index % 7}"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"file-{index:05d}.bin"
        path.write_bytes(rng.randbytes(rng.randrange(shape.small_max_bytes + 1)))
        if index % 11 == 0:
            path.chmod(0o755)
        if index % 97 == 0:
            (directory / f"link-{index:05d}").symlink_to(path.name)
    large_dir = root / "large"
    large_dir.mkdir(parents=True, exist_ok=True)
    block = 8 << 20
    for index in range(shape.large_files):
        with open(large_dir / f"blob-{index}.bin", "wb") as handle:
            remaining = shape.large_bytes
            while remaining:
                count = min(block, remaining)
                handle.write(rng.randbytes(count))
                remaining -= count
    marker.write_text("complete\n")
    return root


def tree_stats(root: Path) -> tuple[int, int]:
    files = 0
    total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            files += 1
            total += os.lstat(path).st_size
    return files, total


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    cpu_s: float  # user + system time of the work: steadier than wall time on a busy host
    printed: str


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_timed(argv: list[str], *, env: dict[str, str] | None = None) -> Measurement:
    cpu_before = _cpu(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    completed = subprocess.run(
        argv, check=True, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    wall = time.perf_counter() - started
    cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu_before
    return Measurement(wall, cpu, completed.stdout.strip())


def git_write_tree(root: Path, object_format: str) -> Measurement:
    """`git init` a fresh repository outside the tree, then `add -A` + `write-tree`; all
    three are timed (the init takes a few milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="bench-git-") as scratch:
        git = ["git", *GIT_SETTINGS, f"--git-dir={scratch}/repo.git", f"--work-tree={root}"]
        env = {**os.environ, **GIT_ENV}
        cpu_before = _cpu(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        init = [*git, "init", "-q", f"--object-format={object_format}"]
        subprocess.run(init, check=True, env=env)
        subprocess.run([*git, "add", "-A"], check=True, env=env)
        tree = subprocess.run(
            [*git, "write-tree"], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()
        wall = time.perf_counter() - started
        cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu_before
        return Measurement(wall, cpu, tree)


def in_process(function, *args) -> Measurement:
    cpu_before = _cpu(resource.RUSAGE_SELF)
    started = time.perf_counter()
    value = function(*args)
    wall = time.perf_counter() - started
    return Measurement(wall, _cpu(resource.RUSAGE_SELF) - cpu_before, str(value))


FAMILIES = (("nar", "nix"), ("git-sha1", "git"), ("git-sha256", "git"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small tree, quick run")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per tool")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    shape = SMALL if args.small else FULL
    runs = args.runs or (3 if args.small else 5)
    output = args.output or (RESULTS.with_name("digest-small.json") if args.small else RESULTS)

    from sparkflake.core.tree_digest import git_tree_id, nar_hash

    print(f"preparing tree {shape.name} under {CACHE} …", flush=True)
    root = make_tree(shape)
    files, total = tree_stats(root)
    load_at_start = os.getloadavg()
    print(
        f"tree: {files} files, {total / 1e9:.3f} GB; {os.cpu_count()} CPUs, "
        f"load average {load_at_start[0]:.2f}",
        flush=True,
    )

    ours_git = [*SPARKFLAKE, "hash", "path", "--git"]
    contenders = {
        "nar/ours-cli": lambda: run_timed([*SPARKFLAKE, "hash", "path", str(root)]),
        "nar/ours-api": lambda: in_process(lambda: nar_hash(root).sri),
        "nar/nix": lambda: run_timed([*NIX, "hash", "path", str(root)]),
        "git-sha1/ours-cli": lambda: run_timed([*ours_git, str(root)]),
        "git-sha1/ours-api": lambda: in_process(git_tree_id, root, "sha1"),
        "git-sha1/git": lambda: git_write_tree(root, "sha1"),
        "git-sha256/ours-cli": lambda: run_timed(
            [*ours_git, "--object-format", "sha256", str(root)]
        ),
        "git-sha256/ours-api": lambda: in_process(git_tree_id, root, "sha256"),
        "git-sha256/git": lambda: git_write_tree(root, "sha256"),
    }
    measured: dict[str, list[Measurement]] = {name: [] for name in contenders}
    # One untimed round warms the page cache; every round checks that all agree.
    for contender in contenders.values():
        contender()
    for run in range(runs):
        for name, contender in contenders.items():
            measured[name].append(contender())
        print(f"run {run + 1}/{runs} done", flush=True)

    agreement = {}
    for family, peer in FAMILIES:
        values = {
            measurement.printed
            for variant in ("ours-cli", "ours-api", peer)
            for measurement in measured[f"{family}/{variant}"]
        }
        agreement[family] = sorted(values)
        if len(values) != 1:
            print(f"MISMATCH in {family}: {sorted(values)}", file=sys.stderr)
            return 1

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(m, field) for m in measured[name])

    rows = []
    for family, peer in FAMILIES:
        for variant in ("ours-cli", "ours-api"):
            ours, theirs = f"{family}/{variant}", f"{family}/{peer}"
            rows.append(
                {
                    "measure": family,
                    "ours": variant,
                    "peer": peer,
                    "ours_wall_s": round(median(ours, "wall_s"), 4),
                    "peer_wall_s": round(median(theirs, "wall_s"), 4),
                    "wall_ratio": round(median(ours, "wall_s") / median(theirs, "wall_s"), 3),
                    "ours_cpu_s": round(median(ours, "cpu_s"), 4),
                    "peer_cpu_s": round(median(theirs, "cpu_s"), 4),
                    "cpu_ratio": round(median(ours, "cpu_s") / median(theirs, "cpu_s"), 3),
                }
            )

    print()
    print(
        f"{'measure':<11} {'ours':<9} {'peer':<4} {'ours s':>8} {'peer s':>8} {'ratio':>6}"
        f" | {'ours cpu':>8} {'peer cpu':>8} {'ratio':>6}"
    )
    for row in rows:
        print(
            f"{row['measure']:<11} {row['ours']:<9} {row['peer']:<4} "
            f"{row['ours_wall_s']:>8.3f} {row['peer_wall_s']:>8.3f} {row['wall_ratio']:>6.3f}"
            f" | {row['ours_cpu_s']:>8.3f} {row['peer_cpu_s']:>8.3f} {row['cpu_ratio']:>6.3f}"
        )
    report = {
        "tree": {"shape": shape.name, "files": files, "bytes": total, "path": str(root)},
        "runs": runs,
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
        "wall_s": {n: [round(m.wall_s, 4) for m in ms] for n, ms in measured.items()},
        "cpu_s": {n: [round(m.cpu_s, 4) for m in ms] for n, ms in measured.items()},
        "rows": rows,
        "agreed_values": agreement,
        "nix_version": subprocess.run(
            ["nix", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "git_version": subprocess.run(
            ["git", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
