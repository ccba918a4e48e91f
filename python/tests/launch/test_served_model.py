"""checkpoint.target.model / checkpoint.draft.model: the real checkpoint on the rank (its
config.json and safetensors headers) judged against the architecture the profile serves;
bad input is an ``error`` (exit 2), another architecture a ``fail`` (exit 1), never a
traceback."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.launch import (
    DRAFT_FILES,
    PROFILES,
    TARGET_CONFIG,
    TARGET_SHARD,
    bound_contract,
    site_env,
    write_checkpoint,
    write_env,
    write_target_checkpoint,
)
from fixtures.safetensors_files import safetensors_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkflake.core.check_result import ERROR, FAIL, PASS
from sparkflake.core.errors import InputError
from sparkflake.launch.plan import plan_launch
from sparkflake.launch.served_model import check_served_model, read_served_model


def _target(tmp_path: Path) -> Path:
    directory = tmp_path / "target"
    write_target_checkpoint(directory)
    return directory


def test_the_fixture_target_is_read_whole(tmp_path):
    model = read_served_model(str(_target(tmp_path)))
    assert model.architectures == ("Glm5NextForCausalLM",) and model.model_type == "glm5_next"
    assert dict(model.dimensions) == {"hidden_size": 8, "num_hidden_layers": 4, "kv_lora_rank": 4, "q_lora_rank": 6,
                                      "num_nextn_predict_layers": 1}
    assert dict(model.layer_types) == {"indexed_attention": 1, "linear_attention": 3}
    assert model.quantization_config == {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    assert model.config == TARGET_CONFIG and model.shards == (TARGET_SHARD,)
    assert {dtype: (t.tensors, t.bytes) for dtype, t in model.dtype_totals.items()} == {
        "BF16": (1, 256), "F8_E4M3": (2, 16), "U8": (2, 64)}
    groups = {group.pattern: group for group in model.tensor_groups}
    experts = groups["model.layers.*.mlp.experts.*.down_proj.weight"]
    assert (experts.count, experts.dtypes, experts.shapes) == (2, ("U8",), ((8, 4),))
    record = model.as_record()
    assert json.loads(json.dumps(record)) == record  # the report carries it as JSON
    assert "Glm5NextForCausalLM (glm5_next), 5 tensors in 1 shards" in model.summary()


def test_a_nested_text_config_gives_the_dimensions(tmp_path):
    directory = _target(tmp_path)
    nested = {"architectures": ["Glm5NextForCausalLM"], "model_type": "glm5_next",
              "text_config": {"hidden_size": 4096, "kv_lora_rank": 512, "index_topk": 2048, "q_lora_rank": None,
                              "layer_types": ["indexed_attention"]}}
    (directory / "config.json").write_text(json.dumps(nested))
    model = read_served_model(str(directory))
    assert dict(model.dimensions) == {"hidden_size": 4096, "kv_lora_rank": 512, "index_topk": 2048, "q_lora_rank": None}
    assert dict(model.layer_types) == {"indexed_attention": 1}
    (directory / "config.json").write_text(json.dumps({**nested, "text_config": {"hidden_size": "4096"}}))
    with pytest.raises(InputError, match=r"config.json: \$.text_config.hidden_size: expected a non-negative integer"):
        read_served_model(str(directory))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**65) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_config_values = st.fixed_dictionaries({}, optional={
    "architectures": st.one_of(_json, st.just(["Glm5NextForCausalLM"])),
    "text_config": st.one_of(_json, st.dictionaries(st.sampled_from(["hidden_size", "layer_types", "head_dim"]), _json)),
    "hidden_size": _json, "kv_lora_rank": _json, "layer_types": _json, "quantization_config": _json,
    "model_type": _json, "torch_dtype": _json,
})


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150)
@given(config=st.one_of(_json, _config_values), index=st.one_of(st.none(), _json, st.fixed_dictionaries(
    {"weight_map": st.dictionaries(st.text(max_size=6), st.one_of(_json, st.sampled_from([TARGET_SHARD, "x/../y"])))})))
def test_any_config_or_index_is_read_or_refused_as_bad_input(tmp_path, config, index):
    directory = _target(tmp_path)
    (directory / "config.json").write_text(json.dumps(config))
    if index is not None:
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    try:
        model = read_served_model(str(directory))
    except InputError as refused:
        assert str(refused).startswith(str(directory)), str(refused)
    else:
        assert model.architectures and all(isinstance(value, (int, type(None))) for value in model.dimensions.values())


def test_another_architecture_fails_naming_both(tmp_path):
    directory = _target(tmp_path)
    (directory / "config.json").write_text(json.dumps({**TARGET_CONFIG, "architectures": ["GlmMoeDsaForCausalLM",
                                                                                         "Glm5NextForCausalLM"]}))
    check, model = check_served_model("checkpoint.target.model", str(directory), "Glm5NextForCausalLM")
    assert check.status == FAIL and model is not None
    assert "vLLM would serve GlmMoeDsaForCausalLM, the profile serves Glm5NextForCausalLM" in check.detail
    assert "checkpoints.target.architecture" in check.detail
    assert check_served_model("checkpoint.target.model", str(directory), None)[0].status == PASS


def _corrupt_shard(directory: Path, content: bytes) -> None:
    (directory / TARGET_SHARD).write_bytes(content)


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda d: _corrupt_shard(d, struct.pack("<Q", 2**62) + b"{}"),
     f"{TARGET_SHARD}: header length {2**62} exceeds safetensors' bound of 100000000 bytes; not read"),
    (lambda d: _corrupt_shard(d, struct.pack("<Q", 6) + b'{"a":1'), f"{TARGET_SHARD}: the safetensors header is not JSON"),
    (lambda d: _corrupt_shard(d, b"\x01\x02"), f"{TARGET_SHARD}: 2 bytes, shorter than the 8-byte header length"),
    (lambda d: _corrupt_shard(d, safetensors_bytes([("lm_head.weight", "BF16", (16, 8))])),
     "$.weight_map['model.layers.0.mlp.experts.0.down_proj.weight'] names " + TARGET_SHARD + ", whose header has no"),
    (lambda d: (d / TARGET_SHARD).unlink(), f"{TARGET_SHARD}: cannot read a safetensors file: No such file"),
    (lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": {"x": "../x.safetensors"}}'),
     "'../x.safetensors' is not a relative path inside the checkpoint"),
    (lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": []}'),
     "model.safetensors.index.json: $.weight_map: expected an object"),
    (lambda d: ((d / "model.safetensors.index.json").unlink(), (d / TARGET_SHARD).unlink()),
     "no model.safetensors.index.json and no *.safetensors"),
    (lambda d: (d / "config.json").write_text('{"architectures": []}'), "config.json: $.architectures: expected a non-empty"),
    (lambda d: (d / "config.json").write_text('{"architectures": ["A"], "quantization_config": "nvfp4"}'),
     "config.json: $.quantization_config: expected an object"),
    (lambda d: ((d / "config.json").unlink(), os.mkfifo(d / "config.json")), "config.json: is a FIFO, expected a model config"),
    (lambda d: (d / "config.json").write_bytes(b" " * (5 << 20)), "config.json: a model config is larger than"),
])
def test_bad_checkpoints_are_errors_naming_the_file(tmp_path, damage, expected):
    directory = _target(tmp_path)
    damage(directory)
    check, model = check_served_model("checkpoint.target.model", str(directory), "Glm5NextForCausalLM")
    assert check.status == ERROR and model is None
    assert check.detail.startswith(str(directory)) and expected in check.detail, check.detail


def test_a_tensor_in_two_shards_is_refused(tmp_path):
    directory = tmp_path / "draft"
    write_checkpoint(directory, DRAFT_FILES)
    (directory / "copy.safetensors").write_bytes(DRAFT_FILES["model.safetensors"])
    check, _ = check_served_model("checkpoint.draft.model", str(directory), "DFlash2DraftModel")
    assert check.status == ERROR and "is in both copy.safetensors and model.safetensors" in check.detail


def test_symlinks_may_stay_inside_the_directory_but_not_leave_it(tmp_path):
    directory = _target(tmp_path)
    (directory / "weights").mkdir()
    os.rename(directory / TARGET_SHARD, directory / "weights" / TARGET_SHARD)
    os.symlink(f"weights/{TARGET_SHARD}", directory / TARGET_SHARD)
    assert check_served_model("checkpoint.target.model", str(directory), "Glm5NextForCausalLM")[0].status == PASS
    outside = tmp_path / "elsewhere.safetensors"
    os.rename(directory / "weights" / TARGET_SHARD, outside)
    os.unlink(directory / TARGET_SHARD)
    os.symlink(outside, directory / TARGET_SHARD)
    check, _ = check_served_model("checkpoint.target.model", str(directory), "Glm5NextForCausalLM")
    assert check.status == ERROR
    assert f"resolves to {outside}, outside the checkpoint directory; the container mounts only" in check.detail


def test_the_plan_judges_the_target_and_the_draft_it_will_mount(tmp_path):
    contract = bound_contract("glm53-dflash7", tmp_path)
    env = write_env(tmp_path, site_env(tmp_path, API_PORT="18471", MASTER_PORT="18472"))
    (tmp_path / "draft" / "config.json").write_text('{"architectures": ["DFlashDraftModel"]}')
    plan = plan_launch(rank=0, env_file=env, contract=contract, engine=None, check_engine=False)
    checks = {check.id: check for check in plan.checks}
    assert checks["checkpoint.target.model"].status == PASS
    assert checks["checkpoint.draft.model"].status == FAIL
    assert "the profile serves DFlash2DraftModel (checkpoints.draft.architecture)" in checks["checkpoint.draft.model"].detail
    assert set(plan.served_models) == {"target", "draft"}
    # an MTP launch mounts no draft: only the target is read
    mtp = plan_launch(rank=0, env_file=write_env(tmp_path, site_env(tmp_path, draft=False, API_PORT="18471",
                                                                     MASTER_PORT="18472"), "mtp.env"),
                      contract=bound_contract("glm53-mtp5", tmp_path / "mtp"), engine=None, check_engine=False)
    assert "checkpoint.draft.model" not in {check.id for check in mtp.checks}


def _launch_rank(tmp_path: Path) -> subprocess.CompletedProcess:
    env = write_env(tmp_path, site_env(tmp_path, API_PORT="18473", MASTER_PORT="18474"))
    return subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "0", str(env), "--profile",
         str(PROFILES / "glm53-dflash7"), "--dry-run", "--json", "--image", "sha256:" + "0" * 64],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "SPARKFLAKE_PODMAN_ARGS": f"--storage-driver=vfs --root={tmp_path}/podman --runroot={tmp_path}/run"},
    )


def test_launch_rank_dry_run_exits_2_on_a_huge_or_malformed_header_and_1_on_another_architecture(tmp_path):
    write_target_checkpoint(tmp_path / "target")
    write_checkpoint(tmp_path / "draft", DRAFT_FILES)
    (tmp_path / "target" / TARGET_SHARD).write_bytes(struct.pack("<Q", 2**64 - 1) + b"{}")
    damaged = _launch_rank(tmp_path)
    assert damaged.returncode == 2 and "Traceback" not in damaged.stderr, damaged.stderr
    checks = {check["id"]: check for check in json.loads(damaged.stdout)["checks"]}
    assert checks["checkpoint.target.model"]["status"] == "error"
    assert f"header length {2**64 - 1} exceeds" in checks["checkpoint.target.model"]["detail"]
    assert "checkpoint.target.model" in damaged.stderr  # named in the refusal
    (tmp_path / "target" / TARGET_SHARD).write_bytes(struct.pack("<Q", 8) + b'{"x":{}}')
    malformed = _launch_rank(tmp_path)
    assert malformed.returncode == 2 and "Traceback" not in malformed.stderr, malformed.stderr
    checks = {check["id"]: check for check in json.loads(malformed.stdout)["checks"]}
    assert 'header["x"]: missing dtype, shape, data_offsets' in checks["checkpoint.target.model"]["detail"]
    write_target_checkpoint(tmp_path / "target")
    (tmp_path / "draft" / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    other = _launch_rank(tmp_path)
    assert other.returncode == 1 and "Traceback" not in other.stderr, other.stderr
    report = json.loads(other.stdout)
    checks = {check["id"]: check for check in report["checks"]}
    assert checks["checkpoint.target.model"]["status"] == "pass"
    assert checks["checkpoint.draft.model"]["status"] == "fail"
    assert report["served_models"]["target"]["quantization_config"] == TARGET_CONFIG["quantization_config"]


@pytest.mark.parametrize("shard", ["a\x00.safetensors", "\ud800.safetensors"])
def test_an_index_naming_no_file_name_is_bad_input(tmp_path, shard):
    """A shard name with a NUL byte or a lone surrogate reached os.path.realpath, which
    raised ValueError / UnicodeEncodeError past the check (a traceback in launch-rank)."""
    directory = _target(tmp_path)
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": shard}}))
    check, model = check_served_model("checkpoint.target.model", str(directory), None)
    assert check.status == ERROR and model is None
    assert check.detail.startswith(f"{directory}: {shard!r}: not a file name"), check.detail


def test_launch_rank_prints_what_a_checkpoint_says_even_when_it_is_no_text(tmp_path):
    """The human report quotes the checkpoint's model_type; a lone surrogate there raised
    UnicodeEncodeError when written to stdout. It is written as its escape."""
    write_target_checkpoint(tmp_path / "target")
    write_checkpoint(tmp_path / "draft", DRAFT_FILES)
    config = json.loads((tmp_path / "target" / "config.json").read_text())
    (tmp_path / "target" / "config.json").write_text(json.dumps({**config, "model_type": "glm\ud800"}))
    env = write_env(tmp_path, site_env(tmp_path, API_PORT="18475", MASTER_PORT="18476"))
    shown = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "launch-rank", "0", str(env), "--profile",
         str(PROFILES / "glm53-dflash7"), "--dry-run", "--image", "sha256:" + "0" * 64],
        capture_output=True, timeout=300, check=False,
        env={**os.environ, "SPARKFLAKE_PODMAN_ARGS": f"--storage-driver=vfs --root={tmp_path}/podman --runroot={tmp_path}/run"},
    )
    assert b"Traceback" not in shown.stderr, shown.stderr
    assert b"glm\\ud800" in shown.stdout, shown.stdout
