"""TOML launch recipes (the seeds' ``*.recipe.toml``) to and from a profile + env file.

Import maps what has a place in the settings catalog (``--max-model-len`` →
``MAX_MODEL_LEN``, ``tensor_parallel_size`` → ``TP``, the speculative config's method and
depth, …) into a runtime table and an env file; everything else — unmapped serve
arguments, the recipe's container env, mounts, mods and any field this module does not
know — is kept verbatim under ``[recipe]`` of the imported profile and listed in the
report. Nothing is dropped. Export writes a recipe from a launch plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import canonical_toml
from ..documents import read_regular_file
from ..errors import InputError
from ..lock import parse_toml_text
from .envfile import render_env_value
from .settings import CATALOG, parse_value, render_value

KNOWN_FIELDS = (
    "engine", "name", "docker_image", "entrypoint", "model", "parent_model", "port",
    "required_nodes", "tensor_parallel_size", "pipeline_parallel_size", "distributed_backend",
    "shm_size", "args", "env", "extra_mounts", "mods",
)
# vllm serve flag -> catalog key (values converted by the catalog's own parser)
FLAG_SETTINGS = {
    "--max-model-len": "MAX_MODEL_LEN",
    "--max-num-batched-tokens": "MAX_NUM_BATCHED_TOKENS",
    "--max-num-seqs": "MAX_NUM_SEQS",
    "--gpu-memory-utilization": "GPU_MEMORY_UTILIZATION",
    "--kv-cache-dtype": "KV_CACHE_DTYPE",
    "--block-size": "KV_BLOCK_SIZE",
    "--moe-backend": "MOE_BACKEND",
    "--attention-backend": "ATTENTION_BACKEND",
    "--all2all-backend": "ALL2ALL_BACKEND",
    "--load-format": "LOAD_FORMAT",
    "--tensor-parallel-size": "TP",
    "--pipeline-parallel-size": "PP",
    "--decode-context-parallel-size": "DCP",
    "--cp-kv-cache-interleave-size": "CP_KV_INTERLEAVE",
    "--port": "API_PORT",
    "--master-port": "MASTER_PORT",
}
FIELD_SETTINGS = {
    "tensor_parallel_size": "TP",
    "pipeline_parallel_size": "PP",
    "required_nodes": "NODE_COUNT",
    "port": "API_PORT",
}
KV_MEMORY_FLAGS = ("--kv-cache-memory", "--kv-cache-memory-bytes")
# flags the launcher always sets itself, or that a recipe states for the rank it ran on
LAUNCHER_FLAGS = {"--served-model-name", "--node-rank", "--nnodes", "--master-addr", "--host", "--headless",
                  "--distributed-executor-backend", "--enable-prefix-caching", "--enable-chunked-prefill",
                  "--language-model-only", "--compilation-config", "--kv-transfer-config"}
BOOLEAN_FLAGS = {"--trust-remote-code", "--enable-prefix-caching", "--enable-auto-tool-choice", "--headless",
                 "--enable-chunked-prefill", "--language-model-only"}


@dataclass(frozen=True)
class RecipeImport:
    runtime: dict[str, str]  # catalog key -> env-file spelling
    served_model_name: str | None
    kept: dict[str, Any]  # everything without a catalog place, verbatim
    unknown_fields: tuple[str, ...]
    unmapped_args: tuple[str, ...]
    notes: tuple[str, ...]

    def env_text(self, source: str) -> str:
        lines = [f"# imported from {source} by `sparkflake recipe import`", "# site values: fill in"]
        lines += ["#NODE_ADDRESS=", "#MASTER_ADDRESS=", "#TARGET_MODEL_PATH=", "#DRAFT_MODEL_PATH=", "#CACHE_ROOT="]
        lines += [f"{key}={render_env_value(value)}" for key, value in sorted(self.runtime.items())]
        return "\n".join(lines) + "\n"

    def profile_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.served_model_name:
            document["served_model_name"] = self.served_model_name
        document["runtime"] = dict(sorted(self.runtime.items()))
        recipe = dict(self.kept)
        recipe["unknown_fields"] = list(self.unknown_fields)
        recipe["unmapped_args"] = list(self.unmapped_args)
        document["recipe"] = recipe
        return document

    def report(self) -> dict[str, Any]:
        return {
            "runtime": dict(sorted(self.runtime.items())),
            "served_model_name": self.served_model_name,
            "unknown_fields": list(self.unknown_fields),
            "unmapped_args": list(self.unmapped_args),
            "kept": sorted(self.kept),
            "notes": list(self.notes),
        }


def read_recipe(path: str) -> dict[str, Any]:
    """A recipe file: a regular file, UTF-8 TOML, within the document bound."""
    return parse_toml_text(read_regular_file(path, "a recipe"), path)


def _shell_unquote(text: str) -> str:
    """Recipes carry JSON arguments as shell words ('{...}'); take the word's text."""
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == "'":
        return stripped[1:-1]
    return stripped


def _set(runtime: dict[str, str], key: str, raw: str, where: str, notes: list[str]) -> bool:
    """Map one value; a value the catalog does not accept stays unmapped, with a note."""
    try:
        parse_value(CATALOG[key], raw)
    except ValueError as exc:
        notes.append(f"{where}: kept unmapped: {exc}")
        return False
    runtime[key] = raw
    return True


def import_recipe(document: Mapping[str, Any], source: str) -> RecipeImport:
    runtime: dict[str, str] = {}
    kept: dict[str, Any] = {}
    notes: list[str] = []
    unknown = tuple(sorted(key for key in document if key not in KNOWN_FIELDS))
    for key in unknown:
        kept[key] = document[key]
    for field_name, key in FIELD_SETTINGS.items():
        if field_name in document:
            if not _set(runtime, key, str(document[field_name]), f"{source}: {field_name}", notes):
                kept[field_name] = document[field_name]
    for field_name in ("engine", "name", "docker_image", "entrypoint", "model", "parent_model",
                       "distributed_backend", "shm_size", "env", "extra_mounts", "mods"):
        if field_name in document:
            kept[field_name] = document[field_name]
    args = document.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InputError(f"{source}: args: expected an array of strings")
    served_model_name = None
    unmapped: list[str] = []
    index = 0
    while index < len(args):
        flag = args[index]
        has_value = flag not in BOOLEAN_FLAGS and index + 1 < len(args) and not args[index + 1].startswith("--")
        value = args[index + 1] if has_value else None
        where = f"{source}: args[{index}] {flag}"
        index += 2 if has_value else 1
        if flag == "--served-model-name" and value is not None:
            served_model_name = value
        elif flag in FLAG_SETTINGS and value is not None:
            if not _set(runtime, FLAG_SETTINGS[flag], value, where, notes):
                unmapped += [flag, value]
        elif flag in KV_MEMORY_FLAGS and value is not None:
            byte_count = int(value) if value.isdigit() else -1
            if byte_count > 0 and byte_count % (1 << 30) == 0:
                _set(runtime, "KV_CACHE_GIB", str(byte_count >> 30), where, notes)
            else:
                unmapped += [flag, value]
                notes.append(f"{flag} {value}: not a whole number of GiB; kept unmapped")
        elif flag == "--speculative-config" and value is not None:
            try:
                speculative = json.loads(_shell_unquote(value))
            except ValueError as exc:
                raise InputError(f"{where}: not JSON: {exc}") from None
            if not isinstance(speculative, dict):
                raise InputError(f"{where}: expected a JSON object")
            method = speculative.get("method")
            _set(runtime, "SPECULATIVE_METHOD", str(method), where, notes)
            if "num_speculative_tokens" in speculative:
                _set(runtime, "SPECULATIVE_TOKENS", str(speculative["num_speculative_tokens"]), where, notes)
            rest = {k: v for k, v in speculative.items() if k not in ("method", "num_speculative_tokens", "model")}
            if rest:
                kept["speculative_config_extra"] = rest
                notes.append("speculative config fields without a setting kept: " + ", ".join(sorted(rest)))
        elif flag in LAUNCHER_FLAGS:
            notes.append(f"{flag}: set by the launcher itself")
        else:
            unmapped += [flag] + ([value] if value is not None else [])
    transfer = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--kv-transfer-config"]
    if not any("SparkContextCacheConnector" in value for value in transfer):
        notes.append("the recipe has no SparkCache connector: SPARKCACHE_ENABLED=0 (vLLM prefix caching only)")
        runtime["SPARKCACHE_ENABLED"] = "0"
    else:
        runtime["SPARKCACHE_ENABLED"] = "1"
    return RecipeImport(
        runtime=runtime,
        served_model_name=served_model_name,
        kept=kept,
        unknown_fields=unknown,
        unmapped_args=tuple(unmapped),
        notes=tuple(notes),
    )


def export_recipe(plan: Any, extra_fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A recipe document for ``plan`` (a ``LaunchPlan``): what the launcher would run."""
    values = plan.resolution.values
    spec = plan.spec
    document: dict[str, Any] = {
        "engine": "vllm",
        "name": f"{plan.contract.profile} rank {plan.resolution.rank} ({plan.qualification.status})",
        "docker_image": spec.image,
        "entrypoint": ["vllm", "serve"],
        "model": values["TARGET_MODEL_PATH"],
        "port": values["API_PORT"],
        "required_nodes": values["NODE_COUNT"],
        "tensor_parallel_size": values["TP"],
        "pipeline_parallel_size": values["PP"],
        "distributed_backend": "mp",
        "args": list(spec.serve_args[1:]),
        "env": dict(sorted(spec.env.items())),
        "extra_mounts": [
            {"host": m.source, "container": m.target, "read_only": m.read_only} for m in spec.mounts
        ],
    }
    if values["SHM_SIZE"] is not None:
        document["shm_size"] = str(values["SHM_SIZE"])
    for key, value in (extra_fields or {}).items():
        document.setdefault(key, value)
    return document


def dump_recipe(document: Mapping[str, Any]) -> str:
    return canonical_toml.dumps(document)


def runtime_from_plan(plan: Any) -> dict[str, str]:
    return {key: render_value(value) for key, value in plan.resolution.values.items() if value is not None}


def summarize(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"
