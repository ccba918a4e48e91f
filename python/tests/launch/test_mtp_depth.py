"""checkpoint.mtp-depth: an embedded-MTP launch is judged against the target checkpoint's own
MTP head (its config.json), the one fact the runtime check's synthetic checkpoint cannot give."""

from __future__ import annotations

import json
import os

import pytest
from fixtures.launch import TARGET_FILES, bound_contract, site_env, write_env
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.check_result import FAIL, PASS
from sparkflake.core.errors import InputError
from sparkflake.launch.mtp_depth import CHECK_ID, check_mtp_depth, depth_problem, head_layers
from sparkflake.launch.plan import plan_launch


@given(layers=st.integers(1, 64), nested=st.booleans(), noise=st.dictionaries(st.sampled_from(["a", "b", "hidden_size"]),
                                                                          st.integers()))
def test_head_layers_reads_the_field_where_vllm_reads_it(layers, nested, noise):
    config = {**noise, "text_config": {**noise, "num_nextn_predict_layers": layers}} if nested else {
        **noise, "num_nextn_predict_layers": layers}
    assert head_layers(config, "config.json") == layers


@pytest.mark.parametrize("value", [0, -1, True, "1", 1.0, None])
def test_head_layers_refuses_what_is_not_a_layer_count(value):
    with pytest.raises(InputError, match=r"config.json: num_nextn_predict_layers is .*expected a whole number"):
        head_layers({"num_nextn_predict_layers": value}, "config.json")


def test_a_nested_text_config_without_the_field_names_its_path():
    # vLLM reads get_text_config(): a top-level field does not stand in for the nested one
    with pytest.raises(InputError, match=r"text_config.num_nextn_predict_layers is absent"):
        head_layers({"num_nextn_predict_layers": 1, "text_config": {}}, "config.json")


@given(depth=st.integers(1, 64), layers=st.integers(1, 64))
def test_depth_rule_is_vllms_divisibility_rule(depth, layers):
    # vllm/config/speculative.py:1604-1612 (0.33.0): refused only when depth > n_predict and not a multiple
    refused = depth_problem(depth, layers) is not None
    assert refused == (depth > layers and depth % layers != 0)


def _target(tmp_path, config: bytes | None):
    directory = tmp_path / "target"
    directory.mkdir(exist_ok=True)
    if config is not None:
        (directory / "config.json").write_bytes(config)
    return str(directory)


@pytest.mark.parametrize(("config", "status", "words"), [
    (b'{"num_nextn_predict_layers": 1}', PASS, "5 speculative tokens over a 1-layer MTP head"),
    (b'{"num_nextn_predict_layers": 5}', PASS, "over a 5-layer MTP head"),
    (b'{"num_nextn_predict_layers": 7}', PASS, "over a 7-layer MTP head"),
    (b'{"num_nextn_predict_layers": 2}', FAIL, "SPECULATIVE_TOKENS=5 over a 2-layer MTP head"),
    (b'{"architectures": ["Glm5NextForCausalLM"]}', FAIL, "num_nextn_predict_layers is absent"),
    (b'{"num_nextn_predict_layers": 0}', FAIL, "is 0, expected a whole number"),
    (b'{"num_nextn', FAIL, "not valid JSON"),
    (b"[]", FAIL, "expected a JSON object"),
    (None, FAIL, "config.json"),
])
def test_check_names_the_file_and_what_is_wrong(tmp_path, config, status, words):
    check = check_mtp_depth(_target(tmp_path, config), 5)
    assert check.id == CHECK_ID and check.status == status, check.detail
    assert words in check.detail and str(tmp_path / "target") in check.detail


def test_a_fifo_is_refused_not_read(tmp_path):
    directory = _target(tmp_path, None)
    os.mkfifo(os.path.join(directory, "config.json"))
    check = check_mtp_depth(directory, 5)
    assert check.status == FAIL and "FIFO" in check.detail


def _plan_checks(tmp_path, profile: str, target_config: bytes, **extra: str) -> dict[str, object]:
    contract = bound_contract(profile, tmp_path)
    (tmp_path / "target" / "config.json").write_bytes(target_config)
    # checkpoint.target now fails (the bytes changed since the fixture pinned them): not this test's subject
    env = write_env(tmp_path, site_env(tmp_path, draft=profile != "glm53-mtp5", **extra))
    plan = plan_launch(rank=0, env_file=env, contract=contract, engine=None, check_engine=False)
    return {check.id: check for check in plan.checks}


def test_an_mtp_plan_judges_the_head_and_a_dflash_plan_does_not(tmp_path):
    config = json.dumps({**json.loads(TARGET_FILES["config.json"]), "num_nextn_predict_layers": 2}).encode()
    mtp = _plan_checks(tmp_path / "mtp", "glm53-mtp5", config)
    assert mtp[CHECK_ID].status == FAIL and "SPECULATIVE_TOKENS=5 over a 2-layer MTP head" in mtp[CHECK_ID].detail
    shallow = _plan_checks(tmp_path / "shallow", "glm53-mtp5", config, SPECULATIVE_TOKENS="4")
    assert shallow[CHECK_ID].status == PASS
    dflash = _plan_checks(tmp_path / "dflash", "glm53-dflash7", config)
    assert CHECK_ID not in dflash
