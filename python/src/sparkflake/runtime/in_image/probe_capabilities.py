"""What this image's code offers: the names its vLLM, SparkCache and B12X accept (attention,
MoE and linear backends, speculative methods and config fields, load formats, KV connectors,
SparkCache profiles, VLLM_* variables, quantization methods), FlashInfer's kernels and the
general plugins loaded at engine start. Runs inside the image (see ``__init__.py``)."""

from __future__ import annotations

import time
import typing
from collections.abc import Callable

from probe_engine import kernel_toolchains
from probe_support import CAPTURE, PHASE_SECONDS, error_text


def _flatten_literal(annotation: object) -> list[str]:
    """All strings of a (nested) typing.Literal."""
    found: list[str] = []
    for argument in typing.get_args(annotation):
        if isinstance(argument, str):
            found.append(argument)
        else:
            found.extend(_flatten_literal(argument))
    return found


# What vLLM's engine start loads first (EngineArgs.__post_init__, vllm/engine/arg_utils.py:931
# load_general_plugins): answered before any case builds its engine arguments, which load
# the plugins once and for all, so that their log is this capability's
PLUGINS = ("general_plugins",)


def capabilities(names: tuple[str, ...] | None = None, *, skip: tuple[str, ...] = ()) -> dict[str, object]:
    """What this image's code offers: the capabilities ``names`` (all when None) but those
    in ``skip``. (Answering moe_backends and load_formats, the two slow steps, in forked
    children was measured: the same module imports then fell on the next step in this
    process, linear_backends, so they run here.)"""
    caps: dict[str, object] = {}

    def record(key: str, producer: Callable[[], object]) -> None:
        if (names is not None and key not in names) or key in skip:
            return
        started = time.monotonic()
        try:
            caps[key] = producer()
        except BaseException as exc:  # noqa: BLE001
            caps[key] = {"error": error_text(exc)}
        PHASE_SECONDS[f"capabilities.{key}"] = round(time.monotonic() - started, 3)

    # vllm/v1/attention/backends/registry.py:34 class AttentionBackendEnum (B12X at :126)
    def attention() -> list[str]:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        return sorted(member.name for member in AttentionBackendEnum)

    # vllm/config/kernel.py:122 MoEBackend, :245 LinearBackend (typing.Literal)
    def moe() -> list[str]:
        from vllm.config.kernel import MoEBackend

        return sorted(_flatten_literal(MoEBackend))

    def linear() -> list[str]:
        from vllm.config.kernel import LinearBackend

        return sorted(_flatten_literal(LinearBackend))

    # vllm/config/speculative.py:74 SpeculativeMethod
    def methods() -> list[str]:
        from vllm.config.speculative import SpeculativeMethod

        return sorted(set(_flatten_literal(SpeculativeMethod)))

    def speculative_fields() -> list[str]:
        import dataclasses

        from vllm.config.speculative import SpeculativeConfig

        return sorted(f.name for f in dataclasses.fields(SpeculativeConfig) if f.init)

    # vllm/model_executor/model_loader/__init__.py:33 LoadFormats
    def load_formats() -> list[str]:
        from vllm.model_executor.model_loader import LoadFormats

        return sorted(_flatten_literal(LoadFormats))

    # vllm/distributed/kv_transfer/kv_connector/factory.py:28 KVConnectorFactory._registry
    def connectors() -> list[str]:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

        return sorted(KVConnectorFactory._registry)

    # sparkcache/spark_context_cache_profiles.py: PROFILES, PROFILE_ALIASES, resolve_profile
    def sparkcache_profiles() -> dict[str, object]:
        from sparkcache import spark_context_cache_profiles as profiles

        return {"profiles": sorted(profiles.PROFILES), "aliases": dict(sorted(profiles.PROFILE_ALIASES.items()))}

    # vllm/envs.py: environment_variables, the registry of every VLLM_* variable vLLM reads
    def vllm_env() -> list[str]:
        import vllm.envs

        return sorted(vllm.envs.environment_variables)

    record("attention_backends", attention)
    record("moe_backends", moe)
    record("linear_backends", linear)
    record("speculative_methods", methods)
    record("speculative_config_fields", speculative_fields)
    record("load_formats", load_formats)
    record("kv_connectors", connectors)
    record("sparkcache", sparkcache_profiles)
    # vllm/utils/flashinfer.py:88 has_flashinfer: False (with a warning) when neither
    # flashinfer-cubin nor nvcc+ninja is there, i.e. FlashInfer's kernels cannot run
    def flashinfer_kernels() -> bool:
        from vllm.utils.flashinfer import has_flashinfer

        return bool(has_flashinfer())

    # What vLLM does at engine start: load the vllm.general_plugins entry points (b12x
    # registers b12x_fp6 and b12x_loader there: b12x-1.5.1.dist-info/entry_points.txt)
    def general_plugins() -> list[str]:
        from vllm.plugins import load_general_plugins

        before = len(CAPTURE.records)
        load_general_plugins()
        return [f"{r['logger']}: {r['message']}" for r in CAPTURE.records[before:]]

    def quantization_methods() -> list[str]:
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

        return sorted(QUANTIZATION_METHODS)

    record("vllm_env_registry", vllm_env)
    record("flashinfer_kernels", flashinfer_kernels)
    record("general_plugins", general_plugins)
    record("kernel_toolchains", kernel_toolchains)
    record("quantization_methods", quantization_methods)
    return caps

