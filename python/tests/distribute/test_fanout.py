"""Chain fan-out to four ranks: network namespaces chained by veth pairs, one sshd each,
real OpenSSH, real podman. See netns_ranks.py for the addresses."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.netns_ranks import NetnsRanks

from sparkflake.distribute.fanout import FanoutRequest, fanout
from sparkflake.distribute.files import partial_path

MIB = 1 << 20


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def random_file(path: Path, size: int, seed: int) -> str:
    generator = random.Random(seed)
    hasher = hashlib.sha256()
    with open(path, "wb") as handle:
        remaining = size
        while remaining:
            chunk = generator.randbytes(min(8 * MIB, remaining))
            handle.write(chunk)
            hasher.update(chunk)
            remaining -= len(chunk)
    return hasher.hexdigest()


def build_image(directory: Path, payload_size: int, seed: int) -> dict:
    """A real image from our OCI engine: one layer holding ``payload_size`` random bytes."""
    tree = directory / "tree" / "opt"
    tree.mkdir(parents=True)
    random_file(tree / "payload.bin", payload_size, seed)
    spec = directory / "spec.json"
    spec.write_text(json.dumps({
        "platform": "linux/amd64",
        "compression": "none",
        "repository": "localhost/sfk-fanout-test",
        "tag": f"seed{seed}",
        "layers": [{"tree": "tree"}],
        "config": {"Entrypoint": ["/opt/payload.bin"], "Labels": {"org.sparkflake.test": str(seed)}},
    }))
    built = cli("image", "build", str(spec), "-o", str(directory / "out"), "--no-cache",
                "--cache", str(directory / "blob-store"))  # never the user's store
    assert built.returncode == 0, built.stderr
    digests = json.loads((directory / "out" / "digests.json").read_text())
    archive = directory / "out" / "docker-archive.tar"
    digests["archive"] = str(archive)
    digests["archive_sha256"] = hashlib.sha256(archive.read_bytes()).hexdigest()
    return digests


def podman(ranks: NetnsRanks, index: int, *args: str) -> subprocess.CompletedProcess[str]:
    engine_args = ranks.site().ranks[index].engine_args
    return subprocess.run(
        ["ip", "netns", "exec", ranks.namespace(index), "podman", *engine_args, *args],
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
def test_a_200_mb_image_reaches_four_ranks_verified_and_loads_with_the_expected_id(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    image = build_image(tmp_path, 200 * MIB, seed=1)
    assert os.path.getsize(image["archive"]) >= 200 * MIB
    site = netns_ranks.write_site(tmp_path / "site.toml")
    evidence = tmp_path / "evidence"
    done = cli(
        "fanout", image["archive"], "--site", str(site), "--sha256", image["archive_sha256"],
        "--image-id", image["image_id"], "--import", "podman", "--tag", "localhost/glm53:fanout",
        "--evidence-dir", str(evidence), "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["complete"] is True and report["schema"] == "sparkflake.distribution-report/v1"
    for index in range(4):
        record = json.loads((evidence / f"rank{index}.json").read_text())
        assert record["schema"] == "sparkflake.distribution-evidence/v1" and record["kind"] == "fanout"
        assert record["status"] == "verified" and record["imported"] is True
        assert record["sha256"] == image["archive_sha256"]
        assert record["image_id"] == image["image_id"]
        assert record["bytes"] == os.path.getsize(image["archive"])
        if index:
            copy = netns_ranks.data_dir(index) / "docker-archive.tar"
            assert hashlib.sha256(copy.read_bytes()).hexdigest() == image["archive_sha256"]
            assert record["bytes_received"] == record["bytes"]
            assert record["upstream"] == f"rank{index - 1}"
        inspected = podman(netns_ranks, index, "image", "inspect", "--format", "{{.Id}}", "localhost/glm53:fanout")
        assert inspected.returncode == 0, inspected.stderr
        assert f"sha256:{inspected.stdout.strip()}" == image["image_id"]

    # Pipelining: the last rank completes well before three store-and-forward copies would.
    last_hop = json.loads((evidence / "rank3.json").read_text())["seconds"]
    first_hop = json.loads((evidence / "rank1.json").read_text())["seconds"]
    assert last_hop < 2.5 * first_hop

    # A second run reuses every verified copy and moves no byte.
    again = cli("fanout", image["archive"], "--site", str(site), "--sha256", image["archive_sha256"], "--json")
    assert again.returncode == 0, again.stderr
    assert all(r.get("reused") for r in json.loads(again.stdout)["ranks"][1:])
    assert all(r["bytes_received"] == 0 for r in json.loads(again.stdout)["ranks"])


def test_a_flipped_byte_is_detected_refetched_and_never_imported(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    image = build_image(tmp_path, 8 * MIB, seed=2)
    site = netns_ranks.write_site(tmp_path / "site.toml")
    common = ["--site", str(site), "--sha256", image["archive_sha256"]]
    first = cli("fanout", image["archive"], *common, "--json")
    assert first.returncode == 0, first.stderr

    copy = netns_ranks.data_dir(1) / "docker-archive.tar"
    with open(copy, "r+b") as handle:
        handle.seek(4 * MIB)
        original = handle.read(1)
        handle.seek(4 * MIB)
        handle.write(bytes([original[0] ^ 0xFF]))
    flipped = copy.read_bytes()

    # --verify is read-only: it reports the mismatch and leaves the file where it is.
    verify = cli("fanout", image["archive"], *common, "--verify", "--json")
    assert verify.returncode == 1
    states = {r["rank"]: r["status"] for r in json.loads(verify.stdout)["ranks"]}
    assert states == {"rank0": "verified", "rank1": "mismatch", "rank2": "verified", "rank3": "verified"}
    assert copy.read_bytes() == flipped

    # A real run moves the wrong copy aside, fetches again, verifies, then imports.
    fixed = cli("fanout", image["archive"], *common, "--image-id", image["image_id"], "--import", "podman",
                "--tag", "localhost/flip:ok", "--json")
    assert fixed.returncode == 0, fixed.stderr
    rank1 = json.loads(fixed.stdout)["ranks"][1]
    assert rank1["bytes_received"] == os.path.getsize(image["archive"])
    assert Path(rank1["moved_aside"]).read_bytes() == flipped
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == image["archive_sha256"]
    inspected = podman(netns_ranks, 1, "image", "inspect", "--format", "{{.Id}}", "localhost/flip:ok")
    assert f"sha256:{inspected.stdout.strip()}" == image["image_id"]
    # the other ranks reused their good copies
    assert all(r.get("reused") for r in json.loads(fixed.stdout)["ranks"][2:])

    # --verify with --import also asks each rank's engine for the image ID, read-only
    verified = cli("fanout", image["archive"], *common, "--verify", "--image-id", image["image_id"],
                   "--import", "podman", "--json")
    assert verified.returncode == 0, verified.stderr
    assert all(r["imported"] and r["image_id"] == image["image_id"] for r in json.loads(verified.stdout)["ranks"])
    missing = cli("fanout", image["archive"], *common, "--verify", "--image-id", "sha256:" + "d" * 64,
                  "--import", "podman", "--json")
    assert missing.returncode == 1
    assert not any(r["imported"] for r in json.loads(missing.stdout)["ranks"])


def test_a_cut_link_to_rank_2_resumes_mid_transfer(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    archive = tmp_path / "cut.bin"
    size = 48 * MIB
    digest = random_file(archive, size, seed=3)
    site = netns_ranks.write_site(tmp_path / "site.toml")
    netns_ranks.shape("60mbit")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "sparkflake.cli", "fanout", str(archive), "--site", str(site),
             "--sha256", digest, "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        cut_at = netns_ranks.cut_while_arriving(process, partial_path(netns_ranks.data_dir(2) / "cut.bin"), 6 * MIB, link=1)
        stdout, stderr = process.communicate(timeout=180)
    finally:
        netns_ranks.set_link(1, up=True)
        netns_ranks.shape(None)
    assert process.returncode == 0, stderr
    ranks = json.loads(stdout)["ranks"]
    rank2 = ranks[2]
    assert rank2["status"] == "verified"
    assert rank2["attempts"] >= 2
    assert rank2["resumed_from"] and rank2["resumed_from"][0] >= cut_at - 2 * MIB
    # resumed, not restarted: less than the whole file crossed the link again
    assert rank2["bytes_received"] < 2 * size
    for index in (1, 2, 3):
        copy = netns_ranks.data_dir(index) / "cut.bin"
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest


def test_rank_3_unreachable_is_named_and_ranks_0_to_2_complete(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    archive = tmp_path / "down.bin"
    digest = random_file(archive, 4 * MIB, seed=4)
    site = netns_ranks.write_site(tmp_path / "site.toml")
    netns_ranks.stop_sshd(3)
    try:
        done = cli("fanout", str(archive), "--site", str(site), "--sha256", digest, "--json")
    finally:
        netns_ranks.start_sshd(3)
    assert done.returncode == 1
    assert "rank3" in done.stderr and "Connection refused" in done.stderr
    assert "Traceback" not in done.stderr
    states = [r["status"] for r in json.loads(done.stdout)["ranks"]]
    assert states == ["verified", "verified", "verified", "failed"]
    for index in (1, 2):
        assert hashlib.sha256((netns_ranks.data_dir(index) / "down.bin").read_bytes()).hexdigest() == digest
    assert not (netns_ranks.data_dir(3) / "down.bin").exists()


def test_a_full_disk_is_a_clear_error_with_nothing_under_the_final_name(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    archive = tmp_path / "full.bin"
    digest = random_file(archive, 64 * MIB, seed=5)
    small = tmp_path / "small-disk"
    netns_ranks.mount_tmpfs(2, small, "50m")
    try:
        site = netns_ranks.write_site(tmp_path / "site.toml", data_dirs={2: small})
        done = cli("fanout", str(archive), "--site", str(site), "--sha256", digest, "--json")
        assert done.returncode == 1
        assert "rank2" in done.stderr and "no space left" in done.stderr
        states = [r["status"] for r in json.loads(done.stdout)["ranks"]]
        assert states == ["verified", "verified", "failed", "failed"]
        assert "not reached because rank rank2 failed" in done.stderr
        assert netns_ranks.rank_sees(2, small)
        assert not netns_ranks.rank_sees(2, small / "full.bin")
        assert not netns_ranks.rank_sees(2, partial_path(small / "full.bin"))
    finally:
        netns_ranks.unmount(2, small)


def test_bad_input_moves_nothing(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    archive = tmp_path / "bad.bin"
    digest = random_file(archive, 1 * MIB, seed=6)
    site = netns_ranks.write_site(tmp_path / "site.toml")

    wrong = cli("fanout", str(archive), "--site", str(site), "--sha256", "0" * 64)
    assert wrong.returncode == 1
    assert "rank0" in wrong.stderr and "nothing transferred" in wrong.stderr and digest in wrong.stderr

    malformed = cli("fanout", str(archive), "--site", str(site), "--sha256", digest,
                    "--image-id", "sha256:XYZ", "--import", "podman")
    assert malformed.returncode == 2 and "--image-id" in malformed.stderr

    short = cli("fanout", str(archive), "--site", str(site), "--sha256", digest[:40])
    assert short.returncode == 2 and "--sha256" in short.stderr

    unknown = tmp_path / "unknown.toml"
    unknown.write_text(site.read_text().replace('order = ["rank0", "rank1", "rank2", "rank3"]',
                                                'order = ["rank0", "rank1", "rank2", "rank4"]'))
    refused = cli("fanout", str(archive), "--site", str(unknown), "--sha256", digest)
    assert refused.returncode == 2 and "unknown rank 'rank4'" in refused.stderr

    for index in range(1, 4):
        assert not list(netns_ranks.data_dir(index).glob("*bad.bin*"))


def test_progress_is_reported_through_the_callback(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    archive = tmp_path / "progress.bin"
    digest = random_file(archive, 24 * MIB, seed=7)
    reports: list[tuple[int, int, str]] = []
    report = fanout(netns_ranks.site(), FanoutRequest(archive=str(archive), sha256=digest),
                    progress=lambda done, total, label: reports.append((done, total, label)))
    assert report["complete"]
    assert reports[-1][0] == reports[-1][1] == 3 * 24 * MIB
    assert {label for _, _, label in reports} >= {"rank1 verified", "rank2 verified", "rank3 verified"}
    assert all(done <= total for done, total, _ in reports)


def engine_temporaries() -> set[str]:
    """What an import keeps in /var/tmp while it runs: sparkflake's directory for it and
    containers/image's own (oci<N>/, storage<N>/, were podman or skopeo to put them there).
    The ranks' agents run with sshd's environment, so /var/tmp, not a TMPDIR of the test's."""
    return {path.name for pattern in ("sparkflake-engine-*", "oci[0-9]*", "storage[0-9]*")
            for path in Path("/var/tmp").glob(pattern)}


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_while_bytes_move_ends_the_fanout_there(netns_ranks: NetnsRanks, tmp_path: Path,
                                                              signal_name: str) -> None:
    # before: the chain's threads carried on after the interrupt, started relays again,
    # finished the copies and imported the image on every rank, then the command exited
    image = build_image(tmp_path, 48 * MIB, seed={"SIGINT": 9, "SIGTERM": 10}[signal_name])  # not on the ranks yet
    archive = Path(image["archive"])
    site = netns_ranks.write_site(tmp_path / "site.toml")
    tag = f"localhost/sfk-interrupt:{signal_name.lower()}"
    argv = [sys.executable, "-m", "sparkflake.cli", "fanout", str(archive), "--site", str(site),
            "--sha256", image["archive_sha256"], "--image-id", image["config"], "--import", "podman",
            "--tag", tag, "--json"]
    netns_ranks.shape("100mbit")
    temporaries_before = engine_temporaries()
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        arriving = partial_path(netns_ranks.data_dir(1) / archive.name)
        deadline = time.monotonic() + 120
        while not (arriving.exists() and arriving.stat().st_size > 2 * MIB):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.02)
        process.send_signal(getattr(signal, signal_name))
        began = time.monotonic()
        _, stderr = process.communicate(timeout=60)
        exited_after = time.monotonic() - began
        time.sleep(3)  # what carried on would have started its next relay or import by now
        left = netns_ranks.agents_running()
    finally:
        netns_ranks.shape(None)
    assert process.returncode == {"SIGINT": 130, "SIGTERM": 143}[signal_name], stderr
    assert "Traceback" not in stderr and exited_after < 30
    assert left == []
    # a rank starts its import once its copy is verified, rank 0 first: an agent ended with
    # the session removed what podman had unpacked (before, Python's default for SIGTERM ended it
    # where it stood and left oci<N>/ and storage<N>/ in /var/tmp)
    assert engine_temporaries() - temporaries_before == set()
    for index in (1, 2, 3):  # no rank holds the copy (an earlier test's file of that name may stand there)
        final = netns_ranks.data_dir(index) / archive.name
        assert not final.exists() or hashlib.sha256(final.read_bytes()).hexdigest() != image["archive_sha256"]
        assert podman(netns_ranks, index, "image", "exists", tag).returncode == 1
    # the partial copies are kept for the next run, which resumes and completes
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert all(rank["imported"] and rank["status"] == "verified" for rank in json.loads(again.stdout)["ranks"])
