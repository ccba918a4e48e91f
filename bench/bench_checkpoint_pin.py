"""Benchmark of pinning a checkpoint and of checking it at launch, ours vs the peer, same run.

- ours: ``sparkflake checkpoint pin DRAFT --role draft`` (a new process, as the operator
  runs it: interpreter start, profile, size then one streamed sha256 pass per file, the
  atomic write of the pins file);
- peer: ``sha256sum`` (coreutils) over the same files — the hash alone, nothing recorded;
- bound: ``openssl dgst -sha256`` over them — the CPU's sha256 rate with the same SHA
  instructions Python's hashlib (OpenSSL) uses; Debian 12's sha256sum has its own, slower
  implementation;
- launch, cold: the checkpoint checks of ``launch-rank --dry-run --rehash`` (every pinned
  file hashed again), in-process; warm: the same with the verified-hash cache of an
  unchanged checkpoint (stat only).

The synthetic draft is a ``config.json`` and one ``model.safetensors`` of ``--mib`` MiB of
random bytes, read once before the first run so every run reads from the page cache. Runs are interleaved; medians
and ratios are printed and written to bench/results/checkpoint-pin.json.

    .venv/bin/python bench/bench_checkpoint_pin.py             # 1024 MiB, 5 runs
    .venv/bin/python bench/bench_checkpoint_pin.py --mib 256 --runs 3
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

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "checkpoint-pin.json"
sys.path.insert(0, str(REPO / "python" / "tests"))

from fixtures.launch import TARGET_FILES, real_contract, write_checkpoint
from sparkflake.launch.plan import plan_launch


def make_site(root: Path, mib: int) -> None:
    write_checkpoint(root / "target", TARGET_FILES)
    draft = root / "draft"
    draft.mkdir()
    (draft / "config.json").write_bytes(b'{"architectures": ["DFlashDraftModel"]}\n')
    with open(draft / "model.safetensors", "wb") as handle:
        handle.writelines(os.urandom(1 << 20) for _ in range(mib))
    (root / "cache").mkdir()


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def pin(root: Path, role: str) -> list[str]:
    return [sys.executable, "-m", "sparkflake.cli", "checkpoint", "pin", str(root / role), "--role", role,
            "--profile", str(REPO / "profiles" / "glm53-dflash7"), "-o", str(root / "pins.json")]


def launch_checks(root: Path, *, rehash: bool) -> float:
    env = root / "runtime.env"
    start = time.perf_counter()
    plan = plan_launch(rank=0, env_file=env, contract=real_contract("glm53-dflash7"), engine=None,
                       check_engine=False, rehash=rehash)
    elapsed = time.perf_counter() - start
    assert all(c.status == "pass" for c in plan.checks if c.id.startswith("checkpoint.")), plan.checks
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pin-") as scratch:
        root = Path(scratch)
        make_site(root, args.mib)
        files = [str(root / "draft" / "config.json"), str(root / "draft" / "model.safetensors")]
        subprocess.run(["cat", *files], check=True, stdout=subprocess.DEVNULL)  # into the page cache
        subprocess.run(pin(root, "target"), check=True, capture_output=True)
        (root / "runtime.env").write_text(
            f"NODE_ADDRESS=10.0.0.1\nMASTER_ADDRESS=10.0.0.1\nTARGET_MODEL_PATH={root / 'target'}\n"
            f"DRAFT_MODEL_PATH={root / 'draft'}\nCACHE_ROOT={root / 'cache'}\nCHECKPOINT_PINS={root / 'pins.json'}\n"
        )
        ours, peer, bound, cold, warm = [], [], [], [], []
        for _ in range(args.runs):
            ours.append(timed(pin(root, "draft")))
            peer.append(timed(["sha256sum", *files]))
            bound.append(timed(["openssl", "dgst", "-sha256", *files]))
            cold.append(launch_checks(root, rehash=True))
            launch_checks(root, rehash=False)  # fills the verified-hash cache
            warm.append(launch_checks(root, rehash=False))
    size = args.mib * (1 << 20) + len(b'{"architectures": ["DFlashDraftModel"]}\n')
    medians = {name: statistics.median(values) for name, values in
               (("pin", ours), ("sha256sum", peer), ("openssl", bound), ("launch_cold", cold), ("launch_warm", warm))}
    report = {
        "what": "checkpoint pin vs sha256sum and openssl dgst; launch checkpoint checks cold (--rehash) vs warm (hash cache)",
        "draft_bytes": size,
        "runs": args.runs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "seconds": {name: [round(v, 4) for v in values] for name, values in
                    (("pin", ours), ("sha256sum", peer), ("openssl", bound), ("launch_cold", cold), ("launch_warm", warm))},
        "median_seconds": {name: round(value, 4) for name, value in medians.items()},
        "pin_over_sha256sum": round(medians["pin"] / medians["sha256sum"], 3),
        "pin_over_openssl": round(medians["pin"] / medians["openssl"], 3),
        "pin_mib_per_s": round(size / (1 << 20) / medians["pin"], 1),
        "sha256sum_mib_per_s": round(size / (1 << 20) / medians["sha256sum"], 1),
        "launch_warm_over_cold": round(medians["launch_warm"] / medians["launch_cold"], 4),
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    for key in ("median_seconds", "pin_over_sha256sum", "pin_over_openssl", "pin_mib_per_s", "sha256sum_mib_per_s",
                "launch_warm_over_cold"):
        print(f"{key}: {report[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
