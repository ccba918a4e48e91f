"""``profiles/<name>/runtime.env.example``, generated from the catalog and the profile.

The site values are set to documentation addresses and paths (to be replaced); every
tunable is listed commented out with its effective default for the profile, so removing
the ``#`` of a line changes nothing until its value is edited.
"""

from __future__ import annotations

from ..profile.settings_catalog import CATALOG_LIST, parse_value, render_value
from .contract import LaunchContract
from .envfile import render_env_value

SITE_EXAMPLES = {
    "NODE_ADDRESS": "192.0.2.11",
    "MASTER_ADDRESS": "192.0.2.11",
    "TARGET_MODEL_PATH": "/srv/models/glm-5.3-flash-nvfp4",
    "DRAFT_MODEL_PATH": "/srv/models/glm-5.3-flash-dflash2",
    "CACHE_ROOT": "/var/lib/sparkflake/rank-cache",
    "CHECKPOINT_PINS": "/etc/sparkflake/checkpoint-pins.json",
    # the seeds' hosts' names (SparkRing runtime/glm53-flash-jj-r8-gb10/runtime.env.example)
    "SOCKET_IFNAME": "enP7s7",
    "NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1",
}

GROUP_TITLES = {
    "site": "Site values (required): this rank's and rank 0's addresses, checkpoints, cache root",
    "topology": "Topology",
    "capacity": "Capacity and batching",
    "kv": "KV cache layout",
    "speculation": "Speculative decoding",
    "backends": "Backends",
    "cuda-graphs": "CUDA graphs",
    "serving": "Serving surface (rank 0's OpenAI API)",
    "sparkcache": "SparkCache (persistent, rank-local context cache)",
    "ports": "Ports",
    "transport": "Transport (NCCL/Gloo)",
    "host": "Host",
    "container": "Container",
}


def render_example(contract: LaunchContract) -> str:
    external_draft = contract.runtime_defaults.get("SPECULATIVE_METHOD", "dflash") == "dflash"
    lines = [
        f"# runtime.env for one rank of profile {contract.profile}.",
        "# Read as data by `sparkflake launch-rank RANK runtime.env --profile "
        f"{contract.profile}`: KEY=VALUE, '#' comments, POSIX",
        "# single and double quotes. Nothing is expanded or executed ($VAR, $(...), `...`, ~ are",
        "# refused). Unknown keys are refused. Lines starting with '#' show the profile's",
        "# default; 'auto' values follow the DCP rules (docs/operator-guide.md).",
        "# Generated from the settings catalog (sparkflake.launch.example); do not edit by hand.",
    ]
    group = None
    for setting in CATALOG_LIST:
        if setting.group != group:
            group = setting.group
            lines += ["", f"# --- {GROUP_TITLES[group]} " + "-" * max(3, 70 - len(GROUP_TITLES[group]))]
        if setting.key == "DRAFT_MODEL_PATH" and not external_draft:
            lines.append(f"# {setting.key}: {setting.doc}; not used by this profile (embedded draft)")
            continue
        lines.append(f"# {setting.key}: {setting.doc}")
        extras = []
        if setting.choices:
            extras.append("one of " + ", ".join(setting.choices))
        if setting.minimum is not None and not setting.choices:
            extras.append(f"{_num(setting.minimum)}..{_num(setting.maximum)}")
        if setting.identity:
            extras.append("changes the runtime identity (stored state)")
        if extras:
            lines.append("#   (" + "; ".join(extras) + ")")
        if setting.key in SITE_EXAMPLES:
            lines.append(f"{setting.key}={render_env_value(SITE_EXAMPLES[setting.key])}")
            continue
        raw = contract.runtime_defaults.get(setting.key, setting.default or "")
        shown = render_value(parse_value(setting, raw)) if raw not in ("auto", "") else raw
        lines.append(f"#{setting.key}={render_env_value(shown) if shown else ''}")
    return "\n".join(lines) + "\n"


def _num(number: float | None) -> str:
    if number is None:
        return ""
    return str(int(number)) if float(number).is_integer() else str(number)
