"""Rolling back to an earlier image launches it with its own capabilities: the manifest
`runtime check` wrote for that image (beside its digests.json, or in the cache's store by
image ID), not the profile's current file, which describes the newer image. Real podman
(vfs, private root) holds both images; the launch is a dry run of the production path."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest
from fixtures.launch import (
    DRAFT_FILES,
    real_contract,
    write_bound_profile,
    write_checkpoint,
    write_target_checkpoint,
)
from fixtures.oci import free_port
from fixtures.podman import SANDBOX_ULIMITS, Podman, build_echo_image
from fixtures.podman import run as _run

from sparkflake.core.atomic_write import write_bytes_atomic
from sparkflake.launch.image_capabilities import keep_in_store, store_path
from sparkflake.runtime import capabilities as capability_file


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollback")
    podman = Podman(base)
    try:
        real = real_contract("glm53-dflash7")
        images = {}
        for generation in ("old", "new"):
            (base / generation).mkdir()
            labels = {**real.image_labels, "org.sparkflake.test.generation": generation}
            image_id = build_echo_image(base / generation, base / generation / "out", podman, labels)
            digests = json.loads((base / generation / "out" / "digests.json").read_text())
            images[generation] = dataclasses.replace(real.capabilities, config_digest=image_id,
                                                     manifest_digest=digests["manifest"])
        profile = write_bound_profile(base, "glm53-dflash7", write_target_checkpoint(base / "target"),
                                      write_checkpoint(base / "draft", DRAFT_FILES))
        # the profile's file describes the newer image; the old one's stays with the old build
        write_bytes_atomic(profile.parent / capability_file.FILE_NAME, capability_file.dumps(images["new"]))
        write_bytes_atomic(base / "old" / "out" / capability_file.FILE_NAME, capability_file.dumps(images["old"]))
        yield {"base": base, "podman": podman, "profile": profile, "old": images["old"], "new": images["new"]}
    finally:
        podman.cleanup()


def _launch(world, *extra: str) -> tuple[int, dict]:
    base = world["base"]
    settings = {"NODE_ADDRESS": "127.0.0.1", "MASTER_ADDRESS": "127.0.0.1", "TARGET_MODEL_PATH": str(base / "target"),
                "DRAFT_MODEL_PATH": str(base / "draft"), "CACHE_ROOT": str(base / "rank-cache"), "GPU_DEVICES": "none",
                "CONTAINER_ULIMITS": SANDBOX_ULIMITS, "API_PORT": str(free_port()), "MASTER_PORT": str(free_port()),
                "NCCL_NET": "Socket"}  # no HCA on a rehearsal host
    env_file = base / "runtime.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    completed = _run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "0", str(env_file), "--profile", str(world["profile"]),
         "--engine", "podman", "--dry-run", "--json", *extra],
        env=dict(os.environ, SPARKFLAKE_PODMAN_ARGS=" ".join(world["podman"].global_args)),
    )
    assert "Traceback" not in completed.stderr
    # seen once in a full run: nothing on stdout; say what the command did say
    assert completed.stdout.strip(), f"launch-rank printed nothing (exit {completed.returncode}): {completed.stderr[-2000:]}"
    report, _ = json.JSONDecoder().raw_decode(completed.stdout)
    return completed.returncode, {check["id"]: check for check in report["checks"]}


def test_the_newer_image_launches_with_the_profiles_capabilities(world, tmp_path):
    code, checks = _launch(world, "--image", world["new"].config_digest, "--cache", str(tmp_path / "empty"))
    assert code == 0, checks
    assert checks["image.capabilities"]["detail"].startswith(str(world["profile"].parent / capability_file.FILE_NAME))


def test_rolling_back_without_the_old_capabilities_is_refused(world, tmp_path):
    code, checks = _launch(world, "--image", world["old"].config_digest, "--cache", str(tmp_path / "empty"))
    assert code == 1
    assert checks["image.capabilities"]["status"] == "fail"
    assert f"written by `sparkflake runtime check` for image {world['new'].config_digest}" in \
        checks["image.capabilities"]["detail"]


def test_rolling_back_by_image_id_takes_the_old_images_capabilities_from_the_cache(world, tmp_path):
    cache = tmp_path / "cache"
    kept = keep_in_store(cache, world["old"])  # what `runtime check` of the old build left there
    assert kept == store_path(cache, world["old"].config_digest)
    code, checks = _launch(world, "--image", world["old"].config_digest, "--cache", str(cache))
    assert code == 0, checks
    assert checks["image.capabilities"]["status"] == "pass"
    assert checks["image.capabilities"]["detail"] == f"{kept} was written for {world['old'].config_digest}"


def test_rolling_back_by_digests_takes_the_capabilities_beside_them(world, tmp_path):
    old_out = world["base"] / "old" / "out"
    code, checks = _launch(world, "--digests", str(old_out / "digests.json"), "--cache", str(tmp_path / "empty"))
    assert code == 0, checks
    assert checks["image.capabilities"]["detail"] == (
        f"{old_out / capability_file.FILE_NAME} was written for {world['old'].config_digest}")


def test_capabilities_of_another_image_beside_the_digests_are_not_taken(world, tmp_path):
    """A capabilities file beside digests.json that was written for another image (a stale
    copy) is never taken for this one: the launch is refused as without it."""
    out = tmp_path / "out"
    out.mkdir()
    old_out = world["base"] / "old" / "out"
    (out / "digests.json").write_bytes((old_out / "digests.json").read_bytes())
    (out / capability_file.FILE_NAME).write_bytes(capability_file.dumps(world["new"]))
    code, checks = _launch(world, "--digests", str(out / "digests.json"), "--cache", str(tmp_path / "empty"))
    assert code == 1 and checks["image.capabilities"]["status"] == "fail"
