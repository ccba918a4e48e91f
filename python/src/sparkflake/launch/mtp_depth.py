"""``checkpoint.mtp-depth``: an embedded-MTP launch's depth against the target checkpoint's
own MTP head, read from its ``config.json`` at launch.

vLLM 0.33.0 builds the MTP draft from the target's config: for ``glm5_next`` it takes
``n_predict`` from ``get_text_config().num_nextn_predict_layers`` with no default
(vllm/config/speculative.py:1146-1157, an AttributeError when the field is absent), then
refuses a depth above ``n_predict`` that is not a multiple of it, because the head's layers
are reused in turn (speculative.py:1600-1612). A zero there is a ZeroDivisionError at start.

The runtime check cannot judge this: the real checkpoint is not in the image, and its
synthetic stand-in (runtime/checkpoint.py) has a one-layer head, which every depth divides.
So the rank judges it here, where the checkpoint is, before anything starts.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.check_result import FAIL, PASS, CheckResult
from ..core.documents import read_json_file
from ..core.errors import InputError

CHECK_ID = "checkpoint.mtp-depth"
FIELD = "num_nextn_predict_layers"
MAX_CONFIG_BYTES = 4 << 20  # a model config.json is a few KB; 4 MiB is far beyond any


def head_layers(config: Any, shown: str) -> int:
    """The MTP head's layer count as vLLM reads it: from ``text_config`` when the config
    nests one (transformers' get_text_config), else from the top level."""
    if not isinstance(config, dict):
        raise InputError(f"{shown}: expected a JSON object")
    text = config.get("text_config")
    where, source = ("text_config", text) if isinstance(text, dict) else ("", config)
    path = f"{shown}: {where + '.' if where else ''}{FIELD}"
    if FIELD not in source:
        raise InputError(f"{path} is absent: the checkpoint has no embedded MTP head vLLM can draft with")
    value = source[FIELD]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{path} is {value!r}, expected a whole number of MTP layers, at least 1")
    return value


def depth_problem(depth: int, layers: int) -> str | None:
    """Why vLLM refuses ``depth`` speculative tokens over a head of ``layers`` layers, or None."""
    if depth > layers and depth % layers:
        return (f"SPECULATIVE_TOKENS={depth} over a {layers}-layer MTP head: vLLM reuses the head's layers in "
                f"turn and needs a depth of at most {layers} or a multiple of it")
    return None


def check_mtp_depth(target_directory: str, depth: int) -> CheckResult:
    config_path = os.path.join(target_directory, "config.json")
    try:
        layers = head_layers(read_json_file(config_path, "a model config", MAX_CONFIG_BYTES), config_path)
    except InputError as exc:
        return CheckResult(CHECK_ID, FAIL, f"{exc}; set SPECULATIVE_METHOD to a method this checkpoint serves")
    problem = depth_problem(depth, layers)
    if problem is not None:
        return CheckResult(CHECK_ID, FAIL, f"{config_path}: {problem}")
    return CheckResult(CHECK_ID, PASS, f"{config_path}: {depth} speculative tokens over a {layers}-layer MTP head")
