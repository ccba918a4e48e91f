"""Benchmark: `sparkflake sign`/`verify` against `cosign sign`/`attest`/`verify`/
`verify-attestation` (Debian 13's cosign 2.x) on the same image in a local distribution
registry, in one run; interleaved, medians of --runs, ratios ours/cosign.

Both sides do the same work: one key file decrypted (scrypt N=65536, the cost cosign's
generate-key-pair chooses, dominates signing), one ECDSA P-256 signature each for the
signature and the attestation, a handful of small registry requests; verification
resolves the tag, reads the .sig/.att manifests and blobs and checks the signatures.
Signing on each side adds a layer to the same .sig/.att manifests (cosign de-duplicates
an identical one; ours too), so later runs do the same amount of work.

    .venv/bin/python bench/bench_sign.py [--runs 9] [--results R.json]

Results go to bench/results/sign.json, with the load average before the runs and after each.
"""

from __future__ import annotations

import argparse
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
RESULTS = REPO / "bench" / "results" / "sign.json"
SPARKFLAKE = [sys.executable, "-m", "sparkflake.cli"]
# timed as an operator runs it: the venv's `sparkflake` entry point (what bin/sparkflake execs)
SPARKFLAKE_COMMAND = [str(Path(sys.executable).parent / "sparkflake")]
COSIGN = "/usr/bin/cosign"
PASSWORD = "bench"
COSIGN_FLAGS = ["--allow-insecure-registry", "--allow-http-registry"]

sys.path.insert(0, str(REPO / "python" / "tests"))
from fixtures.oci import RegistryServer

CPU: dict[str, list[float]] = {}  # "name/side": CPU seconds (user + system) of each timed run


def children_cpu() -> float:
    """CPU seconds of the waited-for children so far: on a shared machine the share of the
    cores a run gets varies with the load, the CPU it costs much less."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: Path, cpu_key: str | None = None) -> float:
    start, cpu = time.perf_counter(), children_cpu()
    completed = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if cpu_key is not None:
        CPU.setdefault(cpu_key, []).append(children_cpu() - cpu)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {completed.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--against", metavar="SRC", help="also time verify with this python/src (an A/B of a change)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sign."))
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "HOME": str(work), "XDG_CACHE_HOME": str(work / "cache")}
    # as an operator runs it: bytecode cached (one warm-up run of each command writes it)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([COSIGN, "generate-key-pair"], cwd=work, env=env, check=True, capture_output=True)
    out = work / "out"
    subprocess.run([*SPARKFLAKE, "build", str(REPO / "profiles" / "fixture"), "--offline", "-o", str(out),
                    "--cache", str(work / "cache")], env=env, check=True, capture_output=True)
    registry = RegistryServer.start(work / "registry")
    try:
        reference = f"{registry.host}/bench/fixture:v1"
        subprocess.run([*SPARKFLAKE, "publish", str(out), reference, "--insecure"], env=env, check=True, cwd=work,
                       capture_output=True)
        predicate = work / "predicate.json"
        predicate.write_text(json.dumps(json.loads((out / "receipt.json").read_text())["predicate"]))
        key, pub = str(work / "cosign.key"), str(work / "cosign.pub")
        commands = {
            "sign+attest": (
                [*SPARKFLAKE_COMMAND, "sign", reference, "--key", key, "--receipt", str(out / "receipt.json"), "--insecure"],
                [[COSIGN, "sign", "--key", key, "--tlog-upload=false", "-y", *COSIGN_FLAGS, reference],
                 [COSIGN, "attest", "--key", key, "--type", "slsaprovenance1", "--predicate", str(predicate),
                  "--tlog-upload=false", "-y", *COSIGN_FLAGS, reference]],
            ),
            "verify (signature + attestation)": (
                [*SPARKFLAKE_COMMAND, "verify", reference, "--key", pub, "--insecure"],
                [[COSIGN, "verify", "--key", pub, "--insecure-ignore-tlog", *COSIGN_FLAGS, reference],
                 [COSIGN, "verify-attestation", "--type", "slsaprovenance1", "--key", pub, "--insecure-ignore-tlog",
                  *COSIGN_FLAGS, reference]],
            ),
        }
        times: dict[str, dict[str, list[float]]] = {name: {"sparkflake": [], "cosign": []} for name in commands}
        for ours, theirs in commands.values():
            for argv in (ours, *theirs):
                timed(argv, env, work)
        against_env = {**env, "PYTHONPATH": args.against} if args.against else None
        verify_name = "verify (signature + attestation)"
        if against_env:
            times[verify_name]["against"] = []
            timed(commands[verify_name][0], against_env, work)
        loads = [os.getloadavg()]
        for _ in range(args.runs):
            for name, (ours, theirs) in commands.items():
                times[name]["sparkflake"].append(timed(ours, env, work, f"{name}/sparkflake"))
                cpu = children_cpu()
                times[name]["cosign"].append(sum(timed(argv, env, work) for argv in theirs))
                CPU.setdefault(f"{name}/cosign", []).append(children_cpu() - cpu)
                if against_env and name == verify_name:
                    times[name]["against"].append(timed(ours, against_env, work, f"{name}/against"))
            loads.append(os.getloadavg())
    finally:
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)  # its keys, image and registry: scratch of this run
    report = {"runs": args.runs, "results": {}, "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "load_per_run": [[round(x, 2) for x in load] for load in loads],
              "all": {name: {side: [round(t, 4) for t in values] for side, values in sides.items()}
                      for name, sides in times.items()},
              "sparkflake_command": " ".join(SPARKFLAKE_COMMAND[:1]).replace(str(REPO) + "/", "")}
    for name, sides in times.items():
        ours, theirs = statistics.median(sides["sparkflake"]), statistics.median(sides["cosign"])
        report["results"][name] = {"sparkflake_s": round(ours, 3), "cosign_s": round(theirs, 3),
                                   "ratio": round(ours / theirs, 2)}
        cpu_ours, cpu_theirs = statistics.median(CPU[f"{name}/sparkflake"]), statistics.median(CPU[f"{name}/cosign"])
        report["results"][name].update(cpu_sparkflake_s=round(cpu_ours, 3), cpu_cosign_s=round(cpu_theirs, 3),
                                       cpu_ratio=round(cpu_ours / cpu_theirs, 2))
        print(f"{name:<34} sparkflake {ours:6.3f} s   cosign {theirs:6.3f} s   ratio {ours / theirs:.2f}"
              f"   CPU ratio {cpu_ours / cpu_theirs:.2f}")
        if "against" in sides:
            before = statistics.median(sides["against"])
            cpu_before = statistics.median(CPU[f"{name}/against"])
            report["results"][name].update(against=args.against, against_s=round(before, 3),
                                           against_ratio=round(before / theirs, 2),
                                           cpu_against_s=round(cpu_before, 3),
                                           cpu_against_ratio=round(cpu_before / cpu_theirs, 2))
            print(f"{'  with ' + args.against:<34} {before:6.3f} s   ratio {before / theirs:.2f}")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
