"""The engine-start part of the judge on the host (runtime.engine_verdicts via judge_result),
without an interpreter: the verdict shapes are the ones in_image/probe_engine.py writes.
The same judgements on the real image's own verdicts are in test_runtime_real.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.runtime import capabilities as capability_file
from sparkflake.runtime.capabilities import (
    Capabilities,
    KernelSelection,
    LayerChoice,
    selecting_settings,
)
from sparkflake.runtime.check_report import Case, CheckReport
from sparkflake.runtime.judge import judge_result

GOOD = {"parser": {"ok": True}, "engine_args": {"ok": True}, "configs": {}}
SPEC = json.dumps({"method": "dflash", "model": "/models/draft", "num_speculative_tokens": 7})
ARGS = ("/models/target", "--block-size", "128", "--kv-cache-dtype", "fp8", "--speculative-config", SPEC)
B12X_MLA = ("Selected backend AttentionBackendEnum.B12X is not valid for this configuration. Reason: "
            "['head_size not supported', 'MLA not supported', 'sparse not supported']")
MTP_B12X = ("moe_backend='b12x' is not supported for unquantized MoE. Expected one of ['triton', "
            "'batched_triton', 'flashinfer_trtllm', 'flashinfer_cutlass', 'aiter'].")


def _engine(**steps):
    engine = {"engine_config": {"ok": True, "architecture": "Glm5NextForCausalLM", "cache_dtype": "fp8",
                                "block_size": 128},
              "target.sparse_mla_attention": {"ok": True, "backend": "FLASHINFER_MLA_SPARSE_SM120"},
              "target.moe": {"ok": True, "backend": "B12X", "experts": "B12xExperts"},
              "target.linear": {"ok": True, "kernel": "B12xNvFp4LinearKernel"},
              "draft.vllm_config": {"ok": True},
              "draft.attention": {"ok": True, "backend": "TRITON_ATTN"},
              "block_size": {"ok": True, "requested": 128, "block_size": 128, "backends": ["FLASHINFER_MLA_SPARSE_SM120"]},
              "memory": {"ok": True, "requested_gib": 99.8, "free_at_start_gib": 101.3, "kv_cache_gib": 26.0}}
    engine.update(steps)
    return engine


TOOLCHAINS = {"flashinfer": {"ok": True, "nvcc": "/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc"},
              "triton": {"ok": True, "c_compiler": "/usr/bin/gcc"}, "b12x": {"ok": True}}


def _judge(case, engine, toolchains=TOOLCHAINS):
    report = CheckReport()
    result = {"imports": {"vllm": {"ok": True}}, "versions": {}, "capabilities": {"kernel_toolchains": toolchains},
              "env_reads": [],
              "cases": [{"name": case.name, **GOOD, "engine": engine}]}
    selections = judge_result(report, result, [case], {}, {}, engine_judged=True)
    return report, selections


def _failed(report, check_id):
    return [check.detail for check in report.checks if check.status == "fail" and check.id == check_id]


def test_an_accepted_start_passes_and_records_each_layer_choice():
    case = Case("good", ARGS, {})
    report, (selection,) = _judge(case, _engine())
    assert report.exit_code == 0, [c for c in report.checks if c.status == "fail"]
    assert selection.layers["target.sparse_mla_attention"] == LayerChoice("FLASHINFER_MLA_SPARSE_SM120", None)
    assert selection.layers["draft.attention"].choice == "TRITON_ATTN"
    assert selection.block_size == 128
    assert selection.settings["speculative.method"] == "dflash"
    assert "draft.vllm_config" not in selection.layers


def test_each_refusal_fails_naming_the_layer_the_setting_and_vllms_reason():
    case = Case("refused", ("/models/target", "--attention-backend", "B12X", "--block-size", "64"), {})
    engine = _engine(**{
        "target.sparse_mla_attention": {"ok": False, "error": f"ValueError: {B12X_MLA}"},
        "mtp.moe": {"ok": False, "error": f"ValueError: {MTP_B12X}"},
        "block_size": {"ok": True, "requested": 64, "block_size": 256, "backends": ["TRITON_MLA"]},
        "memory": {"ok": False, "error": "ValueError: Free memory on device cuda:0 (101.3/121.69 GiB) on startup "
                                         "is less than desired GPU memory utilization (0.86, 104.65 GiB)."},
    })
    report, (selection,) = _judge(case, engine)
    assert report.exit_code == 1
    (attention, moe) = _failed(report, "runtime.layer-kernel")
    assert "target attention (sparse MLA) (--attention-backend)" in attention and "MLA not supported" in attention
    assert "MTP head MoE" in moe and "--moe-backend" in moe and "not supported for unquantized MoE" in moe
    (block,) = _failed(report, "runtime.block-size")
    assert "--block-size 64" in block and "at 256" in block and "KV_BLOCK_SIZE=256" in block
    (memory,) = _failed(report, "runtime.memory")
    assert "less than desired GPU memory utilization (0.86" in memory
    assert set(selection.refusals) == {"target.sparse_mla_attention", "mtp.moe", "memory"}


def test_a_selected_kernel_the_image_cannot_build_fails_naming_what_is_missing():
    toolchains = {**TOOLCHAINS, "triton": {"ok": False, "error": "Triton's C compiler 'gcc' is not in the image"},
                  "flashinfer": {"ok": False, "error": "no precompiled FlashInfer kernels (flashinfer-cubin, "
                                 "flashinfer-jit-cache) and its JIT lacks a host C++ compiler (c++) for nvcc"}}
    report, _ = _judge(Case("good", ARGS, {}), _engine(), toolchains)
    failed = _failed(report, "runtime.kernel-loadable")
    assert any("target attention (sparse MLA): vLLM selects FLASHINFER_MLA_SPARSE_SM120, whose flashinfer kernels "
               "cannot be built in the image: " in detail and "host C++ compiler" in detail for detail in failed)
    assert any("DFlash draft attention" in detail and "C compiler 'gcc'" in detail for detail in failed)
    # vLLM's own compiled kernels and b12x's in-process compiler are not refused
    assert not any("B12xExperts" in detail or "target MoE" in detail for detail in failed)
    report, _ = _judge(Case("good", ARGS, {}), _engine(), {})
    assert any("did not report how flashinfer kernels are built" in d for d in _failed(report, "runtime.kernel-loadable"))


def test_a_layer_the_judge_could_not_take_to_vllms_verdict_is_unproven_never_accepted():
    # as the real image gave it: FusedMoEParallelConfig.make asks for the TP process group,
    # which the judge does not initialize
    engine = _engine(**{"target.moe": {"ok": False, "error": "AssertionError: tensor model parallel group is "
                                                             "not initialized"}})
    report, (selection,) = _judge(Case("moe", ARGS, {}), engine)
    (unproven,) = _failed(report, "runtime.layer-unproven")
    assert "target MoE (--moe-backend): unproven: the judge did not reach vLLM's verdict: AssertionError" in unproven
    assert not _failed(report, "runtime.layer-kernel")
    assert selection.layers["target.moe"] == LayerChoice(None, None, "AssertionError: tensor model parallel group "
                                                                     "is not initialized")
    assert selection.refusals == {}  # launch-rank refuses on vLLM's refusals only


def test_a_start_vllm_refuses_outright_and_an_unjudged_case_fail():
    case = Case("bad", ARGS, {})
    report, (selection,) = _judge(case, {"engine_config": {"ok": False, "error": "ValueError: no draft"}})
    assert _failed(report, "runtime.engine-config") == ["bad: vLLM's create_engine_config refuses it: "
                                                        "ValueError: no draft"]
    assert selection.refusals == {"engine_config": "ValueError: no draft"}
    report, selections = _judge(case, None)
    assert selections == () and _failed(report, "runtime.engine-config")


def test_without_a_device_the_engine_is_not_judged():
    report = CheckReport()
    result = {"imports": {"vllm": {"ok": True}}, "versions": {}, "capabilities": {}, "env_reads": [],
              "cases": [{"name": "x", **GOOD}]}
    assert judge_result(report, result, [Case("x", ARGS, {})], {}, {}) == ()
    assert "runtime.engine-config" not in {check.id for check in report.checks}


def test_selecting_settings_ignore_a_malformed_speculative_config():
    settings_ = selecting_settings(("/m", "--speculative-config", "[1]", "--moe-backend"))
    assert settings_["speculative.method"] == "" and settings_["moe-backend"] == ""


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
CHOICE = st.one_of(st.builds(LayerChoice, TEXT, st.none()), st.builds(LayerChoice, st.none(), TEXT),
                   st.builds(LayerChoice, st.none(), st.none(), TEXT))
SELECTION = st.builds(KernelSelection, st.dictionaries(TEXT, TEXT, max_size=4),
                      st.dictionaries(TEXT, CHOICE, max_size=4), st.one_of(st.none(), st.integers(0, 1 << 20)))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.lists(SELECTION, max_size=4))
def test_kernel_selections_round_trip_through_the_capability_file(selections):
    caps = Capabilities(None, "sha256:" + "0" * 64, "linux/arm64", {}, (), (), (), (), (), (), (), (), (), None, {},
                        None, False, (), (), "", tuple(selections))
    parsed = capability_file.parse(json.loads(capability_file.dumps(caps)), "caps.json")
    unique = {json.dumps(s.as_record(), sort_keys=True) for s in selections}
    assert {json.dumps(s.as_record(), sort_keys=True) for s in parsed.kernel_selections} == unique
    for selection in selections:
        found = parsed.selection_for(selection.settings)
        assert found is not None and found.settings == selection.settings


def test_a_malformed_kernel_selection_is_named():
    document = json.loads(capability_file.dumps(Capabilities(
        None, "sha256:" + "0" * 64, "linux/arm64", {}, (), (), (), (), (), (), (), (), (), None, {}, None, False, (),
        (), "")))
    document["kernel_selections"] = [{"settings": {}, "block_size": None, "layers": {"target.moe": {"pick": 1}}}]
    with pytest.raises(InputError, match=r"caps.json: kernel_selections\[0\].layers.target.moe: expected"):
        capability_file.parse(document, "caps.json")
    document["kernel_selections"] = [{"settings": {"a": 1}, "block_size": None, "layers": {}}]
    with pytest.raises(InputError, match=r"kernel_selections\[0\].settings: expected an object of strings"):
        capability_file.parse(document, "caps.json")


def test_flashinfer_sparse_mla_without_a_kernel_for_the_shape_is_refused_at_the_attention_setting():
    """FLASHINFER_MLA_SPARSE_SM120 selected, but FlashInfer's SM120 decode has no kernel for
    the heads per rank and top-k (probe_engine._sparse_mla_sm120): the launch setting that
    caused it is named, and the kernel is not recorded as chosen."""
    why = ("FlashInfer's SM120 sparse MLA decode (GLM-5.3 NoPE 512+0) has no kernel for 200 heads per rank "
           "and top-k 2048: _DecodeDispatchEnvelope(num_heads<=128, topk>=1)")
    report, selections = _judge(Case("shape", ARGS, {}), _engine(**{
        "target.sparse_mla_kernel": {"ok": False, "error": f"ValueError: {why}"}}))
    failed = [check.detail for check in report.checks if check.id == "runtime.layer-kernel" and check.status == "fail"]
    assert failed == [f"shape: target sparse-MLA decode kernel (FlashInfer SM120) (--attention-backend): vLLM "
                      f"refuses: ValueError: {why}"]
    assert selections[0].refusals == {"target.sparse_mla_kernel": f"ValueError: {why}"}
    passed = {check.detail for check in report.checks if check.id == "runtime.layer-kernel" and check.status == "pass"}
    assert "shape: target attention (sparse MLA): vLLM selects FLASHINFER_MLA_SPARSE_SM120" in passed


# What in_image/probe_meta_model.py records for the default launch (the real glm53-dflash7
# image's record, shortened): the constructed layers by kind, the KV cache, the weights
def _meta(**changes):
    meta = {"ok": True, "seconds": 61.2, "parallel": {"world": 4, "tp": 4, "tp_rank": 0, "pp": 1, "dcp": 1},
            "target": {"class": "Glm5NextForCausalLM", "layers": [
                {"kind": "mla_attention", "class": "MLAAttention", "backend": "FLASHINFER_MLA_SPARSE_SM120",
                 "use_sparse": True, "count": 16, "first": "model.layers.3.self_attn.mla_attn"},
                {"kind": "moe", "class": "RoutedExperts", "method": "ModelOptNvFp4FusedMoE", "backend": "B12X",
                 "experts": "B12xExperts", "count": 46, "first": "model.layers.1.mlp.experts"},
                {"kind": "linear", "class": "RowParallelLinear", "method": "ModelOptNvFp4LinearMethod",
                 "kernel": "B12xNvFp4LinearKernel", "count": 92, "first": "model.layers.0.mlp.down_proj"},
                {"kind": "linear", "class": "ParallelLMHead", "method": "UnquantizedLinearMethod", "count": 1,
                 "first": "lm_head"}]},
            "draft": {"class": "DFlash2Qwen3ForCausalLM", "layers": [
                {"kind": "attention", "class": "Attention", "backend": "TRITON_ATTN", "count": 1,
                 "first": "model.layers.0.self_attn.attn"}]},
            "weights_bytes": 20 << 30,
            "kv_cache": {"layers": 17, "budget_bytes": 26 << 30, "num_blocks": 1234, "groups": [
                {"layers": 16, "type": "MLAAttentionSpec", "block_size": 128, "page_size_bytes": 73728}]}}
    meta.update(changes)
    return meta


def _meta_checks(meta, **steps):
    report, _ = _judge(Case("default", ARGS, {}), _engine(meta_model=meta, **steps))
    return [check for check in report.checks if check.id == "runtime.meta-model"]


def test_the_constructed_models_pass_when_every_layer_chose_what_the_selectors_chose():
    (check,) = _meta_checks(_meta())
    assert check.status == "pass", check.detail
    assert check.detail.startswith("default: constructed on the meta device, rank 0 of TP 4, in 61.2 s")
    assert "16 mla_attention FLASHINFER_MLA_SPARSE_SM120" in check.detail
    assert "1 linear UnquantizedLinearMethod" in check.detail  # the BF16 LM head has no NVFP4 kernel to compare
    assert "weights 20.00 GiB" in check.detail and "16 x MLAAttentionSpec (block 128, page 73728 B)" in check.detail
    assert "1234 blocks" in check.detail
    # a case without the construction (every case but the default launch) has no such check
    report, _ = _judge(Case("other", ARGS, {}), _engine())
    assert "runtime.meta-model" not in {c.id for c in report.checks}


def test_vllms_error_in_construction_fails_naming_where():
    error = "KeyError: 'selector_top_k'"
    (check,) = _meta_checks({"ok": False, "phase": "construction", "error": error,
                             "where": "vllm/model_executor/models/qwen3_dflash2.py:386"})
    assert check.status == "fail"
    assert check.detail == ("default: vLLM could not construct the served models on the meta device (construction "
                            "at vllm/model_executor/models/qwen3_dflash2.py:386): KeyError: 'selector_top_k'")
    (check,) = _meta_checks({"ok": False, "error": "the child constructing ... did not finish within 1800 s"})
    assert check.status == "fail" and "(construction)" in check.detail


@pytest.mark.parametrize(("model", "index", "field", "step"), [
    ("target", 0, "backend", "target.sparse_mla_attention"), ("target", 1, "backend", "target.moe"),
    ("target", 1, "experts", "target.moe"), ("target", 2, "kernel", "target.linear"),
    ("draft", 0, "backend", "draft.attention")])
def test_a_constructed_layer_that_chose_otherwise_than_its_selector_fails(model, index, field, step):
    meta = _meta()
    meta[model]["layers"][index][field] = "SOMETHING_ELSE"
    (check,) = _meta_checks(meta)
    assert check.status == "fail"
    layer = meta[model]["layers"][index]
    assert f"{layer['first']} ({layer['class']}, {layer['count']} layers) constructs with {field} SOMETHING_ELSE, " \
           f"vLLM's selector chose " in check.detail and f"({step})" in check.detail


def test_the_mtp_heads_layers_are_compared_with_the_mtp_selectors():
    meta = _meta(draft={"class": "Glm5NextMTP", "layers": [
        {"kind": "mla_attention", "class": "MLAAttention", "backend": "TRITON_MLA", "count": 1, "first": "mtp.attn"},
        {"kind": "moe", "class": "RoutedExperts", "backend": "TRITON", "experts": "TritonExperts", "count": 1,
         "first": "mtp.experts"}]})
    steps = {"mtp.sparse_mla_attention": {"ok": True, "backend": "FLASHINFER_MLA_SPARSE_SM120"},
             "mtp.moe": {"ok": True, "backend": "TRITON", "experts": "TritonExperts"}}
    (check,) = _meta_checks(meta, **steps)
    assert check.status == "fail" and "mtp.attn (MLAAttention, 1 layers) constructs with backend TRITON_MLA, " \
                                      "vLLM's selector chose FLASHINFER_MLA_SPARSE_SM120 (mtp.sparse_mla_attention)" \
                                      in check.detail
    assert "mtp.experts" not in check.detail
    # the selector refused what construction accepted
    steps["mtp.sparse_mla_attention"] = {"ok": False, "error": "ValueError: sparse not supported"}
    meta["draft"]["layers"][0]["backend"] = "FLASHINFER_MLA_SPARSE_SM120"
    (check,) = _meta_checks(meta, **steps)
    assert check.status == "fail" and "which vLLM's selector refuses (mtp.sparse_mla_attention: ValueError: " \
                                      "sparse not supported)" in check.detail


def test_weights_and_kv_budget_beyond_what_vllm_grants_fail():
    (check,) = _meta_checks(_meta(weights_bytes=80 << 30))  # 80 + 26 GiB > the 99.8 GiB granted
    assert check.status == "fail"
    assert "the constructed weights (80.00 GiB on this rank) and the KV budget (26.00 GiB) exceed the 99.8 GiB" \
           in check.detail
    (check,) = _meta_checks(_meta(weights_bytes=73 << 30))  # 99 GiB: within
    assert check.status == "pass"


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.sampled_from(["FLASHINFER_MLA_SPARSE_SM120", "TRITON_MLA", "FLASHMLA_SPARSE", "B12X"]),
       st.sampled_from(["B12xExperts", "TritonExperts", "CutlassExperts"]), TEXT)
def test_the_verdict_fails_exactly_when_a_constructed_choice_differs(backend, experts, kernel):
    meta = _meta()
    meta["target"]["layers"][0]["backend"] = backend
    meta["target"]["layers"][1]["experts"] = experts
    meta["target"]["layers"][2]["kernel"] = kernel
    (check,) = _meta_checks(meta)
    same = (backend, experts, kernel) == ("FLASHINFER_MLA_SPARSE_SM120", "B12xExperts", "B12xNvFp4LinearKernel")
    assert (check.status == "pass") == same, check.detail
