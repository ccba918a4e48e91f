"""`sparkflake checkpoint pin`: a site pins file the launch checks, bad input refused whole."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.launch import (
    DRAFT_FILES,
    PROFILES,
    TARGET_FILES,
    real_contract,
    site_env,
    write_checkpoint,
    write_env,
    write_target_checkpoint,
)
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.checkpoint_pins import (
    PINS_SCHEMA,
    CheckpointPins,
    PinnedCheckpoint,
    hash_pinned_file,
    parse_pins,
    pin_checkpoint,
    read_pins,
    resolve_in_checkpoint,
)
from sparkflake.launch.plan import plan_launch
from sparkflake.profile.model import CheckpointFile

PROFILE = str(PROFILES / "glm53-dflash7")
TARGET_PIN = real_contract("glm53-dflash7").target_pin


def _pin(directory: Path, role: str, pins: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "checkpoint", "pin", str(directory), "--role", role,
         "--profile", PROFILE, "-o", str(pins), *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )


def _site(tmp_path: Path) -> Path:
    write_target_checkpoint(tmp_path / "target")
    write_checkpoint(tmp_path / "draft", DRAFT_FILES)
    pins = tmp_path / "pins.json"
    for role in ("target", "draft"):
        completed = _pin(tmp_path / role, role, pins)
        assert completed.returncode == 0, completed.stderr
    return pins


def _checkpoint_checks(tmp_path: Path, pins: Path, *, rehash: bool = False):
    env = write_env(tmp_path, site_env(tmp_path, CHECKPOINT_PINS=str(pins)))
    plan = plan_launch(rank=0, env_file=env, contract=real_contract("glm53-dflash7"), engine=None,
                       check_engine=False, rehash=rehash)
    return plan, {check.id: check for check in plan.checks if check.id.startswith("checkpoint.")}


def test_pinned_checkpoints_pass_and_bind_the_runtime_identity(tmp_path):
    pins = _site(tmp_path)
    document = json.loads(pins.read_text())
    assert document["schema"] == PINS_SCHEMA and document["profile"] == "glm53-dflash7"
    target = {row["path"]: row for row in document["checkpoints"]["target"]["files"]}
    assert sorted(target) == sorted(TARGET_FILES)
    for name, content in TARGET_FILES.items():
        assert target[name] == {"path": name, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    draft = [row["path"] for row in document["checkpoints"]["draft"]["files"]]
    assert draft == ["config.json", "model.safetensors"]  # "*.safetensors" matched the weights
    plan, checks = _checkpoint_checks(tmp_path, pins)
    assert {check.status for check in checks.values()} == {"pass"}, checks
    assert "4 identity-bearing files match" in checks["checkpoint.target"].detail
    # the checkpoints' identity is the pinned files', and it is in the runtime identity
    from sparkflake.launch.identity import checkpoint_identity

    expected = checkpoint_identity([CheckpointFile(r["path"], r["sha256"], r["size"]) for r in target.values()])
    assert expected in json.dumps(plan.identity)


def test_a_file_changed_after_pinning_is_refused_by_name_and_only_it_is_rehashed(tmp_path):
    pins = _site(tmp_path)
    (tmp_path / "cache").mkdir()  # the verified-hash cache is kept in an existing cache root
    first, _ = _checkpoint_checks(tmp_path, pins)
    assert first.hash_cache_stats == {"hits": 0, "misses": 6}
    warm, _ = _checkpoint_checks(tmp_path, pins)
    assert warm.hash_cache_stats == {"hits": 6, "misses": 0}
    config = tmp_path / "target" / "tokenizer_config.json"
    config.write_bytes(config.read_bytes().replace(b"1048576", b"2097152"))  # same size
    changed, checks = _checkpoint_checks(tmp_path, pins)
    assert changed.hash_cache_stats == {"hits": 5, "misses": 1}
    detail = checks["checkpoint.target"].detail
    assert checks["checkpoint.target"].status == "fail"
    assert "tokenizer_config.json: sha256" in detail and "changed since it was pinned" in detail
    assert checks["checkpoint.draft"].status == "pass"


def test_a_shard_added_after_pinning_is_refused(tmp_path):
    pins = _site(tmp_path)
    (tmp_path / "draft" / "model-extra.safetensors").write_bytes(b"new weights")
    _, checks = _checkpoint_checks(tmp_path, pins)
    assert checks["checkpoint.draft"].status == "fail"
    assert "model-extra.safetensors: named by the profile's pin list but not pinned" in checks["checkpoint.draft"].detail


def test_without_pins_the_check_says_how_to_pin(tmp_path):
    write_target_checkpoint(tmp_path / "target")
    write_checkpoint(tmp_path / "draft", DRAFT_FILES)
    env = write_env(tmp_path, site_env(tmp_path))
    plan = plan_launch(rank=0, env_file=env, contract=real_contract("glm53-dflash7"), engine=None, check_engine=False)
    target = next(check for check in plan.checks if check.id == "checkpoint.target")
    assert target.status == "fail"
    assert "sparkflake checkpoint pin" in target.detail and "CHECKPOINT_PINS" in target.detail


def test_a_missing_pins_file_names_the_env_file_line(tmp_path):
    write_target_checkpoint(tmp_path / "target")
    write_checkpoint(tmp_path / "draft", DRAFT_FILES)
    env = write_env(tmp_path, site_env(tmp_path, CHECKPOINT_PINS=str(tmp_path / "absent.json")))
    with pytest.raises(InputError) as caught:
        plan_launch(rank=0, env_file=env, contract=real_contract("glm53-dflash7"), engine=None, check_engine=False)
    assert str(caught.value) == (
        f"{env}:6: CHECKPOINT_PINS: {tmp_path / 'absent.json'}: cannot read the checkpoint pins file: "
        f"No such file or directory; write it with `sparkflake checkpoint pin MODEL_DIR --role target -o "
        f"{tmp_path / 'absent.json'}` (and --role draft for the draft checkpoint), or copy the site's pins file there"
    )


def test_pins_for_another_profile_are_refused(tmp_path):
    pins = _site(tmp_path)
    document = json.loads(pins.read_text())
    document["profile"] = "glm53-mtp5"
    pins.write_text(json.dumps(document))
    with pytest.raises(InputError, match="pins checkpoints for profile glm53-mtp5, this launch is glm53-dflash7"):
        _checkpoint_checks(tmp_path, pins)
    completed = _pin(tmp_path / "target", "target", pins)
    assert completed.returncode == 2 and "use another -o FILE" in completed.stderr


def _refused_without_trace(tmp_path: Path, directory: Path, role: str, expected: str) -> None:
    """The pin is refused with ``expected`` in its message, and the pins file is untouched."""
    pins = tmp_path / "pins.json"
    before = pins.read_bytes()
    completed = _pin(directory, role, pins)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert expected in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr
    assert pins.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pins")) == ["pins.json"]


def test_bad_checkpoints_are_refused_and_nothing_is_recorded(tmp_path):
    _site(tmp_path)
    _refused_without_trace(tmp_path, tmp_path / "missing", "target", "missing: does not exist; expected a checkpoint directory")
    (tmp_path / "plain-file").write_bytes(b"x")
    _refused_without_trace(tmp_path, tmp_path / "plain-file", "target", "is not a directory")
    partial = tmp_path / "partial"
    write_checkpoint(partial, {"config.json": b"{}"})
    _refused_without_trace(tmp_path, partial, "target",
                           "the checkpoint has no tokenizer.json, tokenizer_config.json, model.safetensors.index.json "
                           "(named by the profile's checkpoints.target.pin)")
    _refused_without_trace(tmp_path, partial, "draft", "the checkpoint has no file matching *.safetensors")


def test_a_profile_without_the_role_or_a_pin_list_is_refused(tmp_path):
    write_target_checkpoint(tmp_path / "target")
    for profile, role, expected in (
        ("glm53-mtp5", "draft", "profile glm53-mtp5 has no draft checkpoint (it has target)"),
        ("fixture", "target", "checkpoints.target.pin: the profile names no identity-bearing files to pin"),
    ):
        completed = subprocess.run(
            [sys.executable, "-m", "sparkflake.cli", "checkpoint", "pin", str(tmp_path / "target"), "--role", role,
             "--profile", str(PROFILES / profile), "-o", str(tmp_path / "pins.json")],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert completed.returncode == 2 and expected in completed.stderr, completed.stderr
        assert not (tmp_path / "pins.json").exists()


def test_an_unwritable_pins_file_is_refused_before_anything_is_hashed(tmp_path):
    write_target_checkpoint(tmp_path / "target")
    refused = _pin(tmp_path / "target", "target", Path("/proc/sparkflake/pins.json"))
    assert refused.returncode == 2 and "/proc/sparkflake/pins.json: cannot write here" in refused.stderr
    made = _pin(tmp_path / "target", "target", tmp_path / "etc" / "sparkflake" / "pins.json")
    assert made.returncode == 0 and (tmp_path / "etc" / "sparkflake" / "pins.json").is_file(), made.stderr


def test_fifos_and_devices_are_refused_before_they_are_read(tmp_path):
    _site(tmp_path)
    fifo_dir = tmp_path / "fifo"
    write_checkpoint(fifo_dir, {k: v for k, v in TARGET_FILES.items() if k != "config.json"})
    os.mkfifo(fifo_dir / "config.json")
    _refused_without_trace(tmp_path, fifo_dir, "target", "config.json: is a FIFO; a pinned checkpoint file must be a regular file")
    zero_dir = tmp_path / "zero"
    write_checkpoint(zero_dir, {"config.json": b"{}"})
    os.symlink("/dev/zero", zero_dir / "model.safetensors")
    _refused_without_trace(tmp_path, zero_dir, "draft",
                           "model.safetensors: model.safetensors is a symlink to the absolute path /dev/zero")
    directory_dir = tmp_path / "dir"
    write_checkpoint(directory_dir, {"config.json": b"{}"})
    (directory_dir / "model.safetensors").mkdir()
    _refused_without_trace(tmp_path, directory_dir, "draft", "model.safetensors: is a directory")


def test_a_file_changing_while_it_is_hashed_is_refused(tmp_path):
    directory = tmp_path / "draft"
    write_checkpoint(directory, {"config.json": b"{}", "model.safetensors": bytes(3 << 20)})
    weights = directory / "model.safetensors"

    def grows_meanwhile(done: int, total: int, name: str) -> None:
        if done == 1 << 20:  # after the first chunk, another process appends
            with open(weights, "ab") as handle:
                handle.write(b"more")

    with pytest.raises(InputError, match="model.safetensors: changed while it was hashed; nothing recorded"):
        pin_checkpoint(str(directory), ("config.json", "*.safetensors"), "checkpoints.draft.pin", grows_meanwhile)

    def rewritten_meanwhile(done: int, total: int, name: str) -> None:
        if done == 1 << 20:  # same size, new bytes: the stat identity (ctime) still moves
            with open(weights, "r+b") as handle:
                handle.write(b"\xff")

    with pytest.raises(InputError, match="changed while it was hashed"):
        hash_pinned_file(str(directory), "model.safetensors", rewritten_meanwhile)
    seen = []
    entry = hash_pinned_file(str(directory), "model.safetensors", lambda done, total, name: seen.append((done, total, name)))
    assert entry.size == (3 << 20) + 4 and seen[-1] == (entry.size, entry.size, "model.safetensors")


def test_progress_is_shown_on_stderr_when_asked(tmp_path):
    pins = _site(tmp_path)
    completed = _pin(tmp_path / "draft", "draft", pins, "--progress")
    assert completed.returncode == 0, completed.stderr
    # stderr is a pipe, not a terminal: plain lines a log keeps, no bar
    assert re.search(r"^pin: 100% (\S+)/\1 pin model\.safetensors$", completed.stderr, re.M), completed.stderr
    assert "\r" not in completed.stderr
    assert "pinned 2 draft files" in completed.stdout


def test_pins_files_that_are_not_pins_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a character device, expected the checkpoint pins file"):
        read_pins("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO"):
        read_pins(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((1 << 20) + 1))
    with pytest.raises(InputError, match="larger than"):
        read_pins(big)
    with pytest.raises(InputError, match=r"\$.checkpoints.target.files\[0\].size: expected an integer"):
        parse_pins(json.dumps({"schema": PINS_SCHEMA, "profile": "p", "checkpoints": {"target": {
            "pinned_from": "/m", "files": [{"path": "a", "sha256": "0" * 64, "size": "1"}]}}}).encode(), "pins.json")
    with pytest.raises(InputError, match=r"pins.json: \$.checkpoints.teacher: unknown role"):
        parse_pins(json.dumps({"schema": PINS_SCHEMA, "profile": "p", "checkpoints": {"teacher": {}}}).encode(), "pins.json")


_identity_files = st.lists(
    st.builds(CheckpointFile, path=st.from_regex(r"[a-z0-9_-]{1,10}(\.[a-z]{1,5})?", fullmatch=True),
              sha256=st.from_regex(r"[0-9a-f]{64}", fullmatch=True), size=st.integers(0, 2**50)),
    max_size=4, unique_by=lambda entry: entry.path,
).map(tuple)


@given(
    profile=st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True),
    roles=st.dictionaries(st.sampled_from(["target", "draft"]),
                          st.builds(PinnedCheckpoint, pinned_from=st.text(max_size=30), files=_identity_files)),
)
def test_pins_round_trip(profile, roles):
    pins = CheckpointPins(profile, roles)
    assert parse_pins(json.dumps(pins.as_record()).encode(), "pins.json") == pins


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)


@given(st.one_of(
    _json,
    st.fixed_dictionaries({"schema": st.just(PINS_SCHEMA), "profile": _json, "checkpoints": _json}),
    st.fixed_dictionaries({"schema": st.just(PINS_SCHEMA), "profile": st.just("p"),
                           "checkpoints": st.dictionaries(st.sampled_from(["target", "draft", "x"]), _json)}),
))
def test_malformed_pins_are_input_errors_naming_the_file(document):
    try:
        parse_pins(json.dumps(document).encode(), "pins.json")
    except InputError as exc:
        assert str(exc).startswith("pins.json: ")


# ---- issue 28 class 4: the bytes pinned and verified are the bytes the container sees ----


def test_an_absolute_symlink_to_a_host_file_is_refused_by_pin_and_by_the_launch(tmp_path):
    pins = _site(tmp_path)
    host_file = tmp_path / "host-config.json"
    host_file.write_bytes(TARGET_FILES["config.json"])  # the same bytes: only the place differs
    hostile = tmp_path / "hostile"
    write_checkpoint(hostile, {k: v for k, v in TARGET_FILES.items() if k != "config.json"})
    os.symlink(host_file, hostile / "config.json")
    _refused_without_trace(tmp_path, hostile, "target",
                           f"config.json: config.json is a symlink to the absolute path {host_file}; the container "
                           f"mounts only {hostile}")
    # the launch of a pinned checkpoint whose file became such a symlink fails checkpoint.target
    (tmp_path / "target" / "config.json").unlink()
    os.symlink(host_file, tmp_path / "target" / "config.json")
    _, checks = _checkpoint_checks(tmp_path, pins)
    assert checks["checkpoint.target"].status == "fail"
    assert f"config.json is a symlink to the absolute path {host_file}" in checks["checkpoint.target"].detail
    assert checks["checkpoint.draft"].status == "pass"


def test_a_shard_symlinked_out_of_the_directory_fails_checkpoint_draft(tmp_path):
    pins = _site(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shard = tmp_path / "draft" / "model.safetensors"
    shard.rename(outside / "model.safetensors")
    os.symlink("../elsewhere/model.safetensors", shard)
    _, checks = _checkpoint_checks(tmp_path, pins)
    assert checks["checkpoint.draft"].status == "fail"
    assert ("model.safetensors: model.safetensors is a symlink to ../elsewhere/model.safetensors, outside the "
            "checkpoint directory") in checks["checkpoint.draft"].detail
    completed = _pin(tmp_path / "draft", "draft", tmp_path / "other-pins.json")
    assert completed.returncode == 2 and "outside the checkpoint directory" in completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "other-pins.json").exists()


def test_a_symlink_that_stays_inside_the_directory_is_followed(tmp_path):
    """The layout of a Hugging Face snapshot mounted whole: names linking to blobs inside."""
    draft = tmp_path / "draft"
    write_checkpoint(draft, {"config.json": DRAFT_FILES["config.json"]})
    write_checkpoint(draft / "blobs", {"aa": DRAFT_FILES["model.safetensors"]})
    os.symlink("blobs/../blobs/./aa", draft / "model.safetensors")
    pinned = pin_checkpoint(str(draft), ["config.json", "*.safetensors"], "checkpoints.draft.pin")
    shard = next(f for f in pinned.files if f.path == "model.safetensors")
    assert shard.sha256 == hashlib.sha256(DRAFT_FILES["model.safetensors"]).hexdigest()


_steps = st.lists(st.sampled_from(["..", ".", "a", "b", "l1", "l2", "missing"]), min_size=1, max_size=6)


@given(st.tuples(_steps, st.booleans()), st.tuples(_steps, st.booleans()), _steps)
def test_resolution_agrees_with_the_kernel_inside_and_refuses_every_way_out(link1, link2, path) -> None:
    """Two symlinks with drawn targets (relative or absolute) in a checkpoint ``root/ck``: a
    path resolved without refusal is what the kernel resolves, and lies inside; a refused
    path leads outside, or passes a symlink to an absolute path."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(os.path.realpath(scratch)) / "ck"
        (root / "a" / "b").mkdir(parents=True)
        (root / "b").mkdir()
        absolute_used = False
        for name, (steps, absolute) in (("l1", link1), ("a/l2", link2)):
            target = "/".join(steps)
            os.symlink(str(root / target) if absolute else target, root / name)
        relative = "/".join(path)
        try:
            resolved = resolve_in_checkpoint(str(root), relative)
        except InputError as refusal:
            message = str(refusal)
            absolute_used = "absolute path" in message
            real = os.path.realpath(root / relative)
            assert absolute_used or "loop" in message or not (real + "/").startswith(str(root) + "/"), message
            return
        if not os.path.exists(resolved):  # a missing step: the kernel finds nothing either
            assert not os.path.exists(root / relative)
            return
        assert (resolved + "/").startswith(str(root) + "/")
        assert os.path.realpath(root / relative) == resolved
