"""`sparkflake service`: gang admission of four ranks in parallel vs one after another, and a
clean `up` vs starting the ranks one after another, on the rehearsal ranks.

Four network namespaces with an sshd each and a podman store each (python/tests/fixtures:
netns_ranks.py, service_site.py), the stand-in image of `vllm serve` our engine builds.
Measured, several runs each, medians:

- one rank's checks: the admission agent of one rank alone (SSH session, launch-rank's
  plan and checks, the service's own checks);
- admission, parallel: `workflow.admit` of the four ranks (what `service up` runs);
- admission, sequential: the four ranks' agents one after another;
- up: `workflow.up` until rank 0 is ready (admission, rank 0, ranks 1-3 together, the
  stand-in's readiness after 0.2 s);
- starts, sequential: the four ranks' start agents one after another (no admission, no
  readiness): the sum a rank-by-rank start would cost.

Goals (issue 29): parallel admission <= 1.5x one rank's checks; `up` bounded by the slowest
rank, not the sum. Writes bench/results/service.json.
Usage: .venv/bin/python bench/bench_service.py [--runs N]  (as root: namespaces, podman)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))

from fixtures.netns_ranks import NetnsRanks
from fixtures.service_site import ServiceWorld
from sparkflake.service import workflow
from sparkflake.service.remote import call


def quiet(event: workflow.ProgressEvent) -> None:
    del event


def ready_soon(world: ServiceWorld) -> None:
    for index in range(world.count):
        world.behave(index, "ready_after 0.2")


def measure(world: ServiceWorld, site: Path, runs: int) -> dict:
    request = workflow.ServiceRequest(site_path=str(site))
    service_site = workflow.open_site(str(site))
    figures: dict[str, list[float]] = {"one_rank": [], "parallel": [], "sequential": [], "up": [],
                                       "starts_sequential": []}
    for _ in range(runs):
        members = workflow.members_of(service_site, workflow.new_deployment_id(), request)
        start = time.monotonic()
        reply = call(service_site.site, members[1], "admit")
        figures["one_rank"].append(time.monotonic() - start)
        assert reply.returncode == 0, reply.stderr
        report = workflow.admit(service_site, members, quiet)
        assert report.ok, report.failures()
        figures["parallel"].append(report.seconds)
        start = time.monotonic()
        for member in members:
            assert call(service_site.site, member, "admit").returncode == 0
        figures["sequential"].append(time.monotonic() - start)

        start = time.monotonic()
        result = workflow.up(request, quiet)
        figures["up"].append(time.monotonic() - start)
        assert result.exit_code == 0, result.record.failure
        workflow.down(request, quiet)

        members = workflow.members_of(service_site, workflow.new_deployment_id(), request)
        start = time.monotonic()
        for member in members:
            started = call(service_site.site, member, "start")
            assert started.returncode == 0, started.describe_failure()
        figures["starts_sequential"].append(time.monotonic() - start)
        workflow.down(request, quiet)
        world.reset()
        ready_soon(world)
    medians = {key: round(statistics.median(values), 3) for key, values in figures.items()}
    return {
        "runs": runs,
        "seconds": {key: [round(v, 3) for v in values] for key, values in figures.items()},
        "median_seconds": medians,
        "admission_parallel_over_one_rank": round(medians["parallel"] / medians["one_rank"], 2),
        "admission_sequential_over_parallel": round(medians["sequential"] / medians["parallel"], 2),
        "up_over_sequential_admission_and_starts": round(
            medians["up"] / (medians["sequential"] + medians["starts_sequential"]), 2),
        "goal_admission_at_most_1_5x_one_rank": medians["parallel"] <= 1.5 * medians["one_rank"],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results", type=Path, default=HERE / "results" / "service.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sfk-bench-service-") as scratch:
        ranks = NetnsRanks(Path(scratch) / "ranks").start()
        try:
            world = ServiceWorld(ranks, Path(scratch) / "world")
            try:
                world.reset()
                ready_soon(world)
                site = world.site_file(Path(scratch) / "site.toml")
                results = measure(world, site, args.runs)
            finally:
                world.close()
        finally:
            ranks.close()
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps(results, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
