"""What a built image can honour, as data: ``runtime-capabilities.json``.

Written by ``sparkflake runtime check`` from what the image's own code reported (vLLM's
backend enums and Literals, SparkCache's profiles and the keys it read, the env
variables its components read, the warnings at import), bound to the image's manifest
and config digests. The launcher reads it to refuse a setting the image cannot honour;
this module is all that the launcher imports from the runtime stage.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.canonical_json import canonical_json_bytes, readable_json_bytes
from ..core.documents import parse_json
from ..core.errors import InputError

SCHEMA = "sparkflake.runtime-capabilities/v1"
FILE_NAME = "runtime-capabilities.json"
MAX_BYTES = 4 << 20


# the serve arguments that decide vLLM's kernel selection, as KernelSelection.settings keys
SELECTING_FLAGS = ("--attention-backend", "--moe-backend", "--linear-backend", "--kv-cache-dtype", "--block-size",
                   "--decode-context-parallel-size", "--gpu-memory-utilization", "--kv-cache-memory-bytes")


def _flag(args: Sequence[str], flag: str) -> str:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else ""


def selecting_settings(serve_args: Sequence[str]) -> dict[str, str]:
    """The serve arguments of a launch that decide what vLLM selects (empty: not given),
    with the speculative method and the draft's own backend fields: the key under which
    the runtime check records a judged launch and the launcher finds it again."""
    args = list(serve_args)
    settings = {flag.lstrip("-"): _flag(args, flag) for flag in SELECTING_FLAGS}
    try:
        speculative = json.loads(_flag(args, "--speculative-config") or "{}")
    except (ValueError, RecursionError):
        speculative = {}
    if not isinstance(speculative, dict):
        speculative = {}
    for key in ("method", "attention_backend", "moe_backend", "kv_cache_dtype"):
        settings[f"speculative.{key}"] = str(speculative.get(key) or "")
    return settings


@dataclass(frozen=True)
class LayerChoice:
    """What vLLM's selector did for one layer kind of one launch: the backend or kernel it
    chose, or its refusal (its own message)."""

    choice: str | None
    refusal: str | None
    # the judge could not take the layer to vLLM's verdict (why): neither chosen nor refused
    unproven: str | None = None

    def as_record(self) -> dict[str, Any]:
        if self.unproven is not None:
            return {"unproven": self.unproven}
        return {"choice": self.choice} if self.refusal is None else {"refusal": self.refusal}


@dataclass(frozen=True)
class KernelSelection:
    """vLLM's engine start for one judged launch on the profile's device: the serve settings
    that decide the selection, what was chosen per layer kind (``engine_verdicts.LAYER_STEPS``
    names them; ``engine_config`` and ``memory`` hold a refusal of the whole start), and the
    KV block size vLLM settled on."""

    settings: Mapping[str, str]
    layers: Mapping[str, LayerChoice]
    block_size: int | None

    def as_record(self) -> dict[str, Any]:
        return {"settings": dict(sorted(self.settings.items())), "block_size": self.block_size,
                "layers": {kind: choice.as_record() for kind, choice in sorted(self.layers.items())}}

    @property
    def refusals(self) -> dict[str, str]:
        return {kind: choice.refusal for kind, choice in sorted(self.layers.items()) if choice.refusal is not None}


@dataclass(frozen=True)
class Capabilities:
    manifest_digest: str | None
    config_digest: str
    platform: str
    versions: Mapping[str, str | None]
    attention_backends: tuple[str, ...]
    moe_backends: tuple[str, ...]
    linear_backends: tuple[str, ...]
    speculative_methods: tuple[str, ...]
    speculative_config_fields: tuple[str, ...]
    load_formats: tuple[str, ...]
    kv_connectors: tuple[str, ...]
    sparkcache_profiles: tuple[str, ...]
    sparkcache_extra_keys_read: tuple[str, ...]
    # None: SparkCache configures vLLM's Glm5Next (GLM-5.3) KV-cache groups; else why not
    sparkcache_glm5next_refusal: str | None
    env_read: Mapping[str, str]  # variable -> evidence that the image reads it
    # the variable that switches B12X's full-CKV gather on, if anything in the image reads one
    full_ckv_gather_switch: str | None
    flashinfer_kernels: bool  # vLLM's has_flashinfer(): precompiled cubins, or nvcc + ninja
    quantization_methods: tuple[str, ...]
    plugin_warnings: tuple[str, ...]
    vllm_platform: str  # the vLLM platform the check's parser and configs were built on
    # vLLM's engine start per judged launch, on the profile's device (empty: not judged)
    kernel_selections: tuple[KernelSelection, ...] = ()
    source: str = field(default="", compare=False)  # the file it was read from

    def selection_for(self, settings: Mapping[str, str]) -> KernelSelection | None:
        """The judged launch with exactly these selecting settings, if one was judged."""
        wanted = dict(settings)
        return next((selection for selection in self.kernel_selections if dict(selection.settings) == wanted), None)

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "schema": SCHEMA,
            "image": {"manifest_digest": self.manifest_digest, "config_digest": self.config_digest,
                      "platform": self.platform},
            "versions": dict(sorted(self.versions.items())),
            "backends": {"attention": list(self.attention_backends), "moe": list(self.moe_backends),
                         "linear": list(self.linear_backends)},
            "speculative": {"methods": list(self.speculative_methods),
                            "config_fields": list(self.speculative_config_fields)},
            "load_formats": list(self.load_formats),
            "kv_connectors": list(self.kv_connectors),
            "sparkcache": {"model_profiles": list(self.sparkcache_profiles),
                           "extra_config_keys_read": list(self.sparkcache_extra_keys_read),
                           "glm5next_kv_groups_refusal": self.sparkcache_glm5next_refusal},
            "env_read": dict(sorted(self.env_read.items())),
            "full_ckv_gather_switch": self.full_ckv_gather_switch,
            "flashinfer_kernels": self.flashinfer_kernels,
            "quantization_methods": list(self.quantization_methods),
            "plugin_warnings": list(self.plugin_warnings),
            "vllm_platform": self.vllm_platform,
        }
        if self.kernel_selections:  # left out when the check judged no engine start
            record["kernel_selections"] = _unique_records(self.kernel_selections)
        return record


def _unique_records(selections: tuple[KernelSelection, ...]) -> list[dict[str, Any]]:
    """One record per distinct selection, in a stable order (many launches differ only in
    settings that select nothing)."""
    records = {canonical_json_bytes(selection.as_record()): selection.as_record() for selection in selections}
    return [records[key] for key in sorted(records)]


def _selection(document: Any, where: str) -> KernelSelection:
    if not isinstance(document, Mapping):
        raise InputError(f"{where}: expected an object")
    settings = document.get("settings")
    if not isinstance(settings, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in settings.items()):
        raise InputError(f"{where}.settings: expected an object of strings")
    block = document.get("block_size")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int)):
        raise InputError(f"{where}.block_size: expected an integer or null")
    layers = document.get("layers")
    if not isinstance(layers, Mapping):
        raise InputError(f"{where}.layers: expected an object")
    parsed = {}
    for kind, entry in layers.items():
        shown = f"{where}.layers.{kind}"
        if not isinstance(entry, Mapping) or set(entry) not in ({"choice"}, {"refusal"}, {"unproven"}) \
                or not isinstance(next(iter(entry.values())), str):
            raise InputError(f"{shown}: expected {{\"choice\": string}}, {{\"refusal\": string}} or "
                             f"{{\"unproven\": string}}")
        parsed[str(kind)] = LayerChoice(entry.get("choice"), entry.get("refusal"), entry.get("unproven"))
    return KernelSelection(dict(settings), parsed, block)


def dumps(capabilities: Capabilities) -> bytes:
    """Canonical bytes: sorted keys, two-space indent, one trailing newline."""
    return readable_json_bytes(capabilities.as_record())


def _strings(document: Mapping[str, Any], path: tuple[str, ...], where: str) -> tuple[str, ...]:
    value: Any = document
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InputError(f"{where}: {'.'.join(path)}: expected a list of strings")
    return tuple(value)


def _mapping(document: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = document.get(key)
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: {key}: expected an object")
    return value


def parse(document: Any, where: str) -> Capabilities:
    if not isinstance(document, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    if document.get("schema") != SCHEMA:
        raise InputError(f"{where}: schema: expected {SCHEMA!r}, got {document.get('schema')!r}")
    image = _mapping(document, "image", where)
    config_digest = image.get("config_digest")
    manifest_digest = image.get("manifest_digest")
    if not isinstance(config_digest, str) or not (manifest_digest is None or isinstance(manifest_digest, str)):
        raise InputError(f"{where}: image: expected config_digest and manifest_digest strings")
    versions = _mapping(document, "versions", where)
    if not all(isinstance(v, str) or v is None for v in versions.values()):
        raise InputError(f"{where}: versions: expected strings or null")
    sparkcache = _mapping(document, "sparkcache", where)
    refusal = sparkcache.get("glm5next_kv_groups_refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise InputError(f"{where}: sparkcache.glm5next_kv_groups_refusal: expected a string or null")
    env_read = _mapping(document, "env_read", where)
    if not all(isinstance(v, str) for v in env_read.values()):
        raise InputError(f"{where}: env_read: expected strings")
    switch = document.get("full_ckv_gather_switch")
    if switch is not None and not isinstance(switch, str):
        raise InputError(f"{where}: full_ckv_gather_switch: expected a string or null")
    flashinfer = document.get("flashinfer_kernels")
    if not isinstance(flashinfer, bool):
        raise InputError(f"{where}: flashinfer_kernels: expected true or false")
    return Capabilities(
        manifest_digest=manifest_digest,
        config_digest=config_digest,
        platform=str(image.get("platform", "")),
        versions=dict(versions),
        attention_backends=_strings(document, ("backends", "attention"), where),
        moe_backends=_strings(document, ("backends", "moe"), where),
        linear_backends=_strings(document, ("backends", "linear"), where),
        speculative_methods=_strings(document, ("speculative", "methods"), where),
        speculative_config_fields=_strings(document, ("speculative", "config_fields"), where),
        load_formats=_strings(document, ("load_formats",), where),
        kv_connectors=_strings(document, ("kv_connectors",), where),
        sparkcache_profiles=_strings(document, ("sparkcache", "model_profiles"), where),
        sparkcache_extra_keys_read=_strings(document, ("sparkcache", "extra_config_keys_read"), where),
        sparkcache_glm5next_refusal=refusal,
        env_read=dict(env_read),
        full_ckv_gather_switch=switch,
        flashinfer_kernels=flashinfer,
        quantization_methods=_strings(document, ("quantization_methods",), where),
        plugin_warnings=_strings(document, ("plugin_warnings",), where),
        vllm_platform=str(document.get("vllm_platform", "")),
        kernel_selections=_selections(document.get("kernel_selections", []), where),
        source=where,
    )


def _selections(value: Any, where: str) -> tuple[KernelSelection, ...]:
    if not isinstance(value, list):
        raise InputError(f"{where}: kernel_selections: expected a list")
    return tuple(_selection(item, f"{where}: kernel_selections[{index}]") for index, item in enumerate(value))


def load(path: str | os.PathLike[str]) -> Capabilities:
    """Read a capability manifest: a regular file, at most 4 MiB, canonical JSON."""
    location = Path(path)
    try:
        if not location.is_file():
            raise InputError(f"{location}: not a regular file")
        with open(location, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{location}: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise InputError(f"{location}: larger than {MAX_BYTES} bytes")
    return parse(parse_json(raw, str(location)), str(location))
