"""Benchmark: `sparkflake launch-rank --dry-run` of a full launch against the same checks
as a shell script, in one run.

Ours: parse runtime.env, resolve, identity, image check in podman (ID and labels), the
checkpoint checks (identity files incl. a 1 GB draft weights file), cache root and port
checks, the report — one CLI process per run, Python start-up included. "Warm" means the
verified-hash cache under the rank's cache root already holds the files' stat keys (the
operator's second launch); "cold" is `--rehash` (every file hashed again).

Peer: a shell script doing the checks a hand-written launcher does: `podman image
inspect` for the ID and labels, `stat` for sizes and `sha256sum` of every identity file,
compared with the pinned values. Its files come from the page cache like ours.

    .venv/bin/python bench/bench_launch.py            # 1 GB draft weights
    .venv/bin/python bench/bench_launch.py --small    # 64 MiB

Needs podman and runc (private vfs store under /tmp). Results: bench/results/launch.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "launch.json"
SPARKFLAKE = [sys.executable, "-m", "sparkflake.cli"]
ECHO_C = '#include <stdio.h>\nint main(int c, char **v) { for (int i = 0; i < c; i++) puts(v[i]); return 0; }\n'


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    completed = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if completed.returncode not in (0,):
        raise SystemExit(f"{' '.join(map(str, argv[:6]))} failed ({completed.returncode}): {completed.stderr[-2000:]}")
    return completed


def write_random(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as handle:
        left = size
        counter = 0
        while left > 0:
            chunk = hashlib.sha256(counter.to_bytes(8, "big")).digest() + block
            handle.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
            counter += 1


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def setup(work: Path, draft_bytes: int) -> dict:
    target, draft = work / "target", work / "draft"
    target.mkdir(parents=True)
    draft.mkdir()
    for name, size in (("config.json", 4096), ("tokenizer.json", 9_000_000), ("tokenizer_config.json", 8192),
                       ("model.safetensors.index.json", 200_000)):
        write_random(target / name, size)
    (draft / "config.json").write_text('{"architectures": ["DFlashDraftModel"]}\n')
    write_random(draft / "model.safetensors", draft_bytes)
    rows = {
        kind: [{"path": p.name, "sha256": sha256(p), "size": p.stat().st_size} for p in sorted(d.iterdir())]
        for kind, d in (("target", target), ("draft", draft))
    }
    # the image: a static binary built by our OCI engine, loaded into a private podman store
    tree = work / "tree"
    tree.mkdir()
    (work / "echo.c").write_text(ECHO_C)
    run(["gcc", "-static", "-O2", "-o", str(tree / "entrypoint"), str(work / "echo.c")])
    import tomllib

    labels = tomllib.loads((REPO / "profiles" / "glm53-dflash7" / "profile.toml").read_text())["labels"]
    spec = {"platform": "linux/amd64", "compression": "gzip", "repository": "localhost/bench-launch",
            "tag": "latest", "layers": [{"tree": "tree"}],
            "config": {"Entrypoint": ["/entrypoint"], "Labels": labels}}
    (work / "spec.json").write_text(json.dumps(spec))
    run([*SPARKFLAKE, "image", "build", str(work / "spec.json"), "-o", str(work / "out")])
    runroot = Path(tempfile.mkdtemp(prefix="bl-run-", dir="/tmp"))
    podman_args = ["--root", str(work / "podman"), "--runroot", str(runroot), "--storage-driver", "vfs",
                   "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--runtime", "runc"]
    run(["podman", *podman_args, "load", "-q", "-i", str(work / "out" / "oci")])  # podman loads the layout
    image_id = json.loads((work / "out" / "digests.json").read_text())["config"]
    # a profile whose contract pins these files, written by the profile model's serializer
    import dataclasses

    from sparkflake.lock.profile_locks import load_profile
    from sparkflake.profile.model import CheckpointFile
    from sparkflake.profile.profile_file import dump_profile

    profile = load_profile(REPO / "profiles" / "glm53-dflash7" / "profile.toml", check_locks=False)
    checkpoints = {
        role: dataclasses.replace(profile.checkpoints[role], files=tuple(CheckpointFile(**r) for r in rows[role]))
        for role in ("target", "draft")
    }
    profile_dir = work / "profiles" / "glm53-dflash7"
    profile_dir.mkdir(parents=True)
    (profile_dir / "profile.toml").write_text(dump_profile(dataclasses.replace(profile, checkpoints=checkpoints)))
    env_file = work / "runtime.env"
    env_file.write_text(
        "NODE_ADDRESS=127.0.0.1\nMASTER_ADDRESS=127.0.0.1\n"
        f"TARGET_MODEL_PATH={target}\nDRAFT_MODEL_PATH={draft}\nCACHE_ROOT={work / 'cache'}\n"
        "GPU_DEVICES=none\nAPI_PORT=18400\nMASTER_PORT=18401\n"
    )
    (work / "cache").mkdir()
    # the peer: the same checks as a hand-written launch script would do them
    checks = [(f'test "$(podman {" ".join(podman_args)} image inspect --format "{{{{.Id}}}}" {image_id})" = '
              f'"{image_id.removeprefix("sha256:")}" || {{ echo "image ID mismatch"; exit 1; }}')]
    for key, value in labels.items():
        checks.append(f'test "$(podman {" ".join(podman_args)} image inspect --format '
                      f"'{{{{index .Labels \"{key}\"}}}}' {image_id})\" = '{value}' || {{ echo label; exit 1; }}")
    for kind, directory in (("target", target), ("draft", draft)):
        for row in rows[kind]:
            path = directory / row["path"]
            checks.append(f'test "$(stat -c %s {path})" = {row["size"]} || {{ echo size {path}; exit 1; }}')
            checks.append(f'echo "{row["sha256"]}  {path}" | sha256sum --check --quiet || exit 1')
    (work / "checks.sh").write_text("#!/bin/bash\nset -eu\n" + "\n".join(checks) + "\n")
    return {"env_file": env_file, "profile": profile_dir / "profile.toml", "image_id": image_id,
            "podman_args": podman_args, "runroot": runroot}


def time_one(argv, env=None) -> float:
    start = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {completed.stdout[-1500:]} {completed.stderr[-1500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="64 MiB draft weights instead of 1 GB")
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    draft_bytes = (64 << 20) if options.small else 1_000_000_000
    work = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    try:
        world = setup(work, draft_bytes)
        env = dict(os.environ, SPARKFLAKE_PODMAN_ARGS=" ".join(world["podman_args"]))
        # sparkflake-launch-rank: the launch-rank command alone (what every rank runs)
        ours = [sys.executable, "-m", "sparkflake.cli.launch", "0", str(world["env_file"]), "--profile", str(world["profile"]),
                "--engine", "podman", "--image", world["image_id"], "--dry-run", "--json"]
        peer = ["bash", str(work / "checks.sh")]
        time_one(ours, env)  # fills the verified-hash cache and the page cache
        time_one(peer)
        dispatcher = [*SPARKFLAKE, "launch-rank", *ours[3:]]
        samples = {"ours_warm": [], "ours_cold": [], "peer_sha256sum": [], "ours_warm_via_sparkflake_cli": []}
        for _ in range(options.runs):  # interleaved, so load drifts hit every column alike
            samples["ours_warm"].append(time_one(ours, env))
            samples["ours_warm_via_sparkflake_cli"].append(time_one(dispatcher, env))
            samples["ours_cold"].append(time_one([*ours, "--rehash"], env))
            samples["peer_sha256sum"].append(time_one(peer))
        medians = {key: statistics.median(values) for key, values in samples.items()}
        result = {
            "draft_weights_bytes": draft_bytes,
            "runs": options.runs,
            "median_seconds": medians,
            "samples_seconds": samples,
            "ratio_warm_vs_peer": medians["ours_warm"] / medians["peer_sha256sum"],
            "ratio_cold_vs_peer": medians["ours_cold"] / medians["peer_sha256sum"],
            "goal_warm_under_1s": medians["ours_warm"] < 1.0,
            "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        }
        name = RESULTS if not options.small else RESULTS.with_name("launch-small.json")
        name.parent.mkdir(parents=True, exist_ok=True)
        name.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"{'what':34} {'median s':>9}")
        print(f"{'ours --dry-run, warm hash cache':34} {medians['ours_warm']:9.3f}")
        print(f"{'ours --dry-run --rehash (cold)':34} {medians['ours_cold']:9.3f}")
        print(f"{'same, warm, via `sparkflake` CLI':34} {medians['ours_warm_via_sparkflake_cli']:9.3f}")
        print(f"{'shell script (sha256sum)':34} {medians['peer_sha256sum']:9.3f}")
        print(f"ratio warm/peer {result['ratio_warm_vs_peer']:.3f}, cold/peer {result['ratio_cold_vs_peer']:.3f};"
              f" warm under 1 s: {result['goal_warm_under_1s']}  -> {name}")
        return 0
    finally:
        podman = ["podman", *world["podman_args"]] if "world" in locals() else None
        if podman:
            subprocess.run([*podman, "system", "reset", "--force"], capture_output=True, check=False)
            shutil.rmtree(world["runroot"], ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
