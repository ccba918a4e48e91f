"""TOML launch recipes (the seeds' ``*.recipe.toml``) to and from a profile + env file.

Import maps what has a place in the settings catalog (``--max-model-len`` →
``MAX_MODEL_LEN``, ``tensor_parallel_size`` → ``TP``, the speculative config's method and
depth, …) into a runtime table and an env file; everything else — unmapped serve
arguments, the recipe's container env, mounts, mods and any field this module does not
know — is kept verbatim under ``[recipe]`` of the imported profile and listed in the
report. Nothing is dropped. Export writes a recipe from a launch plan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.documents import parse_json, read_regular_file
from ..core.errors import InputError
from ..core.records import parse_toml_text
from ..profile.settings_catalog import CATALOG, parse_value
from .credential_masking import (
    MASK,
    masked_args,
    masked_flag,
    masked_text,
    masked_value,
    names_credential,
)
from .envfile import render_env_value

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
    "--linear-backend": "LINEAR_BACKEND",
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


# [recipe] keys the importer writes itself (beside the recipe's own fields, kept verbatim)
SPECULATIVE_EXTRA = "speculative_config_extra"  # the speculative config without method/depth
LAUNCHER_ARGS = "launcher_args"  # the recipe's values of flags the launcher sets itself
UNMAPPED_ARGS = "unmapped_args"
UNKNOWN_FIELDS = "unknown_fields"


@dataclass(frozen=True)
class RecipeImport:
    runtime: dict[str, str]  # catalog key -> env-file spelling
    served_model_name: str | None
    kept: dict[str, Any]  # everything without a catalog place, verbatim
    unknown_fields: tuple[str, ...]
    unmapped_args: tuple[str, ...]  # verbatim, as written under [recipe]; shown_unmapped_args() to print
    notes: tuple[str, ...]  # credentials masked, as all shown text
    conflicts: tuple[str, ...] = ()  # values the recipe gives twice, differently

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
        document["recipe"] = self.recipe_table()
        return document

    def recipe_table(self) -> dict[str, Any]:
        """``[recipe]`` of the imported profile: what ``export_recipe`` carries back."""
        recipe = dict(self.kept)
        recipe[UNKNOWN_FIELDS] = list(self.unknown_fields)
        recipe[UNMAPPED_ARGS] = list(self.unmapped_args)
        return recipe

    def shown_unmapped_args(self) -> tuple[str, ...]:
        """The unmapped arguments as printed: a credential flag's value masked."""
        return tuple(shown_args(self.unmapped_args))

    def report(self) -> dict[str, Any]:
        return {
            "runtime": {key: masked_text(value) for key, value in sorted(self.runtime.items())},
            "served_model_name": None if self.served_model_name is None else masked_text(self.served_model_name),
            "unknown_fields": list(self.unknown_fields),
            "unmapped_args": list(self.shown_unmapped_args()),
            "kept": sorted(self.kept),
            "conflicts": list(self.conflicts),
            "notes": list(self.notes),
        }


def read_recipe(path: str) -> dict[str, Any]:
    """A recipe file: a regular file, UTF-8 TOML, within the document bound."""
    return parse_toml_text(read_regular_file(path, "a recipe"), path)


def shown_args(words: Sequence[str]) -> list[str]:
    """Serve arguments as printed: the value of a flag naming a credential is ``***``."""
    return masked_args(_grouped(words))


def _shown(name: str, value: Any) -> str:
    """The value given for ``name`` (a flag, an env key, a field) as a note quotes it."""
    if value is not None and names_credential(name):
        return MASK  # unquoted: not a value the recipe gave
    if isinstance(value, list) and all(isinstance(word, str) for word in value):
        return repr(shown_args(value))  # a command line: args, entrypoint
    return repr(masked_value(name, value))


def _shell_unquote(text: str) -> str:
    """Recipes carry JSON arguments as shell words ('{...}'); take the word's text."""
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == "'":
        return stripped[1:-1]
    return stripped


def _accepts(key: str, raw: str) -> str | None:
    """None if the catalog takes ``raw`` for ``key``, else why not, as shown: the catalog's
    message quotes the value (``KEY='...': expected ...``, perhaps cut short, which could cut
    a credential past recognition), so a value holding a credential is quoted masked."""
    try:
        parse_value(CATALOG[key], raw)
    except ValueError as exc:
        problem = str(exc)
        shown = masked_text(raw)
        if shown == raw:
            return problem
        for quoted in (repr(raw), raw):
            if problem.startswith(f"{key}={quoted}"):
                return f"{key}={shown!r}{problem[len(key) + 1 + len(quoted):]}"
        cut = problem.find("...': ")
        if problem.startswith(f"{key}='") and cut >= 0:
            return f"{key}={shown!r}{problem[cut + 4:]}"
        return f"{key}={shown!r}: not a value {key} takes"
    return None


def _split_args(args: Sequence[str]) -> list[tuple[int, str, str | None]]:
    """(position, flag, value or None) for each flag of a serve command line."""
    found = []
    index = 0
    while index < len(args):
        flag = args[index]
        has_value = flag not in BOOLEAN_FLAGS and index + 1 < len(args) and not args[index + 1].startswith("--")
        found.append((index, flag, args[index + 1] if has_value else None))
        index += 2 if has_value else 1
    return found


def import_recipe(document: Mapping[str, Any], source: str) -> RecipeImport:
    runtime: dict[str, str] = {}
    kept: dict[str, Any] = {}
    notes: list[str] = []
    conflicts: list[str] = []
    unknown = tuple(sorted(key for key in document if key not in KNOWN_FIELDS))
    for key in unknown:
        kept[key] = document[key]
    for field_name in ("engine", "name", "docker_image", "entrypoint", "model", "parent_model",
                       "distributed_backend", "shm_size", "env", "extra_mounts", "mods"):
        if field_name in document:
            kept[field_name] = document[field_name]
    args = document.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InputError(f"{source}: args: expected an array of strings")
    flags = _split_args(args)
    # every flag given more than once is a conflict when the values differ; vLLM's
    # argparse takes the last occurrence, so that is the one imported
    occurrences: dict[str, list[tuple[int, str | None]]] = {}
    for position, flag, value in flags:
        occurrences.setdefault(flag, []).append((position, value))
    for flag, seen in occurrences.items():
        if len(seen) > 1:
            shown = ", ".join(f"args[{position}] {_shown(flag, value)}" for position, value in seen)
            if len({value for _, value in seen}) > 1:
                conflicts.append(f"{source}: {masked_flag(flag)} is given {len(seen)} times with different values ({shown}); "
                                 "vLLM takes the last, so that one is imported")
            else:
                notes.append(f"{source}: {masked_flag(flag)} is given {len(seen)} times with the same value ({shown})")
    last = {flag: seen[-1] for flag, seen in occurrences.items()}
    # a field and a flag for one setting (tensor_parallel_size and --tensor-parallel-size):
    # the flag is what vLLM reads, so it is imported; differing values are a conflict
    flag_of_key = {key: flag for flag, key in FLAG_SETTINGS.items()}
    for field_name, key in FIELD_SETTINGS.items():
        if field_name not in document:
            continue
        field_value = str(document[field_name])
        field_flag = flag_of_key.get(key)
        if field_flag is not None and field_flag in last and last[field_flag][1] is not None \
                and last[field_flag][1] != field_value:
            conflicts.append(f"{source}: {field_name} = {masked_value(field_name, field_value)} but "
                             f"args[{last[field_flag][0]}] {field_flag} {masked_value(field_flag, last[field_flag][1])}; "
                             f"{key} takes the flag's value (what vLLM reads)")
            kept[field_name] = document[field_name]
            continue
        problem = _accepts(key, field_value)
        if problem is None:
            runtime[key] = field_value
        else:
            notes.append(f"{source}: {field_name}: kept unmapped: {problem}")
            kept[field_name] = document[field_name]
    served_model_name = None
    unmapped: list[str] = []
    launcher_args: list[str] = []
    for position, flag, value in flags:
        where = f"{source}: args[{position}] {masked_flag(flag)}"
        words = [flag] + ([value] if value is not None else [])
        if last[flag][0] != position and flag in FLAG_SETTINGS:
            unmapped += words  # an earlier occurrence vLLM overrides: kept, reported above
            continue
        if flag == "--served-model-name" and value is not None:
            served_model_name = value
            # the name the recipe served is the launch's too (runtime.env SERVED_MODEL_NAME)
            problem = _accepts("SERVED_MODEL_NAME", value)
            if problem is None:
                runtime["SERVED_MODEL_NAME"] = value
            else:
                notes.append(f"{where}: not a SERVED_MODEL_NAME: {problem}")
        elif flag in FLAG_SETTINGS and value is not None:
            problem = _accepts(FLAG_SETTINGS[flag], value)
            if problem is None:
                runtime[FLAG_SETTINGS[flag]] = value
            else:
                notes.append(f"{where}: kept unmapped: {problem}")
                unmapped += words
        elif flag in KV_MEMORY_FLAGS and value is not None:
            byte_count = int(value) if re.fullmatch(r"[0-9]{1,19}", value) else -1
            if byte_count > 0 and byte_count % (1 << 30) == 0 and _accepts("KV_CACHE_GIB", str(byte_count >> 30)) is None:
                runtime["KV_CACHE_GIB"] = str(byte_count >> 30)
            else:
                unmapped += words
                notes.append(f"{where} {masked_value(flag, value)}: not a whole number of GiB; kept unmapped")
        elif flag == "--speculative-config" and value is not None:
            _import_speculative(value, where, runtime, kept, notes)
        elif flag in LAUNCHER_FLAGS:
            launcher_args += words
            notes.append(f"{where}: the launcher sets it itself; the recipe's {' '.join(shown_args(words))!r} is kept "
                         f"under [recipe].{LAUNCHER_ARGS}")
        else:
            unmapped += words
    if launcher_args:
        kept[LAUNCHER_ARGS] = launcher_args
    transfer = [value for _, flag, value in flags if flag == "--kv-transfer-config" and value is not None]
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
        conflicts=tuple(conflicts),
    )


def _import_speculative(value: str, where: str, runtime: dict[str, str], kept: dict[str, Any], notes: list[str]) -> None:
    """Method and depth map to settings; the rest (the draft model, "{{dflash}}" in the
    seed, and keys without a setting) is kept whole under [recipe]."""
    try:
        speculative = parse_json(_shell_unquote(value), f"{where}")
    except InputError as exc:
        raise InputError(f"{where}: not JSON: {exc.message.removeprefix(where + ': ')}") from None
    if not isinstance(speculative, dict):
        raise InputError(f"{where}: expected a JSON object")
    mapped = {"method": "SPECULATIVE_METHOD", "num_speculative_tokens": "SPECULATIVE_TOKENS"}
    rest = {k: v for k, v in speculative.items() if k not in mapped}
    for name, key in mapped.items():
        if name not in speculative:
            continue
        problem = _accepts(key, str(speculative[name]))
        if problem is None:
            runtime[key] = str(speculative[name])
        else:
            rest[name] = speculative[name]
            notes.append(f"{where}: {name}: kept unmapped: {problem}")
    if isinstance(kept.get(SPECULATIVE_EXTRA), dict):  # a recipe we exported: its field is the recipe's own
        rest = {**rest, **kept[SPECULATIVE_EXTRA]}
    if rest:
        kept[SPECULATIVE_EXTRA] = rest
        notes.append(f"speculative config fields without a setting kept under [recipe].{SPECULATIVE_EXTRA}: "
                     + ", ".join(sorted(rest)))


@dataclass(frozen=True)
class RecipeExport:
    document: dict[str, Any]
    notes: tuple[str, ...]  # what of the imported recipe the launch replaced


def export_recipe(plan: Any, imported: Mapping[str, Any] | None = None) -> RecipeExport:
    """A recipe document for ``plan`` (a ``LaunchPlan``): what the launcher would run.
    ``imported`` is the ``[recipe]`` table an import wrote: its env vars, mounts, mods,
    unmapped and launcher arguments, speculative extras and other fields are carried
    into the document; where the launch sets the same thing differently, the launch's
    value is written and a note says what of the recipe's was replaced."""
    values = plan.resolution.values
    spec = plan.spec
    notes: list[str] = []
    args = list(spec.serve_args[1:])
    env = dict(spec.env)
    mounts = [{"host": m.source, "container": m.target, "read_only": m.read_only} for m in spec.mounts]
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
    }
    if values["SHM_SIZE"] is not None:
        document["shm_size"] = str(values["SHM_SIZE"])
    recipe = dict(imported or {})
    launch_flags = {flag: value for _, flag, value in _split_args(args)}
    for words in (_grouped(recipe.get(UNMAPPED_ARGS, [])), _grouped(recipe.get(LAUNCHER_ARGS, []))):
        for flag, value in words:
            if flag in launch_flags:
                if launch_flags[flag] != value:
                    notes.append(f"{masked_flag(flag)}: the launch sets {_shown(flag, launch_flags[flag])}; "
                                 f"the recipe's {_shown(flag, value)} is not written")
                continue
            args += [flag] + ([value] if value is not None else [])
    for key, value in (recipe.get("env") or {}).items():
        if key in env and env[key] != value:
            notes.append(f"env {key}: the launch sets {_shown(key, env[key])}; the recipe's {_shown(key, value)} "
                         "is not written")
        else:
            env[key] = value
    taken = {m["container"] for m in mounts}
    for mount in recipe.get("extra_mounts") or []:
        if isinstance(mount, Mapping) and mount.get("container") in taken:
            notes.append(f"mount {masked_value('container', mount.get('container'))}: the launch mounts it itself; the recipe's "
                         f"{masked_value('mount', dict(mount))} is not written")
        else:
            mounts.append(mount)
    document["args"] = args
    document["env"] = dict(sorted(env.items()))
    document["extra_mounts"] = mounts
    for key, value in recipe.items():
        if key in (UNMAPPED_ARGS, LAUNCHER_ARGS, UNKNOWN_FIELDS, "env", "extra_mounts"):
            continue
        if key in document:  # the launch's own image, model path, name, ranks
            if document[key] != value:
                notes.append(f"{key}: the launch sets {_shown(key, document[key])}; the recipe's {_shown(key, value)} "
                             "is not written")
            continue
        document[key] = value  # parent_model, mods, the speculative extras, unknown fields
    return RecipeExport(document, tuple(notes))


def _grouped(words: Sequence[str]) -> list[tuple[str, str | None]]:
    return [(flag, value) for _, flag, value in _split_args(list(words))]


def summarize(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"
