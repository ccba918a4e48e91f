"""Chain fan-out to four ranks vs the physical bound and the peer tools, in one run.

Four network namespaces chained by veth pairs (python/tests/netns_ranks.py), one sshd each,
links shaped with tc tbf (default: 1gbit, then 400mbit): on this machine's two cores three
concurrent encrypted hops at 1 Gbit/s are CPU-bound, so the lower rate shows what pipelining
does when the link is the bottleneck, as on the real fabric. Measured, several runs each, medians:

- chain: ``sparkflake`` fan-out rank0 -> rank1 -> rank2 -> rank3, pipelined, every rank
  hashing and verifying as it receives;
- single hop (ours): the same transport to rank1 only (a two-rank site);
- single hop (raw): ``cat ARCHIVE | ssh rank1 'cat > FILE'`` over the same link;
- sequential scp: scp rank0 -> rank1, then rank1 -> rank2, then rank2 -> rank3
  (store and forward, each hop after the previous one finished; no verification);
- raw link rate: ``dd if=/dev/zero | ssh rank1 'cat > /dev/null'``.

Ratios: chain / single hop (goal <= 1.3 thanks to pipelining), sequential scp / chain, and
the chain's throughput against the raw link rate. Writes bench/results/fanout.json.
Usage: .venv/bin/python bench/bench_fanout.py [--small] [--runs N] [--rates 1gbit,400mbit]
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))

from fixtures.netns_ranks import NetnsRanks
from sparkflake.distribute.fanout import FanoutRequest, fanout
from sparkflake.distribute.site import Site
from sparkflake.distribute.ssh import ssh_argv

MIB = 1 << 20


def make_archive(path: Path, size: int) -> str:
    hasher = hashlib.sha256()
    with open(path, "wb") as handle:
        remaining = size
        while remaining:
            chunk = os.urandom(min(8 * MIB, remaining))
            handle.write(chunk)
            hasher.update(chunk)
            remaining -= len(chunk)
    return hasher.hexdigest()


def in_rank(ranks: NetnsRanks, index: int, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ranks.namespace(index), *argv], check=True, **kwargs)


def hop_ssh(site: Site, sender: int, remote: list[str]) -> list[str]:
    hop = site.hops()[sender]
    return ssh_argv(site.ssh, hop.receiver_address, remote, bind=hop.sender_address)


def clear_copies(ranks: NetnsRanks, name: str) -> None:
    for index in range(1, ranks.count):
        for leftover in ranks.data_dir(index).glob(f"*{name}*"):
            leftover.unlink()


def timed(action) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def run_chain(ranks: NetnsRanks, site: Site, archive: Path, digest: str) -> float:
    clear_copies(ranks, archive.name)

    def go() -> None:
        report = fanout(site, FanoutRequest(archive=str(archive), sha256=digest))
        assert report["complete"], report

    return timed(go)


def run_single_hop_ours(ranks: NetnsRanks, site: Site, archive: Path, digest: str) -> float:
    two = Site(ranks=site.ranks[:2], links=site.links[:1], order=site.order[:2], topology="chain",
               ssh=site.ssh, agent=site.agent)
    clear_copies(ranks, archive.name)

    def go() -> None:
        report = fanout(two, FanoutRequest(archive=str(archive), sha256=digest))
        assert report["complete"], report

    return timed(go)


def pipe_into(ranks: NetnsRanks, index: int, producer: list[str], consumer: list[str]) -> None:
    """``producer | consumer`` inside rank ``index``'s namespace, without a shell."""
    prefix = ["ip", "netns", "exec", ranks.namespace(index)]
    first = subprocess.Popen(prefix + producer, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    second = subprocess.Popen(prefix + consumer, stdin=first.stdout)
    assert first.stdout is not None
    first.stdout.close()
    assert second.wait() == 0 and first.wait() == 0


def run_single_hop_raw(ranks: NetnsRanks, site: Site, archive: Path) -> float:
    clear_copies(ranks, archive.name)
    target = str(ranks.data_dir(1) / archive.name)
    return timed(lambda: pipe_into(ranks, 0, ["cat", str(archive)],
                                   hop_ssh(site, 0, ["dd", f"of={target}", "bs=1M", "status=none"])))


def run_sequential_scp(ranks: NetnsRanks, site: Site, archive: Path) -> float:
    clear_copies(ranks, archive.name)

    def go() -> None:
        source = str(archive)
        for sender in range(ranks.count - 1):
            hop = site.hops()[sender]
            target = str(ranks.data_dir(sender + 1) / archive.name)
            argv = ["scp", "-q", "-o", "BatchMode=yes", "-o", f"BindAddress={hop.sender_address}",
                    "-i", site.ssh.identity_file, "-o", f"UserKnownHostsFile={site.ssh.known_hosts_file}",
                    "-o", "StrictHostKeyChecking=accept-new", "-c", site.ssh.cipher,
                    *[f"-o{option}" for option in site.ssh.options],
                    source, f"root@{hop.receiver_address}:{target}"]
            in_rank(ranks, sender, argv)
            source = target

    return timed(go)


def run_raw_link(ranks: NetnsRanks, site: Site, size: int) -> float:
    count = size // MIB
    return timed(lambda: pipe_into(ranks, 0, ["dd", "if=/dev/zero", "bs=1M", f"count={count}", "status=none"],
                                   hop_ssh(site, 0, ["dd", "of=/dev/null", "bs=1M", "status=none"])))


def measure(ranks: NetnsRanks, site: Site, archive: Path, digest: str, size: int, runs: int) -> dict:
    measurements: dict[str, list[float]] = {
        "chain_4_ranks": [], "single_hop_ours": [], "single_hop_raw": [],
        "sequential_scp": [], "raw_link": [],
    }
    # warm up host keys and the page cache so the first measured run is not special
    run_single_hop_ours(ranks, site, archive, digest)
    for _ in range(runs):
        measurements["chain_4_ranks"].append(run_chain(ranks, site, archive, digest))
        measurements["single_hop_ours"].append(run_single_hop_ours(ranks, site, archive, digest))
        measurements["single_hop_raw"].append(run_single_hop_raw(ranks, site, archive))
        measurements["sequential_scp"].append(run_sequential_scp(ranks, site, archive))
        measurements["raw_link"].append(run_raw_link(ranks, site, size))
    clear_copies(ranks, archive.name)
    median = {name: statistics.median(values) for name, values in measurements.items()}
    mb = size / 1e6
    return {
        "seconds": measurements,
        "median_seconds": median,
        "throughput_mb_s": {name: mb / seconds for name, seconds in median.items()},
        "ratios": {
            "chain_over_single_hop_ours": median["chain_4_ranks"] / median["single_hop_ours"],
            "chain_over_single_hop_raw": median["chain_4_ranks"] / median["single_hop_raw"],
            "sequential_scp_over_chain": median["sequential_scp"] / median["chain_4_ranks"],
            "chain_throughput_over_raw_link": median["raw_link"] / median["chain_4_ranks"],
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="32 MiB archive, 2 runs")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rates", default="1gbit,400mbit",
                        help="comma-separated tc tbf rates per link ('none' = unshaped)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "fanout.json")
    args = parser.parse_args()
    size = (32 if args.small else args.size_mib) * MIB
    runs = 2 if args.small else args.runs
    rates = [rate.strip() for rate in args.rates.split(",") if rate.strip()]

    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="sfk-bench-fanout-"))
    ranks = NetnsRanks(workdir / "ranks")
    ranks.start()
    by_rate = {}
    try:
        site = ranks.site()
        archive = workdir / "archive.bin"
        digest = make_archive(archive, size)
        for rate in rates:
            ranks.shape(None if rate == "none" else rate)
            by_rate[rate] = measure(ranks, site, archive, digest, size, runs)
    finally:
        ranks.close()
        shutil.rmtree(workdir, ignore_errors=True)

    result = {
        "machine": {"cores": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
        "archive_bytes": size,
        "runs": runs,
        "by_link_rate": by_rate,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")

    print(f"archive {size / MIB:.0f} MiB, {runs} runs each, medians; load average before "
          f"{load_before[0]:.1f}, after {result['machine']['load_after'][0]:.1f} on {os.cpu_count()} cores")
    mb = size / 1e6
    for rate, figures in by_rate.items():
        print(f"\nlinks shaped to {rate}")
        print(f"{'measurement':<22}{'seconds':>10}{'MB/s':>10}")
        for name, seconds in figures["median_seconds"].items():
            print(f"{name:<22}{seconds:>10.2f}{mb / seconds:>10.1f}")
        for name, ratio in figures["ratios"].items():
            print(f"{name:<34}{ratio:>8.2f}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
