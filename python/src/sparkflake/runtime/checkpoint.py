"""Synthetic checkpoint directories for the runtime check: the ``config.json`` that vLLM's
ModelConfig (and the speculative config's draft model config) read, no weights.

The check binds them read-only where the launcher mounts the real checkpoints
(``ContainerMount``), so vLLM's own code resolves ``--model`` to a local directory as it
does in the container (HF_HUB_OFFLINE: vllm/engine/arg_utils.py:933 get_model_path).

The target is GLM-5.3 Flash: ``Glm5NextForCausalLM`` is the architecture of the image's
vLLM registry (vllm/model_executor/models/registry.py:127, module vllm.models.glm5next)
and ``glm5_next`` the model_type of its transformers config
(transformers/models/glm5_next/configuration_glm5_next.py:290, transformers 5.20.2), whose
defaults are the GLM-5.3 Flash shape; ``max_position_embeddings`` 1048576 is that
config's default (:122), written out because ModelConfig derives the longest
``--max-model-len`` it allows from it. The draft is the DFlash2 head as the registry names
it (registry.py:666 ``DFlash2DraftModel``, qwen3_dflash2): no config of the real draft is
available here, so its fields are the ones vLLM's code reads (dflash_config's
target_layer_ids and mask_token_id: vllm/config/speculative.py:262,357; the DFlash2 keys
its constructors read, for the default launch's meta-device construction; hidden and vocab
sizes equal to the target's). What the draft part yields is recorded, and judged only
where vLLM's validation names a launch value.

The target's MTP head: vLLM's MTP draft for ``glm5_next`` reads
``num_nextn_predict_layers`` with no default (vllm/config/speculative.py:1154), and the
transformers config has no such field, so the real checkpoint's config.json carries it; its
value is not known here. The stand-in has a one-layer head, which every depth divides
(speculative.py:1604), so the check judges everything of an MTP launch but the depth rule,
and the rank judges that rule against the real checkpoint (launch/mtp_depth.py).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic

TARGET, DRAFT, WRITABLE = "target", "draft", "writable"
GLM53_MAX_POSITIONS = 1048576
# The GLM-5.3 Flash depth: the transformers config's default (configuration_glm5_next.py:105),
# which the synthetic config.json leaves to it; the MTP head's layer index follows it
GLM53_HIDDEN_LAYERS = 45
CONFIGS: dict[str, dict[str, Any]] = {
    TARGET: {
        "architectures": ["Glm5NextForCausalLM"],
        "model_type": "glm5_next",
        "max_position_embeddings": GLM53_MAX_POSITIONS,
        "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16",
        # The served checkpoint is ModelOpt NVFP4 (the profile's "GLM-5.3 Flash NVFP4"
        # target): weights and activations FP4 in groups of 16, FP8 KV, the LM head and the
        # MTP head left in BF16. vLLM reads it as ModelOptNvFp4Config
        # (model_executor/layers/quantization/modelopt.py:345 from_config: quant_method
        # "modelopt", quant_algo, group_size, kv_cache_quant_algo, exclude_modules), which
        # selects the NVFP4 MoE and linear kernels the runtime check judges. The MTP head is
        # named as vLLM names it: its layers follow the target's hidden layers
        # (models/glm5next/common/mtp.py:111-118, "model.layers.<num_hidden_layers + i>", the
        # decoder layer under that same prefix, :70-75), matched as a ModelOpt wildcard
        # (modelopt.py:222 fnmatch); a pattern vLLM's prefixes do not match would quantize the
        # head and hand its MoE to the NVFP4 oracle.
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                                "kv_cache_quant_algo": "FP8",
                                "exclude_modules": ["lm_head", f"model.layers.{GLM53_HIDDEN_LAYERS}*"]},
        # Read with no default when the model is constructed (the default launch's meta-device
        # construction, in_image/probe_meta_model.py) and absent from the transformers config,
        # so the real checkpoint's config.json carries them: the manifold hyper-connections
        # (vllm/models/glm5next/common/model.py:380 mhc; their width and iterations are the
        # transformers defaults, configuration_glm5_next.py:147-149), NoPE MLA (:411
        # mla_use_nope; the config's qk_rope_head_dim is 0), GLM's router (:256 topk_method,
        # :312 scoring_func: sigmoid, bias-corrected grouped top-k as DeepSeek-V3's) and the
        # indexer's rotary layout (common/attention.py:514 indexer_rope_interleave).
        "mhc": True,
        "mla_use_nope": True,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "indexer_rope_interleave": True,
    },
    DRAFT: {
        "architectures": ["DFlash2DraftModel"],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 154880,
        "max_position_embeddings": GLM53_MAX_POSITIONS,
        "torch_dtype": "bfloat16",
        # DFlash2's grouped convolutions and candidate selector, read with no default when the
        # draft is constructed (vllm/model_executor/models/qwen3_dflash2.py:253-254
        # conv_kernel_size, conv_group_size; :385-386 selector_rank, selector_top_k; the
        # speculator's top-k, v1/worker/gpu/spec_decode/dflash2/speculator.py:195): the
        # values of a public DFlash-to-DFlash2 converter (Slyne/NeMo scripts/speechlm2/
        # convert_dflash_to_dflash2.py, as its tests state them), the real draft's being unknown
        "dflash_config": {"target_layer_ids": [1, 22, 43], "mask_token_id": 154820, "conv_kernel_size": 2,
                          "conv_group_size": 16, "selector_rank": 256, "selector_top_k": 16},
    },
}


# The target's tokenizer as vLLM builds it when a reasoning parser is set: VllmConfig's
# validation derives the reasoning token ids from it (vllm/config/vllm.py:2209
# ReasoningConfig.initialize_token_ids, config/reasoning.py:79 cached_tokenizer_from_config),
# and the GLM parsers look their markers up in its vocabulary (vllm/parser/glm47_moe.py:39-52,
# parser/engine/parser_engine.py:203 get_vocab). No GLM-5.3 tokenizer can be fetched here:
# a word-level tokenizer in the `tokenizers` library's own serialization holding the GLM
# chat and tool-call markers stands in; what a real vocabulary would change (token ids) no
# check judges.
GLM_MARKERS = ("<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
               "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>", "<tool_response>", "</tool_response>")


def tokenizer_files() -> dict[str, dict[str, Any]]:
    """tokenizer.json and tokenizer_config.json of the target's stand-in tokenizer."""
    vocabulary = {"<unk>": 0, **{marker: index for index, marker in enumerate(GLM_MARKERS, 1)}}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": index, "content": marker, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for marker, index in vocabulary.items()],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocabulary, "unk_token": "<unk>"},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
              "model_max_length": GLM53_MAX_POSITIONS}
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


@dataclass(frozen=True)
class ContainerMount:
    """A directory the container runtime mounts at ``inside``: a checkpoint (``target`` or
    ``draft``, read-only) or a directory the container writes (``writable``: the JIT and
    cache roots)."""

    inside: str
    role: str


def prepare(scratch: Path, mounts: list[ContainerMount] | tuple[ContainerMount, ...]) -> list[tuple[Path, str, bool]]:
    """The host directories for ``mounts`` under ``scratch/mounts`` (made afresh: this
    check's own scratch, as ``scratch.py`` decides), as sandbox binds (host, inside, writable)."""
    base = scratch / "mounts"
    shutil.rmtree(base, ignore_errors=True)
    binds = []
    for index, mount in enumerate(mounts):
        host = base / f"{index}-{mount.role}"
        host.mkdir(parents=True)
        if mount.role in CONFIGS:
            write_bytes_atomic(host / "config.json", json.dumps(CONFIGS[mount.role], indent=2).encode())
            if mount.role == TARGET:
                for name, document in tokenizer_files().items():
                    write_bytes_atomic(host / name, json.dumps(document, indent=2).encode())
        elif mount.role != WRITABLE:
            raise ValueError(f"unknown mount role {mount.role!r}")
        binds.append((host, mount.inside, mount.role == WRITABLE))
    return binds
