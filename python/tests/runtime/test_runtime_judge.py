"""From the probe's one JSON document to checks with ids (runtime.judge.judge_result), without
an interpreter: the verdict shapes are the ones in_image/probe.py writes. The same judgements on
the real image's own verdicts are in test_runtime_real.py."""

from __future__ import annotations

from sparkflake.runtime.check_report import Case, CheckReport
from sparkflake.runtime.judge import env_evidence, judge_result

CAPS = {"attention_backends": ["B12X", "TRITON_MLA"], "moe_backends": ["b12x", "triton"],
        "linear_backends": ["b12x", "cutlass"], "vllm_env_registry": ["VLLM_HOST_IP"]}
GOOD = {"parser": {"ok": True}, "engine_args": {"ok": True},
        "configs": {"speculative": {"ok": True, "unexpected_keys": []}, "parallel": {"ok": True}}}


def _result(verdicts):
    return {"imports": {"vllm": {"ok": True}}, "versions": {"vllm": "0.33.0"}, "capabilities": CAPS,
            "env_reads": ["HF_HUB_OFFLINE"], "cases": verdicts}


def _run(cases, verdicts):
    report = CheckReport()
    result = _result(verdicts)
    names = {name for case in cases for name in case.env}
    evidence = {name: env_evidence(name, result, {"NCCL_IB_HCA": "/opt/venv/lib/libnccl.so.2"}) for name in names}
    judge_result(report, result, cases, {"vllm": "0.33.0"}, evidence)
    return report


def _failures(report):
    return {(c.id, c.detail) for c in report.checks if c.status == "fail"}


def test_good_case_passes_every_check():
    case = Case("good", ("/m", "--attention-backend", "B12X", "--moe-backend", "b12x"),
                {"VLLM_HOST_IP": "1", "HF_HUB_OFFLINE": "1", "NCCL_IB_HCA": "x"})
    report = _run([case], [{"name": "good", **GOOD}])
    assert report.exit_code == 0, _failures(report)
    assert {"runtime.vllm-args", "runtime.env-unread", "runtime.backend-absent"} <= {c.id for c in report.checks}


def test_each_kind_of_bad_spec_names_its_check_and_the_offender():
    cases = [
        Case("flag", ("/m", "--bogus"), {}),
        Case("spec", ("/m",), {}),
        Case("spark", ("/m",), {}),
        Case("env", ("/m",), {"NOBODY_READS_ME": "1"}),
        Case("backend", ("/m", "--linear-backend", "nope"), {}),
    ]
    verdicts = [
        {"name": "flag", "parser": {"ok": False, "error": "vllm serve: error: unrecognized arguments: --bogus"}},
        {"name": "spec", **GOOD, "configs": {"speculative": {
            "ok": False, "error": "ValidationError", "unexpected_keys": ["adaptive_num_speculative_tokens"]}}},
        {"name": "spark", **GOOD, "kv_connector": {"ok": True, "source": "m"},
         "sparkcache": {"connector_config": {"ok": True}, "keys_given": ["spark_cache_root", "spark_cache_x"],
                        "keys_read": ["spark_cache_root"]}},
        {"name": "env", **GOOD},
        {"name": "backend", **GOOD},
    ]
    failures = _failures(_run(cases, verdicts))
    expected = {
        ("runtime.vllm-args", "--bogus"),
        ("runtime.speculative-config", "adaptive_num_speculative_tokens"),
        ("runtime.sparkcache-key-unread", "spark_cache_x"),
        ("runtime.env-unread", "NOBODY_READS_ME"),
        ("runtime.backend-absent", "nope"),
    }
    for check_id, name in expected:
        assert any(i == check_id and name in detail for i, detail in failures), (check_id, failures)
    assert len(failures) == len(expected), failures


def test_missing_verdict_and_wrong_version_fail():
    report = CheckReport()
    result = _result([])
    result["versions"] = {"vllm": "0.32.0"}
    judge_result(report, result, [Case("lost", ("/m",), {})], {"vllm": "0.33.0"}, {})
    assert ("runtime.versions", "vllm: image has '0.32.0', the lock pins 0.33.0") in _failures(report)
    assert any(i == "runtime.probe" and "lost" in d for i, d in _failures(report))


def test_model_config_refusal_fails_with_its_id_and_mtp_needs_its_draft_config():
    """vLLM's ModelConfig refusal is runtime.model-config; a speculative config that cannot
    be built with the target fails for MTP (the draft is the target's own checkpoint) and is
    only noted for an external draft, whose config.json is a synthetic stand-in."""
    long_case = Case("long", ("/m", "--max-model-len", "2097152"), {})
    mtp = Case("mtp", ("/m", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 5}'), {})
    dflash = Case("dflash", ("/m", "--speculative-config", '{"method": "dflash", "model": "/d"}'), {})
    refused = {"ok": False, "error": "ValueError: User-specified max_model_len (2097152) is greater than the "
                                     "derived max_model_len (max_position_embeddings=1048576)"}
    built = {"ok": True, "architecture": "Glm5NextForCausalLM", "max_model_len": 1048576}
    no_draft = {"ok": False, "error": "ValueError: draft"}
    report = _run([long_case, mtp, dflash], [
        {"name": "long", **GOOD, "model_config": refused},
        {"name": "mtp", **GOOD, "model_config": built, "speculative_with_target": no_draft},
        {"name": "dflash", **GOOD, "model_config": built, "speculative_with_target": no_draft},
    ])
    failures = _failures(report)
    assert any(i == "runtime.model-config" and d.startswith("long:") and "2097152" in d for i, d in failures)
    assert any(i == "runtime.speculative-config" and d.startswith("mtp:") for i, d in failures)
    assert not any(d.startswith("dflash:") for _, d in failures), failures
    noted = [c.detail for c in report.checks if c.id == "runtime.speculative-config" and c.detail.startswith("dflash")]
    assert noted and "synthetic draft config: ValueError: draft" in noted[0]
    assert len(failures) == 2, failures


def test_offline_switches_are_in_the_start_environment_only_when_every_case_sets_them():
    from sparkflake.runtime.probe_runner import probe_env

    image = {"PATH": "/usr/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_HOST_IP": "192.0.2.1"}
    env = probe_env(image, [Case("a", ("/m",), offline), Case("b", ("/m",), offline)])
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert "VLLM_HOST_IP" not in env and "PYTHONDONTWRITEBYTECODE" not in env
    mixed = probe_env(image, [Case("a", ("/m",), offline), Case("b", ("/m",), {"HF_HUB_OFFLINE": "0"})])
    assert "HF_HUB_OFFLINE" not in mixed and "TRANSFORMERS_OFFLINE" not in mixed
    assert "HF_HUB_OFFLINE" not in probe_env(image)
