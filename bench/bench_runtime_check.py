"""Benchmark of `sparkflake runtime check`: every launch case of a profile judged in one start
of the image's interpreter, side by side with a plain ``import vllm`` in the same emulation.

- ours: ``runtime.check.run_check`` on a build output with all of the profile's
  conformance cases (what the CLI runs): the verified root reused (its stat identity
  re-walked), one sandboxed interpreter start that imports torch, vllm, b12x, sparkcache,
  fastsafetensors and flashinfer and judges every case, the grep for env-variable
  evidence;
- peer: the same sandbox, the same interpreter and bytecode cache, running
  ``python -c "import vllm"`` — the least any check that runs vLLM's own code must pay;
- the unpack of the layers (verify + extract), or the verified reuse of a kept root, is
  reported once, separately (unpack_seconds);
- each of our runs starts with no bytecode cache (what CI's check of a fresh build pays:
  the host compiles the image's sources beside the probe); the peer then runs with the
  cache ours left, i.e. with every module already compiled.

Runs are interleaved; medians and the ratio ours/peer are printed and written to
bench/results/runtime-check.json, with the load average (the machine is shared).

    .venv/bin/python bench/bench_runtime_check.py --out result/glm53-dflash7 --profile glm53-dflash7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python" / "src"))

from sparkflake.launch.conformance import conformance_cases
from sparkflake.launch.contract import contract_from_profile
from sparkflake.lock.profile_locks import load_profile
from sparkflake.oci.reader import open_image
from sparkflake.runtime import rootfs, sandbox
from sparkflake.runtime.check import (
    PYCACHE_INSIDE,
    Case,
    _config_env,
    _interpreter,
    image_location,
    probe_env,
    run_check,
)

RESULTS = REPO / "bench" / "results" / "runtime-check.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "result" / "glm53-dflash7"))
    parser.add_argument("--profile", default="glm53-dflash7")
    parser.add_argument("--scratch", default=os.path.expanduser("~/.cache/sparkflake/runtime/bench"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "python" / "src"))
    from sparkflake.cli.runtime import expected_versions

    out, scratch = Path(args.out), Path(args.scratch)
    profile = load_profile(args.profile, check_locks=False)
    cases = [Case(c.name, c.serve_args, c.env) for c in conformance_cases(contract_from_profile(profile))
             if c.serve_args is not None]
    versions = expected_versions(profile)
    reader = open_image(image_location(out))
    started = time.monotonic()
    unpacked = rootfs.unpack_image(reader, scratch)
    first_unpack = time.monotonic() - started
    env = probe_env(_config_env(reader))
    python, _ = _interpreter(unpacked.path, env)
    assert python is not None
    (scratch / "pycache").mkdir(exist_ok=True)
    peer_argv = sandbox.sandbox_argv(unpacked.path, [python, "-c", "import vllm"], env,
                                     [(scratch / "pycache", PYCACHE_INSIDE, True)])
    ours, peer, probe_only, imports = [], [], [], []
    bytecode = []
    for run in range(args.runs):
        # the bench's own scratch: the bytecode cache the previous run left goes
        shutil.rmtree(scratch / "pycache", ignore_errors=True)
        (scratch / "pycache.json").unlink(missing_ok=True)
        started = time.monotonic()
        report = run_check(out, cases=cases, expected_versions=versions, platform=profile.platform, scratch=scratch)
        ours.append(time.monotonic() - started)
        probe_only.append(report.probe_seconds or 0.0)
        imports.append(report.import_seconds or 0.0)
        bytecode.append(report.bytecode_seconds or 0.0)
        assert report.exit_code == 0, [check.as_record() for check in report.failed()]
        started = time.monotonic()
        result = sandbox.run_sandboxed(peer_argv, timeout=3600, stderr_path=scratch / "peer-stderr.log")
        peer.append(time.monotonic() - started)
        assert result.returncode == 0, result.stderr_tail
        print(f"run {run + 1}: ours {ours[-1]:.1f} s (probe {probe_only[-1]:.1f} s, {len(cases)} cases, exit "
              f"{report.exit_code}), import vllm {peer[-1]:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    record = {
        "what": "sparkflake runtime check (all conformance cases, one interpreter start) vs python -c 'import vllm' "
                "in the same sandbox and emulation",
        "profile": args.profile,
        "emulation": sandbox.emulation_for(str(reader.config.get("architecture"))).detail,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "load_average_1m_at_end": os.getloadavg()[0]},
        "cases": len(cases),
        "runs": args.runs,
        "unpack_seconds": round(first_unpack, 1),  # a verified reuse when the scratch holds this root
        "median_seconds": {"ours": round(statistics.median(ours), 1), "import_vllm": round(statistics.median(peer), 1),
                           "ours_probe_only": round(statistics.median(probe_only), 1),
                           "ours_imports_in_probe": round(statistics.median(imports), 1),
                           "ours_host_bytecode_beside_probe": round(statistics.median(bytecode), 1)},
        "ratio_ours_to_import_vllm": round(statistics.median(ours) / statistics.median(peer), 2),
        "all_seconds": {"ours": [round(x, 1) for x in ours], "import_vllm": [round(x, 1) for x in peer]},
    }
    RESULTS.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(json.dumps(record["median_seconds"]), "ratio", record["ratio_ours_to_import_vllm"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
