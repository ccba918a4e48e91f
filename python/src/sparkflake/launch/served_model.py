"""``checkpoint.target.model`` / ``checkpoint.draft.model``: the model a rank will serve, read
from the real checkpoint on the rank — its ``config.json`` and the headers of its
safetensors files — before anything starts.

The runtime check judges a weightless checkpoint of the profile's architectures in the
image; this is what ties its verdict to the checkpoint the rank mounts. ``read_served_model``
is a pure function of the directory's files giving a typed ``ServedModel``: the config
(whole, as vLLM's ModelConfig reads it), its architecture, the dimensions that select
kernels, the quantization config, and per-dtype and per-kind tensor facts from the headers.
``check_served_model`` judges it against the profile's ``[checkpoints.ROLE] architecture``.

Which weight files vLLM 0.33.0 loads: with ``model.safetensors.index.json``, exactly the
shards its ``weight_map`` names (each must exist); else every top-level ``*.safetensors``
(vllm/model_executor/model_loader/weight_utils.py:590 filter_duplicate_safetensors_files).
Which architecture it serves: the first entry of ``architectures`` its registry knows
(vllm/model_executor/models/registry.py:1401 inspect_model_cls), so the profile's must be
the first. A file reached through a symlink that leaves the directory is refused: the
container mounts the directory alone, where such a link does not resolve.

A checkpoint that cannot be read or whose files break their format is bad input (the check
is ``error``, exit 2); a readable checkpoint of another architecture fails (exit 1).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..core.check_result import ERROR, FAIL, PASS, CheckResult
from ..core.documents import is_utf8_text, parse_json, read_regular_file
from ..core.errors import InputError
from .safetensors_header import SafetensorsHeader, read_header

CONFIG_FILE = "config.json"
_NUMBERED = re.compile(r"(?<![^.])[0-9]+(?![^.])")  # a whole dot-separated component of digits
INDEX_FILE = "model.safetensors.index.json"
MAX_CONFIG_BYTES = 4 << 20  # a model config.json is a few KB
MAX_INDEX_BYTES = 64 << 20  # GLM-5.3's index names ~10^5 tensors in a few MB
# The config fields that decide which attention, MoE and linear kernels vLLM selects and
# how the KV cache is laid out: the GLM-5.3 text config's (transformers
# models/glm5_next/configuration_glm5_next.py:92-141) and the Qwen3 draft's.
DIMENSION_KEYS = (
    "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "kv_lora_rank", "q_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts",
    "num_experts_per_tok", "index_topk", "index_head_dim", "index_n_heads", "index_kpool",
    "linear_head_dim", "linear_num_heads", "vocab_size", "max_position_embeddings",
    "num_nextn_predict_layers",
)


@dataclass(frozen=True)
class DtypeTotal:
    """The tensors of one dtype in a checkpoint's safetensors headers: how many, and their
    bytes (the header's data offsets, not the file sizes)."""

    tensors: int
    bytes: int


@dataclass(frozen=True)
class TensorGroup:
    """Tensors whose names differ only in numeric components (layer, expert)."""

    pattern: str  # the name with each numeric component as "*"
    count: int
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ServedModel:
    directory: str
    config: Mapping[str, Any]  # config.json as read: the model config vLLM builds from
    architectures: tuple[str, ...]
    model_type: str | None
    dtype: str | None  # config's dtype (torch_dtype in older configs)
    dimensions: Mapping[str, int | None]  # DIMENSION_KEYS present in the (text) config
    layer_types: Mapping[str, int]  # the text config's layer_types, counted
    quantization_config: Mapping[str, Any] | None
    shards: tuple[str, ...]
    dtype_totals: Mapping[str, DtypeTotal]
    tensor_groups: tuple[TensorGroup, ...]

    def __post_init__(self) -> None:
        for name in ("config", "dimensions", "layer_types", "dtype_totals"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def tensor_count(self) -> int:
        return sum(total.tensors for total in self.dtype_totals.values())

    def summary(self) -> str:
        quantization = (self.quantization_config or {}).get("quant_method", "none")
        dtypes = ", ".join(f"{dtype} {total.tensors}" for dtype, total in self.dtype_totals.items())
        return (f"{self.architectures[0]} ({self.model_type or 'no model_type'}), {self.tensor_count} tensors in "
                f"{len(self.shards)} shards ({dtypes}), quantization {quantization}")

    def as_record(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "architectures": list(self.architectures),
            "model_type": self.model_type,
            "dtype": self.dtype,
            "dimensions": dict(self.dimensions),
            "layer_types": dict(self.layer_types),
            "quantization_config": self.quantization_config,
            "shards": list(self.shards),
            "dtypes": {dtype: {"tensors": t.tensors, "bytes": t.bytes} for dtype, t in self.dtype_totals.items()},
            "tensor_groups": [
                {"pattern": g.pattern, "count": g.count, "dtypes": list(g.dtypes), "shapes": [list(s) for s in g.shapes]}
                for g in self.tensor_groups
            ],
            "config": dict(self.config),
        }


def inside(directory: str, name: str) -> str:
    """``directory/name``, refused if it resolves outside ``directory`` or is no file name
    (a NUL byte, or a lone surrogate that no file system name encodes: a checkpoint's index
    names its shards, and whatever it says is read from here)."""
    if "\x00" in name or not is_utf8_text(name):
        raise InputError(f"{directory}: {name!r}: not a file name (a NUL byte or text that is not UTF-8)")
    path = os.path.join(directory, name)
    root = os.path.realpath(directory)
    target = os.path.realpath(path)
    if os.path.commonpath([root, target]) != root:
        raise InputError(f"{path}: resolves to {target}, outside the checkpoint directory; the container mounts "
                         "only the directory, where this link does not resolve (a Hugging Face cache snapshot links "
                         "into its blobs: point the launch at a directory holding the files themselves)")
    return path


def _config_facts(config: dict[str, Any], shown: str) -> tuple[tuple[str, ...], dict[str, Any], str]:
    """The architectures, the text config (``text_config`` when nested, as transformers'
    get_text_config reads it) and its JSON path prefix."""
    architectures = config.get("architectures")
    if (not isinstance(architectures, list) or not architectures
            or not all(isinstance(name, str) and name for name in architectures)):
        raise InputError(f"{shown}: $.architectures: expected a non-empty array of model class names")
    text = config.get("text_config")
    return (tuple(architectures), text, "$.text_config") if isinstance(text, dict) else (tuple(architectures), config, "$")


def _dimensions(text: Mapping[str, Any], place: str, shown: str) -> dict[str, int | None]:
    dimensions: dict[str, int | None] = {}
    for key in DIMENSION_KEYS:
        if key not in text:
            continue
        value = text[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InputError(f"{shown}: {place}.{key}: expected a non-negative integer, got {str(value)[:40]!r}")
        dimensions[key] = value
    return dimensions


def _optional_str(config: Mapping[str, Any], key: str, shown: str) -> str | None:
    value = config.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{shown}: $.{key}: expected a string")
    return value


def _weight_map(directory: str) -> dict[str, str] | None:
    """``weight_map`` of the index (tensor name -> shard file), or None without an index."""
    path = os.path.join(directory, INDEX_FILE)
    if not os.path.lexists(path):
        return None
    document = parse_json(read_regular_file(inside(directory, INDEX_FILE), "a safetensors index", MAX_INDEX_BYTES), path)
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(shard, str) and shard for shard in weight_map.values()):
        raise InputError(f"{path}: $.weight_map: expected an object of tensor name -> shard file name")
    return weight_map


def _shard_names(directory: str, weight_map: Mapping[str, str] | None) -> tuple[str, ...]:
    if weight_map is not None:
        shards = tuple(sorted(set(weight_map.values())))
        for shard in shards:
            if os.path.isabs(shard) or os.path.normpath(shard) != shard or shard.startswith(".."):
                tensor = next(name for name, value in weight_map.items() if value == shard)
                raise InputError(f"{os.path.join(directory, INDEX_FILE)}: $.weight_map[{tensor!r}]: "
                                 f"{shard!r} is not a relative path inside the checkpoint")
        return shards
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".safetensors"))
    except OSError as exc:
        raise InputError(f"{directory}: cannot list the checkpoint: {exc.strerror}") from None
    if not names:
        raise InputError(f"{directory}: no {INDEX_FILE} and no *.safetensors: no weights vLLM could load")
    return tuple(names)


def _tensor_facts(headers: Mapping[str, SafetensorsHeader]) -> tuple[dict[str, DtypeTotal], tuple[TensorGroup, ...]]:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    groups: dict[str, tuple[int, set[str], set[tuple[int, ...]]]] = {}
    for header in headers.values():
        for tensor in header.tensors:
            counts[tensor.dtype] += 1
            sizes[tensor.dtype] += tensor.nbytes
            pattern = _NUMBERED.sub("*", tensor.name)
            count, dtypes, shapes = groups.get(pattern, (0, set(), set()))
            dtypes.add(tensor.dtype)
            shapes.add(tensor.shape)
            groups[pattern] = (count + 1, dtypes, shapes)
    totals = {dtype: DtypeTotal(counts[dtype], sizes[dtype]) for dtype in sorted(counts)}
    return totals, tuple(TensorGroup(pattern, count, tuple(sorted(dtypes)), tuple(sorted(shapes)))
                         for pattern, (count, dtypes, shapes) in sorted(groups.items()))


def _check_weight_map(directory: str, weight_map: Mapping[str, str], owner: Mapping[str, str]) -> None:
    """Every tensor the index names is in the shard it names (``owner``: tensor -> shard)."""
    for tensor, shard in weight_map.items():
        if owner.get(tensor) != shard:
            raise InputError(f"{os.path.join(directory, INDEX_FILE)}: $.weight_map[{tensor!r}] names {shard}, "
                             "whose header has no such tensor")


def read_served_model(directory: str) -> ServedModel:
    """What the checkpoint at ``directory`` serves; InputError for anything unreadable or
    malformed (naming the file and the place in it)."""
    config_path = os.path.join(directory, CONFIG_FILE)
    config = parse_json(read_regular_file(inside(directory, CONFIG_FILE), "a model config", MAX_CONFIG_BYTES),
                        config_path)
    if not isinstance(config, dict):
        raise InputError(f"{config_path}: expected a JSON object")
    architectures, text, place = _config_facts(config, config_path)
    layer_types = text.get("layer_types")
    quantization = config.get("quantization_config", text.get("quantization_config"))
    if quantization is not None and not isinstance(quantization, dict):
        raise InputError(f"{config_path}: $.quantization_config: expected an object")
    weight_map = _weight_map(directory)
    shards = _shard_names(directory, weight_map)
    headers: dict[str, SafetensorsHeader] = {}
    owner: dict[str, str] = {}
    for shard in shards:
        headers[shard] = read_header(inside(directory, shard))
        for tensor in headers[shard].tensors:
            if tensor.name in owner:
                raise InputError(f"{directory}: tensor {tensor.name!r} is in both {owner[tensor.name]} and {shard}")
            owner[tensor.name] = shard
    if weight_map is not None:
        _check_weight_map(directory, weight_map, owner)
    totals, groups = _tensor_facts(headers)
    return ServedModel(
        directory=directory,
        config=config,
        architectures=architectures,
        model_type=_optional_str(config, "model_type", config_path),
        dtype=_optional_str(config, "dtype", config_path) or _optional_str(config, "torch_dtype", config_path),
        dimensions=_dimensions(text, place, config_path),
        layer_types=dict(sorted(Counter(layer_types).items()))
        if isinstance(layer_types, list) and all(isinstance(kind, str) for kind in layer_types) else {},
        quantization_config=quantization,
        shards=shards,
        dtype_totals=totals,
        tensor_groups=groups,
    )


def check_served_model(check_id: str, directory: str, architecture: str | None) -> tuple[CheckResult, ServedModel | None]:
    """The check of the checkpoint at ``directory`` against the profile's ``architecture``
    (None: any), and what it read (None when it could not)."""
    try:
        model = read_served_model(directory)
    except InputError as exc:
        return CheckResult(check_id, ERROR, exc.message), None
    if architecture is not None and model.architectures[0] != architecture:
        role = check_id.split(".")[1]
        return CheckResult(
            check_id, FAIL,
            f"{os.path.join(directory, CONFIG_FILE)}: architectures {list(model.architectures)}: vLLM would serve "
            f"{model.architectures[0]}, the profile serves {architecture} (checkpoints.{role}.architecture), which "
            "is what the runtime check judged; point the launch at a checkpoint of that architecture",
        ), model
    return CheckResult(check_id, PASS, f"{directory}: {model.summary()}"), model
