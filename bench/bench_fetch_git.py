"""Git input fetch: `sparkflake.fetch.git.fetch_git` (fetch by commit, commit bytes and tree
checked, files written from objects, tree id recomputed, admitted to the cache) against
git itself doing the fetch a builder would do without the checks (`git init`, `git fetch
--depth 1 URL REV`, `git checkout`), in the same run, alternating, over git daemon on
127.0.0.1.

The repository is the vLLM 0.33.0 sdist's tree (3,649 files under vllm/ plus the rest,
~45 MB) committed here: the size of the vLLM fork's Python a real exact build fetches.
Needs the sdist in the cache (`sparkflake fetch glm53-dflash7 --kind sdist`). Prints a
table, writes bench/results/fetch-git.json.

    .venv/bin/python bench/bench_fetch_git.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "src"))
sys.path.insert(0, str(REPO / "python" / "tests"))

from fixtures.git import GIT_ENV, git, git_daemon
from sparkflake.core.blob_cache import default_cache_root
from sparkflake.fetch.git import GitCache, fetch_git
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.pins import GitPin


def make_repository(root: Path) -> tuple[Path, str, str]:
    sdist = load_lock(REPO / "profiles" / "glm53.lock").by_name("vllm-sdist")
    blob = default_cache_root() / "blobs" / "sha256" / sdist.sha256  # type: ignore[union-attr]
    if not blob.is_file():
        raise SystemExit(f"{blob}: not in the cache; run `sparkflake fetch glm53-dflash7 --kind sdist`")
    work = root / "work"
    work.mkdir(parents=True)
    subprocess.run(["tar", "--no-same-owner", "-xzf", str(blob), "-C", str(work)], check=True)
    (top,) = work.iterdir()
    git("init", "-q", "-b", "main", str(top))
    git("add", "-A", cwd=top)
    git("commit", "-q", "-m", "vllm 0.33.0 sdist", cwd=top)
    served = root / "served" / "vllm.git"
    git("clone", "-q", "--bare", str(top), str(served))
    return served, git("rev-parse", "HEAD", cwd=top), git("rev-parse", "HEAD^{tree}", cwd=top)


def run_ours(url: str, rev: str, tree: str) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-git-ours-") as scratch:
        started = time.perf_counter()
        fetch_git(GitPin(name="vllm", urls=(url,), rev=rev, tree=tree), GitCache(scratch))
        return time.perf_counter() - started


def run_git(url: str, rev: str) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-git-peer-") as scratch:
        started = time.perf_counter()
        subprocess.run(["git", "init", "-q", scratch], check=True, env=GIT_ENV)
        subprocess.run(["git", "-C", scratch, "fetch", "-q", "--depth", "1", url, rev], check=True, env=GIT_ENV)
        subprocess.run(["git", "-C", scratch, "checkout", "-q", rev], check=True, env=GIT_ENV)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-git-") as scratch:
        served, rev, tree = make_repository(Path(scratch))
        files = len(git("--git-dir", str(served), "ls-tree", "-r", "--name-only", rev).splitlines())
        ours: list[float] = []
        peer: list[float] = []
        with git_daemon(served.parent) as base:
            url = f"{base}/vllm.git"
            for _ in range(args.runs):
                peer.append(run_git(url, rev))
                ours.append(run_ours(url, rev, tree))
    result = {
        "benchmark": "fetch-git",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        "repository": f"vLLM 0.33.0 sdist tree, {files} files, over git daemon on 127.0.0.1",
        "runs": args.runs,
        "sparkflake_seconds": [round(x, 3) for x in ours],
        "git_seconds": [round(x, 3) for x in peer],
        "sparkflake_median": round(statistics.median(ours), 3),
        "git_median": round(statistics.median(peer), 3),
        "ratio": round(statistics.median(ours) / statistics.median(peer), 2),
    }
    print(f"{'':28}{'median s':>10}")
    print(f"{'sparkflake fetch_git':28}{result['sparkflake_median']:>10}")
    print(f"{'git fetch --depth 1 + checkout':28}{result['git_median']:>10}")
    print(f"ratio (sparkflake / git): {result['ratio']}")
    out = REPO / "bench" / "results" / "fetch-git.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
