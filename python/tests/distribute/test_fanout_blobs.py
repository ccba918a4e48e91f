"""The blob route of ``sparkflake fanout``: an OCI layout to four ranks (network namespaces,
one sshd each, real OpenSSH, skopeo and podman), each rank receiving only the blobs its
image store lacks. Images are built by our own OCI engine from random layer trees."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.hostile_layers import ACROSS, hostile_layout
from fixtures.netns_ranks import NetnsRanks

from sparkflake.distribute.files import partial_path
from sparkflake.oci.reader import open_image
from sparkflake.oci.verify import config_diff_ids, image_prefix_keys

MIB = 1 << 20


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def build_layers(directory: Path, sizes: list[int], seeds: list[int], name: str = "img") -> dict:
    """An image of ``len(sizes)`` layers, layer i holding ``sizes[i]`` random bytes from
    ``seeds[i]``: two images that share a seed at position i share that layer's blob."""
    layers = []
    for position, (size, seed) in enumerate(zip(sizes, seeds, strict=True)):
        tree = directory / f"{name}-layer{position}" / "opt" / f"layer{position}"
        tree.mkdir(parents=True)
        (tree / "payload.bin").write_bytes(random.Random(seed).randbytes(size))
        layers.append({"tree": f"{name}-layer{position}"})
    spec = directory / f"{name}.json"
    spec.write_text(json.dumps({
        "platform": "linux/amd64", "compression": "none", "repository": "localhost/sfk-blobs",
        "tag": name, "layers": layers, "config": {"Entrypoint": ["/opt/layer0/payload.bin"]},
    }))
    out = directory / f"{name}-out"
    built = cli("image", "build", str(spec), "-o", str(out), "--no-cache",
                "--cache", str(out.parent / f"{out.name}-blob-store"))  # never the user's store
    assert built.returncode == 0, built.stderr
    digests = json.loads((out / "digests.json").read_text())
    digests["out"] = str(out)
    return digests


def podman_id(ranks: NetnsRanks, index: int, reference: str) -> str | None:
    engine_args = ranks.site().ranks[index].engine_args
    found = subprocess.run(["ip", "netns", "exec", ranks.namespace(index), "podman", *engine_args, "image",
                            "inspect", "--format", "{{.Id}}", reference], capture_output=True, text=True)
    return f"sha256:{found.stdout.strip()}" if found.returncode == 0 else None


def store_blob(ranks: NetnsRanks, index: int, digest: str) -> Path:
    return ranks.data_dir(index) / "image-store" / "blobs" / "sha256" / digest.removeprefix("sha256:")


def blobs_of(image: dict) -> set[str]:
    return {layer["digest"] for layer in image["layers"]} | {image["config"]}


@pytest.mark.slow
def test_first_install_by_blobs_equals_the_archive_route_then_a_rebuild_sends_one_layer(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    site = netns_ranks.write_site(tmp_path / "site.toml")
    first = build_layers(tmp_path, [3 * MIB, 2 * MIB, 1 * MIB, 64 << 10], [101, 102, 103, 104], "first")
    done = cli("fanout", first["out"], "--site", str(site), "--image-id", first["image_id"],
               "--import", "podman", "--tag", "localhost/sfk-blobs:route-blobs", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["complete"] and report["kind"] == "fanout-blobs" and report["image_id"] == first["image_id"]
    source_index = (Path(first["out"]) / "oci" / "index.json").read_bytes()
    for index, record in enumerate(report["ranks"]):
        assert record["schema"] == "sparkflake.distribution-evidence/v1"
        assert record["status"] == "verified" and record["imported"] and record["image_id"] == first["image_id"]
        if index:
            assert set(record["blobs_sent"]) == blobs_of(first) and record["blobs_reused"] == 0
            assert record["bytes_received"] == sum(layer["size"] for layer in first["layers"]) + first["config_size"]
            store = netns_ranks.data_dir(index) / "image-store"
            assert (store / "index.json").read_bytes() == source_index
            assert store_blob(netns_ranks, index, first["manifest"]).stat().st_size == first["manifest_size"]
        # rank 0 checked every layer's entries while the blobs moved; each import took its
        # records and read no layer (rank 0's own import neither), and every rank remembers each run
        assert record["layers_checked"] == 0
        assert len(list((netns_ranks.data_dir(index) / "verified-layer-prefixes").iterdir())) == 4
    assert report["ranks"][0]["source_entry_check"] | {"seconds": 0} == {
        "status": "ok", "layers_checked": 4, "runs_shared": 4, "message": None, "seconds": 0}
    # the archive route into the same engines: the same image ID on every rank
    archive = Path(first["out"]) / "docker-archive.tar"
    sha = subprocess.run(["sha256sum", str(archive)], capture_output=True, text=True, check=True).stdout.split()[0]
    by_archive = cli("fanout", str(archive), "--site", str(site), "--sha256", sha, "--image-id", first["image_id"],
                     "--import", "podman", "--tag", "localhost/sfk-blobs:route-archive", "--json")
    assert by_archive.returncode == 0, by_archive.stderr
    for index in range(4):
        assert podman_id(netns_ranks, index, "localhost/sfk-blobs:route-blobs") == first["image_id"]
        assert podman_id(netns_ranks, index, "localhost/sfk-blobs:route-archive") == first["image_id"]

    # A rebuild that changes layer 2 only: that blob and the new config travel, the
    # manifest and index are written from the plan, the engine reads only that layer.
    second = build_layers(tmp_path, [3 * MIB, 2 * MIB, 1 * MIB, 64 << 10], [101, 102, 203, 104], "second")
    changed = second["layers"][2]["digest"]
    assert {layer["digest"] for layer in second["layers"]} - {layer["digest"] for layer in first["layers"]} == {changed}
    delta = cli("fanout", second["out"], "--site", str(site), "--image-id", second["image_id"],
                "--import", "podman", "--tag", "localhost/sfk-blobs:route-blobs", "--json")
    assert delta.returncode == 0, delta.stderr
    delta_ranks = json.loads(delta.stdout)["ranks"]
    # rank 0 read layers 2 and 3 only (above the run 0-1 it knew); the imports none
    assert delta_ranks[0]["source_entry_check"]["layers_checked"] == 2
    assert delta_ranks[0]["source_entry_check"]["runs_shared"] == 4
    for index, record in enumerate(delta_ranks):
        assert record["image_id"] == second["image_id"] and record["layers_checked"] == 0
        assert podman_id(netns_ranks, index, "localhost/sfk-blobs:route-blobs") == second["image_id"]
        # layers 0 and 1 sit below the changed one: podman's store already had them
        assert set(record["layers_reused_by_engine"]) >= {second["layers"][0]["digest"], second["layers"][1]["digest"]}
        assert changed not in record["layers_reused_by_engine"]
        if index:
            assert sorted(record["blobs_sent"]) == sorted([changed, second["config"]])
            assert record["blobs_reused"] == 3
            assert record["bytes_received"] == second["layers"][2]["size"] + second["config_size"]
            index_json = json.loads((netns_ranks.data_dir(index) / "image-store" / "index.json").read_text())
            assert index_json["manifests"][0]["digest"] == second["manifest"]
        # the delta's runs 0-2 and 0-3 are new: two runs more
        assert len(list((netns_ranks.data_dir(index) / "verified-layer-prefixes").iterdir())) == 6

    # nothing left to send: a third run moves no blob, and still writes nothing wrong
    again = cli("fanout", second["out"], "--site", str(site), "--json")
    assert again.returncode == 0, again.stderr
    assert all(record["blobs_sent"] == [] and record["bytes_received"] == 0 for record in json.loads(again.stdout)["ranks"])


def test_a_flipped_byte_in_a_stored_blob_is_detected_and_the_blob_fetched_again(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    site = netns_ranks.write_site(tmp_path / "site.toml")
    image = build_layers(tmp_path, [4 * MIB, 1 * MIB], [301, 302], "flip")
    done = cli("fanout", image["out"], "--site", str(site), "--json")
    assert done.returncode == 0, done.stderr
    target = image["layers"][0]["digest"]
    stored = store_blob(netns_ranks, 2, target)
    time.sleep(0.02)  # past the kernel's timestamp tick: the write below gets a new ctime
    with open(stored, "r+b") as handle:
        handle.seek(2 * MIB)
        original = handle.read(1)
        handle.seek(2 * MIB)
        handle.write(bytes([original[0] ^ 0x01]))
    flipped = stored.read_bytes()

    verify = cli("fanout", image["out"], "--site", str(site), "--verify", "--json")
    assert verify.returncode == 1
    states = {record["rank"]: record["status"] for record in json.loads(verify.stdout)["ranks"]}
    assert states == {"rank0": "verified", "rank1": "verified", "rank2": "mismatch", "rank3": "verified"}
    assert json.loads(verify.stdout)["ranks"][2]["present_wrong"] == [target]
    assert stored.read_bytes() == flipped  # --verify is read-only

    fixed = cli("fanout", image["out"], "--site", str(site), "--json")
    assert fixed.returncode == 0, fixed.stderr
    ranks = json.loads(fixed.stdout)["ranks"]
    assert ranks[2]["blobs_sent"] == [target] and ranks[2]["blobs_reused"] == 2
    moved = Path(ranks[2]["moved_aside"])
    assert moved.name.startswith(target.removeprefix("sha256:") + ".mismatch-") and moved.read_bytes() == flipped
    assert ranks[1]["blobs_sent"] == [] and ranks[3]["blobs_sent"] == []
    assert "sha256:" + subprocess.run(["sha256sum", str(stored)], capture_output=True, text=True,
                                      check=True).stdout.split()[0] == target


def test_a_rank_missing_in_the_middle_is_named_and_the_others_are_done(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    image = build_layers(tmp_path, [2 * MIB, 1 * MIB], [401, 402], "middle")
    chain = netns_ranks.write_site(tmp_path / "chain.toml")
    ring = netns_ranks.write_site(tmp_path / "ring.toml", topology="ring")
    netns_ranks.stop_sshd(2)
    try:
        # a chain has one way to rank 3, through rank 2: it is named as the reason
        in_chain = cli("fanout", image["out"], "--site", str(chain), "--json")
        # a ring (as the four GB10s are cabled) reaches rank 3 the other way: rank 0 -> 3
        in_ring = cli("fanout", image["out"], "--site", str(ring), "--json")
    finally:
        netns_ranks.start_sshd(2)
    assert in_chain.returncode == 1 and "Traceback" not in in_chain.stderr
    assert "rank rank2" in in_chain.stderr and "Connection refused" in in_chain.stderr
    ranks = json.loads(in_chain.stdout)["ranks"]
    assert [record["status"] for record in ranks] == ["verified", "verified", "failed", "failed"]
    assert "not reached because rank rank2 failed" in ranks[3]["error"]
    assert set(ranks[1]["blobs_sent"]) == blobs_of(image) and ranks[1]["committed"]
    assert ranks[3]["blobs_sent"] == [] and not ranks[3]["committed"]

    assert in_ring.returncode == 1 and "rank rank2" in in_ring.stderr and "Connection refused" in in_ring.stderr
    ranks = json.loads(in_ring.stdout)["ranks"]
    assert [record["status"] for record in ranks] == ["verified", "verified", "failed", "verified"]
    assert ranks[3]["detour"] is True and ranks[3]["upstream"] == "rank0" and ranks[3]["committed"]
    assert set(ranks[3]["blobs_sent"]) == blobs_of(image) and ranks[1]["blobs_sent"] == []
    assert "rank3" not in in_ring.stderr
    # once rank 2 is back, the next run completes it and sends the others nothing
    again = cli("fanout", image["out"], "--site", str(ring), "--json")
    assert again.returncode == 0, again.stderr
    ranks = json.loads(again.stdout)["ranks"]
    assert set(ranks[2]["blobs_sent"]) == blobs_of(image)
    assert ranks[1]["blobs_sent"] == [] and ranks[3]["blobs_sent"] == []


def test_a_cut_link_resumes_at_the_blob_and_byte_it_reached(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    site = netns_ranks.write_site(tmp_path / "site.toml")
    image = build_layers(tmp_path, [12 * MIB, 12 * MIB, 12 * MIB], [501, 502, 503], "cut")
    second_blob = image["layers"][1]["digest"]
    total = sum(layer["size"] for layer in image["layers"]) + image["config_size"]
    netns_ranks.shape("60mbit")
    try:
        process = subprocess.Popen([sys.executable, "-m", "sparkflake.cli", "fanout", image["out"], "--site",
                                    str(site), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cut_at = netns_ranks.cut_while_arriving(process, partial_path(store_blob(netns_ranks, 2, second_blob)), 4 * MIB, link=1)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        netns_ranks.set_link(1, up=True)
        netns_ranks.shape(None)
    assert process.returncode == 0, stderr
    rank2 = json.loads(stdout)["ranks"][2]
    assert rank2["status"] == "verified" and rank2["attempts"] >= 2
    # the first blob was complete before the cut and is not sent again; the second resumes
    assert rank2["resumed_from"] and rank2["resumed_from"][0] >= cut_at - 2 * MIB
    assert rank2["bytes_received"] < total + 2 * MIB
    assert set(rank2["blobs_sent"]) == blobs_of(image)


def test_an_interrupt_while_blobs_move_commits_and_imports_nothing(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    # before: the chain carried on after the interrupt, committed each rank's layout and
    # imported the image, then the command exited 130
    site = netns_ranks.write_site(tmp_path / "site.toml")
    image = build_layers(tmp_path, [16 * MIB, 16 * MIB], [601, 602], "halt")
    tag = "localhost/sfk-blobs:interrupted"
    argv = [sys.executable, "-m", "sparkflake.cli", "fanout", image["out"], "--site", str(site), "--image-id",
            image["image_id"], "--import", "podman", "--tag", tag, "--json"]
    netns_ranks.shape("60mbit")
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        arriving = partial_path(store_blob(netns_ranks, 1, image["layers"][0]["digest"]))
        deadline = time.monotonic() + 120
        while not (arriving.exists() and arriving.stat().st_size > 2 * MIB):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        time.sleep(3)  # what carried on would have started its next relay, commit or import by now
        left = netns_ranks.agents_running()
    finally:
        netns_ranks.shape(None)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    assert left == []
    for index in (1, 2, 3):
        assert not (netns_ranks.data_dir(index) / "image-store" / "index.json").exists() or \
            image["manifest"] not in (netns_ranks.data_dir(index) / "image-store" / "index.json").read_text()
        assert podman_id(netns_ranks, index, tag) is None
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert all(rank["imported"] for rank in json.loads(again.stdout)["ranks"])


def test_a_hostile_layer_is_refused_by_rank_0s_check_and_by_every_import_without_its_records(
    netns_ranks: NetnsRanks, tmp_path: Path
) -> None:
    layout = hostile_layout(tmp_path / "hostile", ACROSS)  # layer 1 writes etc/cron/job through etc/cron -> /etc/cron.d
    manifest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
    config = json.loads((layout / "blobs" / "sha256" / manifest.split(":")[1]).read_text())["config"]["digest"]
    site = netns_ranks.write_site(tmp_path / "site.toml")
    tag = "localhost/hostile:blobs"
    done = cli("fanout", str(layout), "--site", str(site), "--image-id", config, "--import", "podman", "--tag", tag,
               "--json")
    assert done.returncode == 1, done.stderr
    ranks = json.loads(done.stdout)["ranks"]
    check = ranks[0]["source_entry_check"]
    assert check["status"] == "failed" and check["runs_shared"] == 0
    assert "[oci.layer-entries] layer 1" in check["message"] and "etc/cron/job" in check["message"]
    image = open_image(layout)
    hostile_run = image_prefix_keys(image.layer_refs, config_diff_ids(image.config) or [])[-1]
    for index, record in enumerate(ranks):
        # no record of rank 0's went anywhere: each import checked, and refused, for itself
        assert record["status"] == "failed" and not record["imported"], record
        assert "import failed: [oci.layer-entries] layer 1" in record["error"], record["error"]
        assert podman_id(netns_ranks, index, tag) is None
        # the run through the hostile layer is remembered nowhere
        assert not (netns_ranks.data_dir(index) / "verified-layer-prefixes" / f"{hostile_run}.json").exists()


def test_bad_input_moves_nothing(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    site = netns_ranks.write_site(tmp_path / "site.toml")
    image = build_layers(tmp_path, [1 * MIB], [601], "bad")
    missing = cli("fanout", str(tmp_path / "no-such-layout"), "--site", str(site))
    assert missing.returncode == 2 and "no-such-layout" in missing.stderr and "nothing transferred" in missing.stderr
    relative = cli("fanout", "relative/out", "--site", str(site))
    assert relative.returncode == 2 and "absolute path" in relative.stderr
    wrong_id = cli("fanout", image["out"], "--site", str(site), "--image-id", "sha256:" + "e" * 64)
    assert wrong_id.returncode == 1 and image["image_id"] in wrong_id.stderr and "nothing transferred" in wrong_id.stderr
    no_tag = cli("fanout", image["out"], "--site", str(site), "--import", "podman", "--image-id", image["image_id"])
    assert no_tag.returncode == 2 and "--tag" in no_tag.stderr
    docker = cli("fanout", image["out"], "--site", str(site), "--import", "docker", "--tag", "x")
    assert docker.returncode == 2 and "archive route" in docker.stderr
    assert "sparkflake export OUT --format docker-archive" in docker.stderr
    # a source blob that does not match its digest: rank 0 refuses before any byte moves
    layer = Path(image["out"]) / "oci" / "blobs" / "sha256" / image["layers"][0]["digest"].removeprefix("sha256:")
    os.chmod(layer, 0o644)
    with open(layer, "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00\x01\x02")
    corrupt = cli("fanout", image["out"], "--site", str(site))
    assert corrupt.returncode == 1 and "rank0" in corrupt.stderr and image["layers"][0]["digest"] in corrupt.stderr
    assert "Traceback" not in corrupt.stderr
    for index in range(1, 4):
        assert not store_blob(netns_ranks, index, image["layers"][0]["digest"]).exists()
        assert not partial_path(store_blob(netns_ranks, index, image["layers"][0]["digest"])).exists()
