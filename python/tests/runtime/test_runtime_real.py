"""The runtime check on the real images: their own vLLM, SparkCache and B12X judge.

Both glm53 images are built (from the shared fetch and layer caches), their verified
layers unpacked, and the image's interpreter run under qemu-user (x86_64) or natively.
One interpreter start judges every conformance case of glm53-dflash7 together with
deliberately bad specs; a second runs `sparkflake runtime check` on glm53-mtp5. The
capability manifests committed under profiles/ must be what the check writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkflake.compose.receipt import byproduct
from sparkflake.core.records import record_to_dict
from sparkflake.launch.conformance import conformance_case, conformance_cases
from sparkflake.launch.contract import contract_from_profile
from sparkflake.lock.profile_locks import load_profile
from sparkflake.runtime import capabilities as capability_file
from sparkflake.runtime import sandbox
from sparkflake.runtime.check import Case, run_check
from sparkflake.runtime.engine_verdicts import selecting_settings
from sparkflake.runtime.receipt_record import BYPRODUCT
from sparkflake.workflows.runtime_check import container_mounts, expected_versions

# real_image: builds both glm53 images, unpacks 2 x 9 GB and imports vLLM under qemu-user
# (see the README for the time it takes); run by ./bin/test-real-images (left out of ./bin/test while its mtp5 half fails)
pytestmark = [pytest.mark.slow, pytest.mark.real_image]
REPO = Path(__file__).resolve().parents[3]
# A directory of verified unpacked roots kept between runs (the check re-verifies a root
# before it reuses it); unset, each run unpacks into its own temporary directory.
KEPT_SCRATCH = os.environ.get("SPARKFLAKE_TEST_RUNTIME_SCRATCH")


def _scratch(tmp: Path, profile: str) -> Path:
    return Path(KEPT_SCRATCH) / profile if KEPT_SCRATCH else tmp / "scratch"


def _drop(scratch: Path) -> None:
    # an unpacked root is about 9 GB: not left for pytest's kept temporary directories
    if not KEPT_SCRATCH:
        shutil.rmtree(scratch, ignore_errors=True)


def _cli(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=REPO)


def _build(profile: str, out: Path) -> Path:
    completed = _cli("build", profile, "-o", str(out), "--formats", "oci")
    assert completed.returncode == 0, completed.stderr[-4000:]
    return out


def _replace(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    items = list(args)
    items[items.index(flag) + 1] = value
    return tuple(items)


def _with_flag(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    return _replace(args, flag, value) if flag in args else (*args, flag, value)


def _sparkcache_case() -> Case:
    """A SparkCache launch, which the profile refuses ([refused.SPARKCACHE_ENABLED]; and
    SparkCache's own deployment check refuses the block size vLLM settles, 2304, against its
    256-token chunks), spelled without the profile's refusals at the block size SparkCache
    takes, so the check still reads its connector keys and meets its refusal of GLM-5.3."""
    contract = dataclasses.replace(contract_from_profile(load_profile("glm53-dflash7", check_locks=False)),
                                   capabilities=None, refused={})
    launch = conformance_case("sparkcache-at-256", contract, 0, {"SPARKCACHE_ENABLED": "1", "KV_BLOCK_SIZE": "256"})
    assert launch.serve_args is not None, launch.refusal
    return Case(launch.name, launch.serve_args, launch.env)


def _bad_cases(cases: list[Case], mtp: Case) -> dict[str, tuple[Case, str, str]]:
    """name -> (case, the check id that must fail, the name its detail must give); ``mtp``:
    glm53-mtp5's default launch, judged by the same image (the same vLLM)."""
    default = next(c for c in cases if c.name == "glm53-dflash7-dcp1-sparkcache-off")
    spark = _sparkcache_case()
    args = default.serve_args
    speculative = json.loads(args[args.index("--speculative-config") + 1])
    kv = json.loads(spark.serve_args[spark.serve_args.index("--kv-transfer-config") + 1])
    kv["kv_connector_extra_config"]["spark_cache_namespace"] = "manager-pages-v2"
    # the MTP head inheriting the target's --moe-backend, as before the launcher named its own
    mtp_inheriting = {key: value for key, value in json.loads(
        mtp.serve_args[mtp.serve_args.index("--speculative-config") + 1]).items() if key != "moe_backend"}
    return {
        # SparkCache's connector keys are read (kv-connector, sparkcache-config and
        # sparkcache-key-unread pass), but vLLM settles the block size at 2304
        "sparkcache-at-256": (spark, "runtime.block-size", "2304"),
        "bad-flag": (Case("bad-flag", (*args, "--no-such-flag", "1"), default.env),
                     "runtime.vllm-args", "--no-such-flag"),
        "bad-speculative-key": (
            Case("bad-speculative-key",
                 _replace(args, "--speculative-config", json.dumps({**speculative, "adaptive_num_speculative_tokens": True})),
                 default.env),
            "runtime.speculative-config", "adaptive_num_speculative_tokens"),
        "bad-sparkcache-key": (
            Case("bad-sparkcache-key", _replace(spark.serve_args, "--kv-transfer-config", json.dumps(kv)), spark.env),
            "runtime.sparkcache-key-unread", "spark_cache_namespace"),
        "bad-env": (Case("bad-env", args, {**default.env, "B12X_FULL_CKV_GATHER": "1"}),
                    "runtime.env-unread", "B12X_FULL_CKV_GATHER"),
        "bad-backend": (Case("bad-backend", _replace(args, "--moe-backend", "nope_moe"), default.env),
                        "runtime.backend-absent", "nope_moe"),
        # twice what GLM-5.3's config.json allows (max_position_embeddings 1048576)
        "bad-max-model-len": (Case("bad-max-model-len", _replace(args, "--max-model-len", "2097152"), default.env),
                              "runtime.model-config", "2097152"),
        # the launches vLLM's engine start refuses on GB10, with vLLM's own reason: B12X
        # attention is a GQA decoder backend in stock vLLM 0.33.0 (no MLA, no sparse)
        "refuse-b12x-mla": (Case("refuse-b12x-mla", _with_flag(args, "--attention-backend", "B12X"), default.env),
                            "runtime.layer-kernel", "MLA not supported"),
        # the MTP head's MoE is unquantized: vLLM 0.33.0 has no b12x unquantized MoE
        # (fused_moe/oracle/unquantized.py map_unquantized_backend)
        # (with this image's container env: its JIT root is the one mounted writable)
        "refuse-mtp-b12x-moe": (Case("refuse-mtp-b12x-moe", _with_flag(_replace(
            mtp.serve_args, "--speculative-config", json.dumps(mtp_inheriting)), "--moe-backend", "b12x"),
            default.env),
            "runtime.layer-kernel", "not supported for unquantized MoE"),
        # a KV budget larger than the whole device (121.69 GiB)
        "refuse-kv-budget": (Case("refuse-kv-budget", _replace(args, "--kv-cache-memory-bytes", str(200 << 30)),
                                  default.env), "runtime.memory", "exceeds"),
    }


@pytest.fixture(scope="module")
def dflash7(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runtime-dflash7")
    out = _build("glm53-dflash7", tmp / "out")
    profile = load_profile("glm53-dflash7", check_locks=False)
    cases = [Case(c.name, c.serve_args, c.env, construct_models=c.default_launch)
             for c in conformance_cases(contract_from_profile(profile)) if c.serve_args is not None]
    mtp_contract = contract_from_profile(load_profile("glm53-mtp5", check_locks=False))
    mtp = next(Case(c.name, c.serve_args, c.env) for c in conformance_cases(mtp_contract)
               if c.name == "glm53-mtp5-dcp1-sparkcache-off")
    bad = _bad_cases(cases, mtp)
    scratch = _scratch(tmp, "glm53-dflash7")
    try:
        all_cases = [*cases, *(case for case, _, _ in bad.values())]
        report = run_check(out, cases=all_cases, expected_versions=expected_versions(profile),
                           platform=profile.platform, scratch=scratch,
                           mounts=container_mounts(contract_from_profile(profile), all_cases),
                           device=record_to_dict(profile.device))
    finally:
        _drop(scratch)
        shutil.rmtree(out / "oci", ignore_errors=True)
    return report, cases, bad


def test_real_specs_pass_in_the_image(dflash7):
    report, cases, bad = dflash7
    bad_names = set(bad)
    failed = [c for c in report.checks if c.status in ("fail", "error")
              and c.detail.split(":")[0] not in bad_names]
    assert not failed, failed
    ids = {c.id for c in report.checks if c.status == "pass"}
    for check_id in ("runtime.imports", "runtime.versions", "runtime.vllm-args", "runtime.engine-args",
                     "runtime.model-config",
                     "runtime.speculative-config", "runtime.vllm-config", "runtime.kv-connector",
                     "runtime.sparkcache-config", "runtime.sparkcache-key-unread", "runtime.env-unread",
                     "runtime.backend-absent",
                     # issue 27: the image's own parser registries, NCCL's IB userspace loaded in
                     # the image's root, every JIT cache placed under the rank's JIT root
                     "runtime.parsers", "runtime.nccl-ib-userspace", "runtime.cache-placement",
                     "runtime.driver-stand-in", "runtime.device", "runtime.engine-config", "runtime.layer-kernel",
                     "runtime.kernel-loadable", "runtime.block-size", "runtime.memory",
                     # issue 26: the default launch's served models constructed on the meta device
                     "runtime.meta-model"):
        assert check_id in ids, check_id
    (constructed,) = [c for c in report.checks if c.id == "runtime.meta-model"]
    assert constructed.detail.startswith("glm53-dflash7-dcp1-sparkcache-off: constructed on the meta device, rank 0 "
                                         "of TP 4"), constructed.detail
    # every case went through vLLM's create_engine_config on the faked GB10
    engines = {c.detail.split(":")[0] for c in report.checks if c.id == "runtime.engine-config" and c.status == "pass"}
    assert {case.name for case in cases} <= engines
    judged = {c.detail.split(":")[0] for c in report.checks if c.id == "runtime.vllm-args"}
    assert {case.name for case in cases} <= judged
    # vLLM's ModelConfig was built for every case, from the checkpoint config bound at --model
    models = {c.detail.split(":")[0] for c in report.checks if c.id == "runtime.model-config" and c.status == "pass"}
    assert {case.name for case in cases} <= models


def test_each_bad_spec_fails_with_its_check_id_and_name(dflash7):
    report, _, bad = dflash7
    for name, (_, check_id, offending) in bad.items():
        failures = [c for c in report.checks if c.status == "fail" and c.detail.startswith(f"{name}:")]
        assert any(c.id == check_id and offending in c.detail for c in failures), (name, failures)


def test_the_committed_manifest_is_what_the_image_says(dflash7):
    report, cases, _ = dflash7
    committed = REPO / "profiles" / "glm53-dflash7" / capability_file.FILE_NAME
    # the deliberately bad launches' engine starts are this test's, not the profile's; so is
    # the one SparkCache launch (the profile refuses SparkCache: no launch case enables it)
    launched = [selecting_settings(case.serve_args) for case in cases]
    found = report.capabilities
    # (a bad launch may share the selecting settings of a good one, e.g. an unknown
    # speculative key, and its refused start is then recorded under them: left out too)
    caps = dataclasses.replace(found, kernel_selections=tuple(
        s for s in found.kernel_selections if dict(s.settings) in launched and not s.refusals),
        sparkcache_extra_keys_read=(), sparkcache_glm5next_refusal=None)
    written = capability_file.dumps(caps)
    assert committed.read_bytes() == written, (
        f"{committed} differs from the image's; re-record with: sparkflake runtime check OUT --profile "
        f"glm53-dflash7 --capabilities {committed}")
    # what the fixes rest on, as the image's own code reported it
    assert "B12X" in caps.attention_backends and "b12x" in caps.moe_backends and "b12x" in caps.linear_backends
    assert "adaptive_num_speculative_tokens" not in caps.speculative_config_fields
    assert caps.full_ckv_gather_switch is None
    # SparkCache's connector, on the test's SparkCache launch: it reads our keys and refuses
    # GLM-5.3's KV-cache groups, as the profile's [refused.SPARKCACHE_ENABLED] quotes
    assert found.sparkcache_glm5next_refusal and "Mamba" in found.sparkcache_glm5next_refusal
    assert "spark_cache_model_profile" in found.sparkcache_extra_keys_read
    profile = load_profile("glm53-dflash7", check_locks=False)
    assert "Mamba cache mode 'none'" in profile.refused["SPARKCACHE_ENABLED"]["1"]
    assert "Mamba cache mode 'none'" in found.sparkcache_glm5next_refusal
    assert "glm52-nvfp4" in caps.sparkcache_profiles
    # what vLLM chose per layer kind for the default launch is in the committed capabilities
    assert caps.kernel_selections and not any(s.refusals for s in caps.kernel_selections)


def test_mtp5_check_through_the_cli(tmp_path):
    out = _build("glm53-mtp5", tmp_path / "out")
    scratch = _scratch(tmp_path, "glm53-mtp5")
    try:
        completed = _cli("runtime", "check", str(out), "--json", "--progress", "--scratch", str(scratch))
    finally:
        _drop(scratch)
    try:
        assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
        assert "Traceback" not in completed.stderr
        report = json.loads(completed.stdout)
        assert report["ok"] and report["capabilities"]["image"]["manifest_digest"]
        passed = {check["id"] for check in report["checks"] if check["status"] == "pass"}
        assert "runtime.model-config" in passed
        # the default launch's target and MTP head constructed on the meta device: the head is
        # excluded from NVFP4 under the name vLLM gives it, so its MoE is the Triton one the
        # profile sets (issue 26; 'model.mtp*' matched nothing and the NVFP4 oracle refused triton)
        (constructed,) = [check for check in report["checks"] if check["id"] == "runtime.meta-model"]
        assert constructed["status"] == "pass", constructed
        assert "draft Glm5NextMTP: " in constructed["detail"] and "1 moe TRITON" in constructed["detail"], constructed
        # --progress: one line per launch case as the probe finished it, in order
        judged = sorted({check["detail"].split(":")[0] for check in report["checks"]
                         if check["id"] == "runtime.vllm-args"})
        lines = [line for line in completed.stderr.splitlines() if line.startswith("runtime check: case ")]
        assert [line.split()[4].rstrip(":") for line in lines] and len(lines) == len(judged), lines
        assert sorted(line.split()[4].rstrip(":") for line in lines) == judged
        assert all(line.split()[3] == f"{index}/{len(judged)}" for index, line in enumerate(lines, 1)), lines
        # the embedded MTP head is drafted from the target's own (synthetic) config: vLLM
        # rewrites it to its MTP architecture, every case
        speculative = [check for check in report["checks"] if check["id"] == "runtime.speculative-config"]
        assert speculative and all(check["status"] == "pass" and "draft Glm5NextMTPModel" in check["detail"]
                                   for check in speculative), speculative[:3]
        assert "runtime.bytecode" in passed or sandbox.host_architecture() == "arm64", report["checks"][:8]
        committed = REPO / "profiles" / "glm53-mtp5" / capability_file.FILE_NAME
        written = (out / capability_file.FILE_NAME).read_bytes()
        assert written == committed.read_bytes()
        # recorded in the build's receipt, which still verifies against the image
        entry = byproduct(json.loads((out / "receipt.json").read_bytes()), BYPRODUCT)
        assert entry["digest"] == {"sha256": hashlib.sha256(written).hexdigest()} and entry["annotations"]["ok"]
        verified = _cli("receipt", "verify", str(out / "receipt.json"), str(out / "oci"))
        assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    finally:
        shutil.rmtree(out / "oci", ignore_errors=True)
    assert os.path.getsize(committed) < capability_file.MAX_BYTES
