"""Benchmark of `sparkflake runtime check`: every launch case of a profile judged in one start
of the image's interpreter, side by side with a plain ``import vllm`` in the same emulation.

- ours: ``runtime.check.run_check`` on a build output with all of the profile's
  conformance cases, the CLI's container mounts and the profile's [device]: the verified
  root reused (its stat identity re-walked), one sandboxed interpreter start that imports
  torch, vllm, b12x, sparkcache, fastsafetensors and flashinfer and judges every case
  (vLLM's ModelConfig from the synthetic checkpoint included, then each case through
  vLLM's create_engine_config and its per-layer selectors on the faked device: the
  ``engine`` share of the probe is reported as ``ours_engine``), the grep for
  env-variable evidence;
- peer: the same sandbox, the same interpreter, bytecode cache and driver stand-in,
  running ``python -c "import vllm"`` — the least any check that runs vLLM's own code must
  pay;
- the default launch's served models constructed on the meta device, in a child forked
  beside the other cases (as the CLI does): its own seconds are reported per run
  (``meta_model_seconds`` in probe_breakdown_per_run) beside what the probe waited for it
  at the end (``phases.meta_model_wait``);
- where the probe's time went, per run: its phases before the cases and each case's
  seconds (probe_breakdown_per_run);
- both under the same cache condition, in two rows: ``cold`` (no bytecode cache: ours has
  the host compile the image's sources beside the probe, the peer's interpreter compiles
  what it imports itself, under emulation) and ``warm`` (the bytecode cache a complete
  check left, for both);
- the unpack of the layers (verify + extract), or the verified reuse of a kept root, is
  reported once, separately (unpack_seconds).

Runs are interleaved; medians and the ratios ours/peer per row are printed and written to
bench/results/runtime-check-<profile>.json, with the load average before and after each run (the
machine is shared).

    .venv/bin/python bench/bench_runtime_check.py --out result/glm53-dflash7 --profile glm53-dflash7 \
        [--scratch DIR] [--runs N] [--rows cold,warm] [--verdicts REPORT.json]
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
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python" / "src"))

from sparkflake.core.atomic_write import write_bytes_atomic
from sparkflake.core.records import record_to_dict
from sparkflake.launch.conformance import conformance_cases
from sparkflake.launch.contract import contract_from_profile
from sparkflake.lock.profile_locks import load_profile
from sparkflake.oci.layout import output_layout
from sparkflake.oci.reader import open_image
from sparkflake.runtime import driver_stand_in, rootfs, sandbox
from sparkflake.runtime.check import (
    config_env,
    image_interpreter,
    run_check,
)
from sparkflake.runtime.check_report import Case
from sparkflake.runtime.probe_runner import PYCACHE_INSIDE, probe_env
from sparkflake.workflows.runtime_check import container_mounts, expected_versions

RESULTS = REPO / "bench" / "results"  # runtime-check-<profile>.json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "result" / "glm53-dflash7"))
    parser.add_argument("--profile", default="glm53-dflash7")
    parser.add_argument("--scratch", default=os.path.expanduser("~/.cache/sparkflake/runtime/bench"))
    parser.add_argument("--runs", type=int, default=2, help="runs of each row (cold, warm)")
    parser.add_argument("--rows", default="cold,warm", help="which rows, in this order per run")
    parser.add_argument("--verdicts", help="a `sparkflake runtime check --json` report: each of our runs must "
                        "give the same check ids and statuses, in the same order")
    args = parser.parse_args()
    out, scratch = Path(args.out), Path(args.scratch)
    profile = load_profile(args.profile, check_locks=False)
    contract = contract_from_profile(profile)
    cases = [Case(c.name, c.serve_args, c.env, construct_models=c.default_launch)
             for c in conformance_cases(contract) if c.serve_args is not None]
    mounts = container_mounts(contract, cases)
    device = None if profile.device is None else record_to_dict(profile.device)
    versions = expected_versions(profile)
    reader = open_image(output_layout(out))
    started = time.monotonic()
    unpacked = rootfs.unpack_image(reader, scratch)
    first_unpack = time.monotonic() - started
    env = probe_env(config_env(reader), cases)
    python, _ = image_interpreter(unpacked.path, env)
    assert python is not None
    rows = [row for row in args.rows.split(",") if row]
    expected = None
    if args.verdicts:
        # the CLI adds the launcher's refusals (runtime.launch-refused) after run_check's own
        expected = [(check["id"], check["status"]) for check in json.loads(Path(args.verdicts).read_text())["checks"]
                    if check["id"] != "runtime.launch-refused"]
    seconds: dict[str, dict[str, list[float]]] = {row: {"ours": [], "import_vllm": [], "ours_probe": [],
                                                        "ours_imports": [], "ours_engine": []} for row in rows}
    failed: list[list[str]] = []
    breakdown: list[dict] = []  # per run of ours, in order
    stand_in = driver_stand_in.build_stand_in(unpacked.path, str(reader.config.get("architecture")), scratch)
    peer_binds = []
    if device is not None and stand_in.directory is not None:
        # the peer loads the same driver stand-in, so both pay for the same emulation
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, (driver_stand_in.INSIDE, env.get("LD_LIBRARY_PATH"))))
        peer_binds.append((stand_in.directory, driver_stand_in.INSIDE, False))
    loads: list[list[float]] = []

    def forget_bytecode() -> None:
        # the bench's own scratch: the bytecode cache an earlier run left goes
        shutil.rmtree(scratch / "pycache", ignore_errors=True)
        (scratch / "pycache.json").unlink(missing_ok=True)

    def ours(row: str) -> None:
        started = time.monotonic()
        report = run_check(out, cases=cases, expected_versions=versions, platform=profile.platform, scratch=scratch,
                           mounts=mounts, device=device)
        seconds[row]["ours"].append(time.monotonic() - started)
        seconds[row]["ours_probe"].append(report.probe_seconds or 0.0)
        seconds[row]["ours_imports"].append(report.import_seconds or 0.0)
        probe = json.loads((scratch / "probe-result.json").read_bytes())
        seconds[row]["ours_engine"].append(sum(float((case.get("engine") or {}).get("seconds") or 0.0)
                                               for case in probe.get("cases", [])))
        # where the probe's time went: its phases before the cases (imports, platform,
        # capabilities, the warming child's wait) and each case, in order
        breakdown.append({"imports": probe.get("import_seconds"), "phases": probe.get("phase_seconds"),
                          "cases": {str(case.get("name")): case.get("seconds") for case in probe.get("cases", [])},
                          "meta_model_seconds": [((case.get("engine") or {}).get("meta_model") or {}).get("seconds")
                                                 for case in probe.get("cases", [])
                                                 if "meta_model" in (case.get("engine") or {})],
                          "cpu_seconds": probe.get("cpu_seconds"),
                          "child_spans": probe.get("child_spans"), "seconds": probe.get("seconds")})
        # timed whatever the verdicts: the failed check ids are recorded beside the times
        failed.append(sorted({check.id for check in report.failures}))
        if expected is not None:
            given = [(check.id, check.status) for check in report.checks]
            assert given == expected, f"the verdicts differ from {args.verdicts}"

    def peer(row: str) -> None:
        (scratch / "pycache").mkdir(exist_ok=True)
        argv = sandbox.sandbox_argv(unpacked.path, [python, "-c", "import vllm"], env,
                                    [(scratch / "pycache", PYCACHE_INSIDE, True), *peer_binds])
        started = time.monotonic()
        result = sandbox.run_sandboxed(argv, timeout=3600, stderr_path=scratch / "peer-stderr.log")
        seconds[row]["import_vllm"].append(time.monotonic() - started)
        assert result.returncode == 0, result.stderr_tail

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 1)

    def write_record() -> dict:
        record = {
            "what": "sparkflake runtime check (all conformance cases, one interpreter start) vs python -c 'import vllm' "
                    "in the same sandbox, emulation and bytecode-cache condition",
            "profile": args.profile,
            "emulation": sandbox.emulation_for(str(reader.config.get("architecture"))).detail,
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                     "load_average_1m_before_after_each_row": loads},
            "cases": len(cases),
            "device": device,
            "failed_check_ids_per_run": failed,
            "probe_breakdown_per_run": breakdown,
            # what each of our runs was compared with (--verdicts): the same ids and statuses
            "verdicts_as_report": expected and {"checks": len(expected),
                                                "statuses": dict(Counter(status for _, status in expected))},
            "runs": args.runs,
            "unpack_seconds": round(first_unpack, 1),  # a verified reuse when the scratch holds this root
            "rows": {row: {"median_seconds": {key: median(values) for key, values in data.items()},
                           "ratio_ours_to_import_vllm": round(statistics.median(data["ours"])
                                                              / statistics.median(data["import_vllm"]), 2),
                           "all_seconds": {key: [round(x, 1) for x in values] for key, values in data.items()}}
                     for row, data in seconds.items() if data["ours"] and data["import_vllm"]},
        }
        # after every row: an interrupted bench keeps the rows it finished
        write_bytes_atomic(RESULTS / f"runtime-check-{args.profile}.json", (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
        return record

    for run in range(args.runs):
        for row in rows:
            before = os.getloadavg()[0]
            if row == "cold":
                forget_bytecode()
                peer(row)
                forget_bytecode()
                ours(row)  # leaves the complete cache (and its record) the warm row uses
            else:
                if not (scratch / "pycache.json").is_file():
                    ours(row)  # fills the cache; not timed as warm
                    for key in ("ours", "ours_probe", "ours_imports"):
                        seconds[row][key].pop()
                ours(row)
                peer(row)
            loads.append([round(before, 2), round(os.getloadavg()[0], 2)])
            print(f"run {run + 1} {row}: ours {seconds[row]['ours'][-1]:.1f} s (probe "
                  f"{seconds[row]['ours_probe'][-1]:.1f} s), import vllm {seconds[row]['import_vllm'][-1]:.1f} s, "
                  f"load {loads[-1]}", flush=True)
            write_record()

    record = write_record()
    print(json.dumps({row: data["median_seconds"] for row, data in record["rows"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
