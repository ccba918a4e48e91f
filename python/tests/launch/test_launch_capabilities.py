"""launch-rank consults the image's capability manifest (profiles/<name>/runtime-capabilities.json,
recorded by `sparkflake runtime check` on the real image): what the image cannot honour is
refused with the reason, and nothing is emitted that nothing in the image reads."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from fixtures.launch import PROFILES, real_contract, site_env
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.plan import plan_from_assignments
from sparkflake.runtime import capabilities as capability_file

ROOT = Path("/srv/test")


def plan(profile: str, contract=None, **extra: str):
    text = site_env(ROOT, 0, draft=profile == "glm53-dflash7", **extra)
    return plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env",
                                 contract=contract or real_contract(profile), engine=None, run_checks=False)


def image_rules(profile: str):
    """The profile's contract with its image's capabilities but without its ``[refused]``
    values, which would refuse DCP2/DCP4 and B12X attention before the capabilities do."""
    return dataclasses.replace(real_contract(profile), refused={})


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
def test_the_profile_carries_its_image_manifest(profile):
    caps = real_contract(profile).capabilities
    assert caps is not None and caps.source == str(PROFILES / profile / capability_file.FILE_NAME)
    assert caps.versions["vllm"] == "0.33.0" and caps.manifest_digest.startswith("sha256:")


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
def test_default_launch_emits_only_what_the_image_reads(profile):
    # planning is this process's own work (no I/O wait): its CPU time, not the wall time a
    # loaded 2-core machine stretches (it once took over 1 s of wall time at load 8)
    started = time.process_time()
    launch = plan(profile)
    assert time.process_time() - started < 1.0
    caps = launch.contract.capabilities
    serve = list(launch.spec.serve_args)
    assert serve[serve.index("--attention-backend") + 1] in caps.attention_backends
    assert serve[serve.index("--moe-backend") + 1] in caps.moe_backends
    assert serve[serve.index("--linear-backend") + 1] in caps.linear_backends
    assert set(launch.spec.env) <= set(caps.env_read), set(launch.spec.env) - set(caps.env_read)
    speculative = json.loads(serve[serve.index("--speculative-config") + 1])
    assert set(speculative) <= set(caps.speculative_config_fields)
    # SparkCache on: the profile refuses it (SparkCache's own refusals, judged in the image by
    # tests/runtime/test_runtime_real.py), so no launch carries a kv-transfer-config
    with pytest.raises(InputError, match=r"SPARKCACHE_ENABLED=1 is refused by profile .*SparkCache 0\.1\.0a2"):
        plan(profile, SPARKCACHE_ENABLED="1")


@pytest.mark.parametrize(
    ("profile", "extra", "fragments"),
    [
        ("glm53-dflash7", {"DCP": "2"}, ["full-CKV gather", "VLLM_B12X_MLA_CKV_GATHER", "use DCP=1"]),
        ("glm53-dflash7", {"DCP": "4"}, ["full-CKV gather"]),
        ("glm53-mtp5", {"SPECULATIVE_ADAPTIVE": "1"}, ["adaptive_num_speculative_tokens", "SPECULATIVE_ADAPTIVE=0"]),
        ("glm53-dflash7", {"ATTENTION_BACKEND": "NOPE_ATTN"}, ["no such backend", "B12X"]),
    ],
)
def test_what_the_image_cannot_honour_is_refused(profile, extra, fragments):
    with pytest.raises(InputError) as caught:
        plan(profile, image_rules(profile), **extra)
    message = str(caught.value)
    assert message.startswith("r.env:"), message
    assert str(PROFILES / profile / capability_file.FILE_NAME) in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_empty_backends_leave_the_choice_to_vllm():
    launch = plan("glm53-dflash7", ATTENTION_BACKEND="", MOE_BACKEND="", LINEAR_BACKEND="")
    assert not {"--attention-backend", "--moe-backend", "--linear-backend"} & set(launch.spec.serve_args)


def test_manifest_round_trips_and_rejects_bad_documents(tmp_path):
    path = PROFILES / "glm53-dflash7" / capability_file.FILE_NAME
    caps = capability_file.load(path)
    assert capability_file.dumps(caps) == path.read_bytes()
    document = json.loads(path.read_bytes())
    for mutate, fragment in (
        (lambda d: d.update(schema="other"), "schema"),
        (lambda d: d["backends"].update(attention="B12X"), "backends.attention"),
        (lambda d: d.update(flashinfer_kernels="no"), "flashinfer_kernels"),
        (lambda d: d["sparkcache"].update(glm5next_kv_groups_refusal=1), "glm5next_kv_groups_refusal"),
    ):
        broken = json.loads(json.dumps(document))
        mutate(broken)
        target = tmp_path / "caps.json"
        target.write_text(json.dumps(broken))
        with pytest.raises(InputError, match=fragment) as caught:
            capability_file.load(target)
        assert str(target) in str(caught.value)
    with pytest.raises(InputError, match="not a regular file"):
        capability_file.load(tmp_path)
    # json.loads raised RecursionError on deep nesting, which load did not catch (a
    # traceback in launch-rank); a key given twice was taken: read strictly now
    target = tmp_path / "caps.json"
    for body, fragment in (("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                           ('{"schema": 1, "schema": 1}', "given twice")):
        target.write_text(body)
        with pytest.raises(InputError, match=fragment) as caught:
            capability_file.load(target)
        assert caught.value.message.startswith(str(target))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    names=st.lists(st.text(alphabet="ABCDEFGHIJ_0123456789abc", min_size=1, max_size=12), max_size=6, unique=True),
    refusal=st.one_of(st.none(), st.text(max_size=40)),
    flashinfer=st.booleans(),
)
def test_manifest_serialization_round_trips(names, refusal, flashinfer):
    caps = capability_file.load(PROFILES / "glm53-dflash7" / capability_file.FILE_NAME)
    changed = dataclasses.replace(caps, attention_backends=tuple(names), env_read={n: "evidence" for n in names},
                                  sparkcache_glm5next_refusal=refusal, flashinfer_kernels=flashinfer, source="x")
    again = capability_file.parse(json.loads(capability_file.dumps(changed)), "x")
    assert again == changed


def _checked_plan(tmp_path: Path, profile: str, image_id: str | None):
    for name in ("target", "draft", "cache"):
        (tmp_path / name).mkdir(exist_ok=True)
    text = site_env(tmp_path, 0, draft=profile == "glm53-dflash7")
    return plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env",
                                 contract=real_contract(profile), engine=None, image_id=image_id,
                                 check_engine=False)


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
def test_launch_refuses_an_image_the_manifest_was_not_written_for(tmp_path, profile):
    caps = real_contract(profile).capabilities
    bound = _checked_plan(tmp_path, profile, caps.config_digest)
    assert [c.status for c in bound.checks if c.id == "image.capabilities"] == ["pass"]
    other = "sha256:" + "0" * 64
    refused = _checked_plan(tmp_path, profile, other)
    check = next(c for c in refused.checks if c.id == "image.capabilities")
    assert check.status == "fail" and not refused.ok
    assert other in check.detail and caps.config_digest in check.detail and caps.source in check.detail
    assert "sparkflake runtime check" in check.detail


def _with_selection(profile: str, refusals: dict[str, str], **extra: str):
    """The profile's contract whose manifest records vLLM's engine start for exactly the
    launch ``extra`` makes (as the runtime check would), with these refusals."""
    from sparkflake.runtime.capabilities import KernelSelection, LayerChoice, selecting_settings

    contract = dataclasses.replace(image_rules(profile), capabilities=None)
    text = site_env(ROOT, 0, draft=profile == "glm53-dflash7", **extra)
    launch = plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env",
                                   contract=contract, engine=None, run_checks=False)
    layers = {"target.moe": LayerChoice("B12X", None), **{kind: LayerChoice(None, reason)
                                                          for kind, reason in refusals.items()}}
    selection = KernelSelection(selecting_settings(launch.spec.serve_args), layers, 128)
    caps = dataclasses.replace(real_contract(profile).capabilities, kernel_selections=(selection,),
                               # the engine start alone decides here
                               attention_backends=("B12X", "FLASHINFER_MLA_SPARSE_SM120", "TRITON_MLA"))
    return dataclasses.replace(image_rules(profile), capabilities=caps), text


def test_a_launch_vllm_refuses_at_engine_start_is_refused_with_its_reason():
    reason = ("ValueError: Selected backend AttentionBackendEnum.B12X is not valid for this configuration. "
              "Reason: ['MLA not supported', 'sparse not supported']")
    contract, text = _with_selection("glm53-dflash7", {"target.sparse_mla_attention": reason},
                                     ATTENTION_BACKEND="B12X")
    with pytest.raises(InputError) as refused:
        plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env", contract=contract,
                              engine=None, run_checks=False)
    assert "vLLM 0.33.0 refuses this launch at engine start" in str(refused.value)
    assert f"target.sparse_mla_attention: {reason}" in str(refused.value)
    # another launch (here: another attention backend) was not judged: not refused for it
    other = site_env(ROOT, 0, draft=True, ATTENTION_BACKEND="TRITON_MLA")
    plan_from_assignments(rank=0, assignments=parse_env_text(other, "r.env"), source="r.env", contract=contract,
                          engine=None, run_checks=False)


def test_explain_gives_what_vllm_selects_per_layer_kind():
    contract, text = _with_selection("glm53-mtp5", {}, ATTENTION_BACKEND="B12X")
    launch = plan_from_assignments(rank=0, assignments=parse_env_text(text, "r.env"), source="r.env",
                                   contract=contract, engine=None, run_checks=False)
    selection = launch.report(explain=True)["kernel_selection"]
    assert selection["judged"] and selection["layers"] == {"target.moe": {"choice": "B12X"}}
    assert selection["block_size"] == 128 and selection["settings"]["speculative.method"] == "mtp"
    unjudged = launch.report(explain=True)
    assert "kernel_selection" in unjudged and "kernel_selection" not in launch.report()
    # the default launch: what the committed capabilities recorded for it
    default = plan("glm53-mtp5").report(explain=True)["kernel_selection"]
    assert default["judged"] and default["layers"]["target.sparse_mla_attention"] == {
        "choice": "FLASHINFER_MLA_SPARSE_SM120"}
