"""From the probe's one JSON document to checks with ids (``runtime.imports``,
``runtime.versions``, the per-case ones, ``runtime.env-unread``) and to the image's
``Capabilities``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.check_result import FAIL, PASS
from ..oci.reader import ImageReader
from .capabilities import Capabilities, KernelSelection
from .check_report import Case, CheckReport
from .engine_verdicts import judge_engine
from .env_evidence import EXTERNAL_READERS
from .serving_judge import judge_serving

# The variables that would switch B12X's full-CKV gather (DCP2/DCP4) on: the name the
# launcher used to emit, and the one the seeds' launcher passes to their vLLM fork.
FULL_CKV_GATHER_SWITCHES = ("VLLM_B12X_MLA_CKV_GATHER", "B12X_FULL_CKV_GATHER")


def _dynamic(result: Mapping[str, Any]) -> set[str]:
    """Names vLLM's own registry lists (no file search needed for those)."""
    registry = result.get("capabilities", {}).get("vllm_env_registry")
    return set(registry) if isinstance(registry, list) else set()


def env_evidence(name: str, result: Mapping[str, Any], found: Mapping[str, str]) -> str | None:
    """The evidence that the image reads ``name``, most specific first; None: nothing does."""
    if name in _dynamic(result):
        return "vllm.envs.environment_variables (vllm/envs.py)"
    if name in found:
        return f"named in {found[name]}"
    if name in EXTERNAL_READERS:
        return f"external: {EXTERNAL_READERS[name]}"
    if name in result.get("env_reads", []):
        return "read through os.environ by the image's Python code during the probe"
    return None


def judge_result(report: CheckReport, result: Mapping[str, Any], cases: Sequence[Case],
           expected_versions: Mapping[str, str], evidence: Mapping[str, str | None],
           engine_judged: bool = False) -> tuple[KernelSelection, ...]:
    """The checks of the probe's result; what vLLM's engine start chose per case
    (``engine_judged``: the probe took every case through it, on the profile's device)."""
    imports = result.get("imports", {})
    broken = [f"{name}: {entry.get('error')}" for name, entry in sorted(imports.items()) if not entry.get("ok")]
    report.add("runtime.imports", FAIL if broken else PASS,
               "; ".join(broken) if broken else f"imported {', '.join(sorted(imports))}")
    versions = result.get("versions", {})
    wrong = [f"{dist}: image has {versions.get(dist)!r}, the lock pins {version}"
             for dist, version in sorted(expected_versions.items()) if versions.get(dist) != version]
    report.add("runtime.versions", FAIL if wrong else PASS,
               "; ".join(wrong) if wrong else f"{len(expected_versions)} distributions as locked")
    capabilities = result.get("capabilities", {})
    verdicts = {verdict.get("name"): verdict for verdict in result.get("cases", [])}
    selections = []
    for case in cases:
        verdict = verdicts.get(case.name)
        if verdict is None:
            report.add("runtime.probe", FAIL, f"{case.name}: the probe returned no verdict")
            continue
        _judge_case(report, case, verdict, capabilities)
        if engine_judged and "engine_args" in verdict and _verdict_status(verdict["engine_args"])[0]:
            selection = judge_engine(report, case, verdict.get("engine"), capabilities.get("kernel_toolchains"))
            if selection is not None:
                selections.append(selection)
        unread = [name for name in sorted(case.env) if evidence.get(name) is None]
        report.add("runtime.env-unread", FAIL if unread else PASS,
                   f"{case.name}: read by nothing in the image: {', '.join(unread)}" if unread
                   else f"{case.name}: {len(case.env)} variables, each read by the image")
    # written whenever vLLM imported (in_image/probe.py); without it runtime.imports has failed
    if "serving" in result:
        judge_serving(report, result)
    return tuple(selections)


def _verdict_status(entry: Any) -> tuple[bool, str]:
    if not isinstance(entry, Mapping):
        return False, "no verdict"
    return bool(entry.get("ok")), str(entry.get("error") or "")


def _judge_case(report: CheckReport, case: Case, verdict: Mapping[str, Any], capabilities: Mapping[str, Any]) -> None:
    name = case.name
    if "error" in verdict and "parser" not in verdict:
        report.add("runtime.probe", FAIL, f"{name}: {verdict['error']}")
        return
    ok, error = _verdict_status(verdict.get("parser"))
    report.add("runtime.vllm-args", PASS if ok else FAIL,
               f"{name}: vllm serve parser accepts {len(case.serve_args)} arguments" if ok else f"{name}: {error}")
    _judge_backends(report, case, capabilities)
    if not ok:
        return
    ok, error = _verdict_status(verdict.get("engine_args"))
    report.add("runtime.engine-args", PASS if ok else FAIL, f"{name}: AsyncEngineArgs.from_cli_args" if ok
               else f"{name}: {error}")
    model = verdict.get("model_config")
    if isinstance(model, Mapping):
        ok, error = _verdict_status(model)
        report.add("runtime.model-config", PASS if ok else FAIL,
                   f"{name}: ModelConfig of {model.get('architecture')}, max_model_len {model.get('max_model_len')}"
                   if ok else f"{name}: {error}")
    configs = verdict.get("configs", {})
    speculative = configs.get("speculative")
    with_target = verdict.get("speculative_with_target")
    if isinstance(with_target, Mapping) and not with_target.get("ok") and _speculative_method(case) == "mtp":
        # MTP drafts with the target's own checkpoint: nothing synthetic stands in for the draft
        report.add("runtime.speculative-config", FAIL, f"{name}: with the target's ModelConfig: "
                   f"{with_target.get('error')}")
    elif isinstance(speculative, Mapping):
        unexpected = speculative.get("unexpected_keys") or []
        if unexpected:
            report.add("runtime.speculative-config", FAIL,
                       f"{name}: SpeculativeConfig rejects key(s) {', '.join(unexpected)}: {speculative.get('error')}")
        elif (str(speculative.get("error") or "").startswith("ValidationError")
              and "target_model_config must be present" not in str(speculative.get("error"))):
            # pydantic checks every key and value before __post_init__ (vllm/config/utils.py:70);
            # its validator's "target_model_config must be present for mtp"
            # (vllm/config/speculative.py:1255) is the checkpoint this check does not have
            report.add("runtime.speculative-config", FAIL, f"{name}: {speculative.get('error')}")
        else:
            # past validation, SpeculativeConfig.__post_init__ reads the target model config,
            # which needs a checkpoint: that part is not judged here
            report.add("runtime.speculative-config", PASS,
                       f"{name}: SpeculativeConfig validates every key and value" + _with_target_note(with_target))
    bad = [f"{key}: {entry.get('error')}" for key, entry in sorted(configs.items())
           if key != "speculative" and isinstance(entry, Mapping) and not entry.get("ok")]
    built = sorted(key for key in configs if key != "speculative")
    report.add("runtime.vllm-config", FAIL if bad else PASS,
               f"{name}: " + ("; ".join(bad) if bad else f"built {', '.join(built)}"))
    if "kv_connector" in verdict:
        ok, error = _verdict_status(verdict["kv_connector"])
        report.add("runtime.kv-connector", PASS if ok else FAIL,
                   f"{name}: connector {verdict['kv_connector'].get('source')}" if ok else f"{name}: {error}")
    spark = verdict.get("sparkcache")
    if isinstance(spark, Mapping):
        ok, error = _verdict_status(spark.get("connector_config"))
        report.add("runtime.sparkcache-config", PASS if ok else FAIL,
                   f"{name}: parse_connector_config accepts it" if ok else f"{name}: {error}")
        unread = sorted(set(spark.get("keys_given", [])) - set(spark.get("keys_read", [])))
        report.add("runtime.sparkcache-key-unread", FAIL if unread else PASS,
                   f"{name}: SparkCache reads no extra-config key {', '.join(unread)}" if unread
                   else f"{name}: SparkCache reads all {len(spark.get('keys_given', []))} extra-config keys")


def _speculative_method(case: Case) -> str | None:
    args = list(case.serve_args)
    if "--speculative-config" not in args or args.index("--speculative-config") + 1 >= len(args):
        return None
    try:
        method = json.loads(args[args.index("--speculative-config") + 1]).get("method")
    except (ValueError, AttributeError):
        return None
    return method if isinstance(method, str) else None


def _with_target_note(with_target: Any) -> str:
    """What building it with the target's ModelConfig gave, for a draft whose checkpoint is
    a synthetic stand-in (checkpoint.py): recorded, not judged."""
    if not isinstance(with_target, Mapping):
        return ""
    if with_target.get("ok"):
        return (f"; built with the target's ModelConfig ({with_target.get('method')}, draft "
                f"{', '.join(with_target.get('draft_architectures') or []) or 'the target'})")
    return f"; with the target's ModelConfig and the synthetic draft config: {with_target.get('error')}"


BACKEND_FLAGS = {"--attention-backend": "attention_backends", "--moe-backend": "moe_backends",
                 "--linear-backend": "linear_backends"}


def _judge_backends(report: CheckReport, case: Case, capabilities: Mapping[str, Any]) -> None:
    args = list(case.serve_args)
    for flag, key in BACKEND_FLAGS.items():
        if flag not in args or args.index(flag) + 1 >= len(args):
            continue
        value = args[args.index(flag) + 1]
        known = capabilities.get(key)
        if not isinstance(known, list):
            report.add("runtime.backend-absent", FAIL, f"{case.name}: the image reported no {key}")
        elif value not in known and value.lower().replace("-", "_") not in known:
            report.add("runtime.backend-absent", FAIL, f"{case.name}: {flag} {value}: the image has no such "
                       f"backend ({', '.join(known)})")
        else:
            report.add("runtime.backend-absent", PASS, f"{case.name}: {flag} {value} is a backend of the image")


def _toolchain_ok(caps: Mapping[str, Any], family: str) -> bool:
    toolchains = caps.get("kernel_toolchains")
    if not isinstance(toolchains, Mapping):
        return True  # not reported: vLLM's own answer stands
    entry = toolchains.get(family)
    return isinstance(entry, Mapping) and entry.get("ok") is True


def capabilities_of(result: Mapping[str, Any], reader: ImageReader, config_digest: str, platform: str,
                  env_read: Mapping[str, str], selections: tuple[KernelSelection, ...] = ()) -> Capabilities:
    caps = result.get("capabilities", {})

    def strings(key: str) -> tuple[str, ...]:
        value = caps.get(key)
        return tuple(value) if isinstance(value, list) else ()

    sparkcache = caps.get("sparkcache") if isinstance(caps.get("sparkcache"), Mapping) else {}
    keys_read: set[str] = set()
    refusal = None
    for verdict in result.get("cases", []):
        spark = verdict.get("sparkcache")
        if isinstance(spark, Mapping):
            keys_read |= set(spark.get("keys_read", []))
            hybrid = spark.get("glm5next_kv_groups", {})
            if isinstance(hybrid, Mapping) and not hybrid.get("ok"):
                refusal = str(hybrid.get("error"))
    warnings = []
    for name, entry in sorted(result.get("imports", {}).items()):
        for record in entry.get("log", []):
            warnings.append(f"import {name}: {record.get('message')}")
        for message in entry.get("warnings", []):
            warnings.append(f"import {name}: {message}")
    plugins = caps.get("general_plugins")
    if isinstance(plugins, list):
        warnings += [f"general plugins: {message}" for message in plugins]
    switch = next((name for name in FULL_CKV_GATHER_SWITCHES if name in env_read), None)
    return Capabilities(
        manifest_digest=reader.manifest_ref.digest if reader.manifest_ref else None,
        config_digest=config_digest,
        platform=platform,
        versions=dict(result.get("versions", {})),
        attention_backends=strings("attention_backends"),
        moe_backends=strings("moe_backends"),
        linear_backends=strings("linear_backends"),
        speculative_methods=strings("speculative_methods"),
        speculative_config_fields=strings("speculative_config_fields"),
        load_formats=strings("load_formats"),
        kv_connectors=strings("kv_connectors"),
        sparkcache_profiles=tuple(sparkcache.get("profiles", ())) + tuple(sparkcache.get("aliases", {})),
        sparkcache_extra_keys_read=tuple(sorted(keys_read)),
        sparkcache_glm5next_refusal=refusal,
        env_read=dict(env_read),
        full_ckv_gather_switch=switch,
        # vLLM's has_flashinfer() (nvcc and ninja found) and, when the probe reported it,
        # whether FlashInfer's JIT can build at all (a host C++ compiler for nvcc too)
        flashinfer_kernels=caps.get("flashinfer_kernels") is True and _toolchain_ok(caps, "flashinfer"),
        quantization_methods=strings("quantization_methods"),
        plugin_warnings=tuple(warnings),
        vllm_platform=str(result.get("platform", "")),
        kernel_selections=selections,
    )
