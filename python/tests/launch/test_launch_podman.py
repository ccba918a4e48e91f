"""launch-rank with real podman (vfs, private root) and an image built by our OCI engine
whose entrypoint prints its argv and environment.

The container gets no GPU (GPU_DEVICES=none, a non-qualified setting) and ulimits this
sandbox allows; everything else is the production path: argv from the launcher, exec of
the engine, labels, env and mounts read back from podman.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

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


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("launch-podman")
    podman = Podman(base)
    try:
        image_id = build_echo_image(base, base / "out", podman, real_contract("glm53-dflash7").image_labels)

        # A profile directory whose contract lists the fixture checkpoints' identity files.
        target = write_target_checkpoint(base / "target")
        draft = write_checkpoint(base / "draft", DRAFT_FILES)
        profile_path = write_bound_profile(base, "glm53-dflash7", target, draft)
        yield {
            "base": base,
            "podman": podman,
            "image_id": image_id,
            "profile": str(profile_path),
        }
    finally:
        podman.cleanup()


def _env_file(world, name: str, **extra: str) -> Path:
    base = world["base"]
    settings = {
        "NODE_ADDRESS": "127.0.0.1",
        "MASTER_ADDRESS": "127.0.0.1",
        "TARGET_MODEL_PATH": str(base / "target"),
        "DRAFT_MODEL_PATH": str(base / "draft"),
        "CACHE_ROOT": str(base / f"cache-{name}"),
        "GPU_DEVICES": "none",
        "CONTAINER_ULIMITS": SANDBOX_ULIMITS,
        "API_PORT": str(free_port()),
        "MASTER_PORT": str(free_port()),
        **extra,
    }
    path = base / f"{name}.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def _launch(world, env_file: Path, *extra: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, SPARKFLAKE_PODMAN_ARGS=" ".join(world["podman"].global_args))
    return _run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "0", str(env_file), "--profile", world["profile"],
         "--engine", "podman", "--json", "--detach", *extra],
        env=environ,
    )


def _report(completed: subprocess.CompletedProcess) -> tuple[dict, str]:
    document, end = json.JSONDecoder().raw_decode(completed.stdout)
    return document, completed.stdout[end:].strip()


def _containers(world) -> list[str]:
    listed = world["podman"]("ps", "--all", "--format", "{{.Names}}")
    return listed.stdout.split()


def test_launch_creates_and_starts_the_container(world):
    podman = world["podman"]
    env_file = _env_file(world, "good")
    completed = _launch(world, env_file, "--image", world["image_id"])
    assert completed.returncode == 0, completed.stderr + completed.stdout
    report, container_id = _report(completed)
    assert re.fullmatch(r"[0-9a-f]{64}", container_id), completed.stdout
    assert all(check["status"] == "pass" for check in report["checks"])
    name = report["container"]["name"]
    assert podman("wait", name).stdout.strip() == "0"
    logs = podman("logs", name).stdout.splitlines()
    argv = [line[4:] for line in logs if line.startswith("ARG ")]
    env = dict(line[4:].split("=", 1) for line in logs if line.startswith("ENV "))
    assert argv == ["/argv-echo", *report["container"]["serve_args"]]
    assert argv[1] == "/models/target" and "--speculative-config" in argv
    for key, value in report["container"]["env"].items():
        assert env[key] == value
    inspected = json.loads(podman("container", "inspect", name).stdout)[0]
    assert inspected["Config"]["Labels"] == {**report["labels"]}
    assert inspected["Config"]["Labels"]["org.sparkflake.status"] == "implemented-unqualified-configuration"
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in inspected["Mounts"]}
    expected = {m["target"]: (m["source"], not m["read_only"]) for m in report["container"]["mounts"]}
    assert mounts == expected
    assert mounts["/models/target"] == (str(world["base"] / "target"), False)
    assert inspected["Image"].removeprefix("sha256:") == world["image_id"].removeprefix("sha256:")
    # The rank's state was created under its identity, and the root is now marked.
    root = world["base"] / "cache-good"
    assert (root / ".sparkflake-cache-root.json").is_file()
    identity_file = root / "glm53-dflash7" / "jit" / report["namespace"] / "identity.json"  # SparkCache is off
    assert json.loads(identity_file.read_text()) == report["identity"]
    podman("rm", "--force", name)


def test_mismatching_state_is_quarantined_and_the_rank_starts_cold(world):
    podman = world["podman"]
    env_file = _env_file(world, "quarantine")
    dry = _launch(world, env_file, "--image", world["image_id"], "--dry-run")
    report, _ = _report(dry)
    state = world["base"] / "cache-quarantine" / "glm53-dflash7" / "jit" / report["namespace"]
    state.mkdir(parents=True)
    (state / "identity.json").write_text(json.dumps({"schema": "other"}))
    (state / "kernel.bin").write_bytes(b"\x00compiled\xff")
    completed = _launch(world, env_file, "--image", world["image_id"])
    assert completed.returncode == 0, completed.stderr
    assert "quarantine" in completed.stderr
    slots = list((world["base"] / "cache-quarantine" / "quarantine").iterdir())
    assert len(slots) == 1
    assert (slots[0] / "state" / "kernel.bin").read_bytes() == b"\x00compiled\xff"
    assert json.loads((slots[0] / "record.json").read_text())["moved_from"] == str(state)
    assert sorted(p.name for p in state.iterdir()) == ["identity.json"]
    podman("rm", "--force", report["container"]["name"])


def _refused(world, completed, check_id, also=()):
    assert completed.returncode == 1, completed.stderr + completed.stdout
    report, trailing = _report(completed)
    failed = [c["id"] for c in report["checks"] if c["status"] != "pass"]
    assert failed == [check_id, *also], report["checks"]
    assert check_id in completed.stderr
    assert trailing == ""
    assert _containers(world) == []


def test_wrong_image_id_is_refused_and_nothing_starts(world):
    env_file = _env_file(world, "wrong-image")
    _refused(world, _launch(world, env_file, "--image", "sha256:" + "0" * 64), "image.id", ("image.labels",))


def test_tampered_checkpoint_is_refused_even_with_a_warm_hash_cache(world):
    base = world["base"]
    env_file = _env_file(world, "tamper")
    warm = _launch(world, env_file, "--image", world["image_id"], "--dry-run")
    assert warm.returncode == 0, warm.stderr
    weights = base / "draft" / "model.safetensors"
    original = weights.read_bytes()
    stat = weights.stat()
    try:
        weights.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with mtime restored
        _refused(world, _launch(world, env_file, "--image", world["image_id"]), "checkpoint.draft")
    finally:
        weights.write_bytes(original)


def test_cache_root_of_another_identity_is_refused(world):
    env_file = _env_file(world, "foreign")
    root = world["base"] / "cache-foreign"
    root.mkdir()
    marker = {"schema": "sparkflake.cache-root/v1", "profile": "glm53-mtp5", "physical_rank": 0,
              "node_address": "127.0.0.1"}
    (root / ".sparkflake-cache-root.json").write_text(json.dumps(marker))
    completed = _launch(world, env_file, "--image", world["image_id"])
    _refused(world, completed, "cache-root.dedicated")
    assert "belongs to another identity" in completed.stdout


def test_bad_input_exits_2_naming_file_and_line(world):
    env_file = _env_file(world, "bad", KV_CACHE_GIB="26GiB")
    completed = _launch(world, env_file, "--image", world["image_id"])
    assert completed.returncode == 2
    assert re.search(rf"{re.escape(str(env_file))}:\d+: KV_CACHE_GIB='26GiB'", completed.stderr), completed.stderr
    assert "Traceback" not in completed.stderr
    not_dir = _env_file(world, "notdir", TARGET_MODEL_PATH=str(world["base"] / "spec.json"))
    completed = _launch(world, not_dir, "--image", world["image_id"])
    assert completed.returncode == 2
    assert f"{not_dir}:3: TARGET_MODEL_PATH=" in completed.stderr and "is not a directory" in completed.stderr
    unreadable = _launch(world, world["base"] / "missing.env")
    assert unreadable.returncode == 2 and "cannot read an env file" in unreadable.stderr
    assert _containers(world) == []
