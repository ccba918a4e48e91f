"""The settings catalog: every key a runtime.env may set, its type, range and default.

This module owns the vocabulary, beside the profile model that names its keys: the
profile's ``[runtime]`` table (defaults) and ``[qualified]`` table (the qualified
configuration) may only use keys of this catalog (``validate_runtime_table``, which
``sparkflake profile check`` applies), and the launch stage resolves a ``runtime.env``
against it.

Values are parsed from strings with one strict grammar per kind: integers are plain
decimal digits (``26GiB``, ``-1``, ``0x10``, ``1e3`` are refused), sizes are plain byte
counts, booleans are ``0``/``1``. ``auto`` is accepted only by settings that have an auto
rule (see ``resolve``).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.addresses import zone_names_interface
from ..core.digest import SHA256_HEX_PATTERN
from ..core.errors import InputError

GiB = 1 << 30
AUTO = "auto"

# At most 19 digits (every count and size here fits in 63 bits): a longer number is
# refused by the pattern, before int() (which raises past 4,300 digits) or float() (inf).
_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,18})\Z")
_FLOAT = re.compile(r"(0|[1-9][0-9]{0,18})(\.[0-9]{1,18})?\Z")
_IFNAME = re.compile(r"[A-Za-z0-9_.:@^!=-]{1,64}(,[A-Za-z0-9_.:@^!=-]{1,64})*\Z")
_TOKEN = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")
# vLLM's --served-model-name is any string; the OpenAI API returns it as the model id. Letters,
# digits and the separators of hub names ("zai-org/GLM-5.3") are enough and stay one argv word.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}\Z")
_ULIMIT = re.compile(r"([a-z]+)=(-1|[0-9]{1,20})(:(-1|[0-9]{1,20}))?\Z")
_LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


@dataclass(frozen=True)
class Setting:
    key: str
    kind: str  # int | bytes | float | bool | enum | path | address | token | name | sha256 | ifname | ulimits
    group: str
    doc: str
    default: str | None = None  # None = required (no default)
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    auto: bool = False  # "auto" is allowed and resolved by a rule
    allow_empty: bool = False  # "" means: leave the engine's own default
    identity: bool = False  # changes stored state (part of the runtime identity)
    site: bool = False  # a site value (addresses, paths): not part of qualification
    refused: Mapping[str, str] = field(default_factory=dict)  # value -> reason

    @property
    def required(self) -> bool:
        return self.default is None


def _s(key: str, kind: str, group: str, doc: str, **kwargs: Any) -> Setting:
    return Setting(key=key, kind=kind, group=group, doc=doc, **kwargs)


def _kernel_backend(key: str, what: str, default: str) -> Setting:
    """A kernel backend vLLM takes by name: one the image lists in its runtime-capabilities
    (the launch checks it there), or empty for vLLM's own choice; part of the identity."""
    return _s(key, "token", "backends", f"{what} (one of the image's runtime-capabilities); empty: vLLM selects",
              default=default, allow_empty=True, identity=True)


# vLLM 0.33.0's registered parser names: vllm/tool_parsers/__init__.py
# (_TOOL_PARSERS_TO_REGISTER) and vllm/reasoning/__init__.py (_REASONING_PARSERS_TO_REGISTER).
TOOL_CALL_PARSERS = (
    "apertus", "beam", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31",
    "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots", "ernie45", "functiongemma", "gemma4",
    "gigachat3", "glm45", "glm47", "granite", "granite-20b-fc", "granite4", "hermes", "hf",
    "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "internlm", "jamba", "k2_horizon", "kimi_k2",
    "kimi_k3", "lfm2", "ling3", "llama3_json", "llama4_json", "llama4_pythonic", "longcat", "mimo",
    "minicpm5", "minimax_m2", "minimax_m3", "mistral", "muse", "muse_glimmer", "musespark1x",
    "olmo3", "openai", "phi4_mini_json", "plamo3", "poolside_v1", "pythonic", "qwen3_coder",
    "qwen3_json", "qwen3_xml", "seed_oss", "step3", "step3p5", "step5", "xlam",
)
REASONING_PARSERS = (
    "beam", "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4",
    "deepseek_v41", "ernie45", "gemma4", "glm45", "glm47", "granite", "granite_thinking_parser",
    "hf", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "k2_horizon", "kimi_k2", "kimi_k3",
    "ling3", "mimo", "minicpmv", "minimax_m2", "minimax_m2_append_think", "minimax_m3", "mistral",
    "muse", "muse_glimmer", "musespark1x", "nemotron_v3", "olmo3", "openai_gptoss", "plamo3",
    "poolside_v1", "qwen3", "seed_oss", "step3", "step3p5", "step5",
)

CATALOG_LIST: tuple[Setting, ...] = (
    # --- site: the five values every rank must supply ---------------------------------
    _s("NODE_ADDRESS", "address", "site", "this rank's address on the serving fabric", site=True),
    _s("MASTER_ADDRESS", "address", "site", "rank 0's address (rendezvous)", site=True),
    _s("TARGET_MODEL_PATH", "path", "site", "host directory of the target checkpoint", site=True),
    _s(
        "DRAFT_MODEL_PATH", "path", "site",
        "host directory of the external draft checkpoint (required for SPECULATIVE_METHOD=dflash)",
        default="", allow_empty=True, site=True,
    ),
    _s("CACHE_ROOT", "path", "site", "dedicated rank-local cache root (SparkCache, JIT)", site=True),
    _s(
        "CHECKPOINT_PINS", "path", "site",
        "the site's checkpoint pins file (`sparkflake checkpoint pin`); empty: only the profile's files",
        default="", allow_empty=True, site=True,
    ),
    # --- topology -------------------------------------------------------------------
    _s("NODE_COUNT", "int", "topology", "number of hosts (one GB10 GPU each)", default="4",
       minimum=1, maximum=64, identity=True),
    _s("TP", "int", "topology", "tensor-parallel size", default="4", minimum=1,
       maximum=64, identity=True),
    _s("PP", "int", "topology", "pipeline-parallel size", default="1", minimum=1,
       maximum=64, identity=True),
    _s("DCP", "int", "topology", "decode-context-parallel size (1, 2 or 4)",
       default="1", choices=("1", "2", "4"), identity=True),
    _s("CP_KV_INTERLEAVE", "int", "topology",
       "KV interleave in tokens; auto: 1 for DCP1, 4 for DCP2/DCP4", default=AUTO, auto=True,
       choices=("1", "4"), identity=True),
    _s("FULL_CKV_GATHER", "bool", "topology",
       "B12X full-CKV gather; auto: off for DCP1, on for DCP2/DCP4 (refused unless the image "
       "reads a gather switch: see runtime-capabilities)", default=AUTO, auto=True,
       identity=True),
    # --- capacity and batching --------------------------------------------------------
    _s("KV_CACHE_GIB", "int", "capacity",
       "FP8 KV cache per rank in GiB; auto: 26 for DCP1, 30 for DCP2/DCP4",
       default=AUTO, auto=True, minimum=1, maximum=1024),
    _s("MAX_MODEL_LEN", "int", "capacity", "request token limit", default="1048576",
       minimum=256, maximum=1 << 22),
    _s("MAX_NUM_BATCHED_TOKENS", "int", "capacity", "tokens per scheduler step",
       default="8192", minimum=16, maximum=1 << 20),
    # 16: the seeds' R8 launcher (SparkRing runtime/glm53-flash-jj-r8-gb10/launch-rank.sh,
    # MAX_NUM_SEQS:=16), whose DFlash warm-up covers concurrencies 1..16
    _s("MAX_NUM_SEQS", "int", "capacity", "concurrent sequences", default="16", minimum=1,
       maximum=1024),
    _s("GPU_MEMORY_UTILIZATION", "float", "capacity", "fraction of GPU memory vLLM may use",
       default="0.86", minimum=0.05, maximum=0.99),
    _s("KV_CACHE_DTYPE", "enum", "kv", "KV cache element type", default="fp8",
       choices=("fp8", "fp8_e4m3", "bfloat16"), identity=True),
    # Any positive size: vLLM 0.33.0's CacheConfig takes `block_size: int = Field(gt=0)`
    # (vllm/config/cache.py:187); which sizes a backend runs is the runtime check's
    # runtime.block-size (vLLM's own hybrid alignment settles GLM-5.3's at 2304)
    _s("KV_BLOCK_SIZE", "int", "kv", "KV block size in tokens", default="64",
       minimum=1, maximum=1 << 20, identity=True),
    _s("KV_RECORD_BYTES_PER_TOKEN", "int", "kv",
       "bytes of one token's KV record over all attention layers at KV_CACHE_DTYPE",
       default="24576", minimum=1, maximum=1 << 24, identity=True),
    # --- speculation ------------------------------------------------------------------
    _s("SPECULATIVE_METHOD", "enum", "speculation", "speculative decoding method",
       default="dflash", choices=("dflash", "mtp", "none"), identity=True),
    _s("SPECULATIVE_TOKENS", "int", "speculation", "speculative depth", default="7",
       minimum=1, maximum=16, identity=True),
    _s("SPECULATIVE_ADAPTIVE", "bool", "speculation",
       "acceptance-based draft depth up to SPECULATIVE_TOKENS (embedded MTP only; refused "
       "unless the image's SpeculativeConfig has such a field)", default="0",
       identity=True),
    _s("DRAFT_TP", "int", "speculation",
       "draft model tensor-parallel size; auto: TP", default=AUTO, auto=True,
       minimum=1, maximum=64),
    # The seeds' R8 launcher sets draft_sample_method "probabilistic" (vLLM 0.33.0's default is
    # "greedy": vllm/config/speculative.py:84 DraftSampleMethod, :634) and loads the DFlash
    # draft with safetensors while the target uses fastsafetensors (draft_load_config, :558)
    _s("DRAFT_SAMPLE_METHOD", "enum", "speculation",
       "how the draft samples: probabilistic (the draft's logits in the rejection test) or greedy",
       default="probabilistic", choices=("probabilistic", "greedy")),
    _s("DRAFT_LOAD_FORMAT", "enum", "speculation", "the external draft's checkpoint loader",
       default="safetensors", choices=("safetensors", "fastsafetensors", "auto")),
    # --- backends ---------------------------------------------------------------------
    # B12X by default, as the seeds' serving selects it: vLLM 0.33.0's NVFP4 MoE
    # auto-selection tries FlashInfer first and never picks b12x, and FlashInfer's
    # precompiled kernels are not in the image. Spellings: AttentionBackendEnum.B12X
    # (vllm/v1/attention/backends/registry.py:126), "b12x" in MoEBackend and LinearBackend
    # (vllm/config/kernel.py:134, :253); the runtime check has vLLM's parser accept them.
    _kernel_backend("ATTENTION_BACKEND", "vLLM attention backend", "B12X"),
    _kernel_backend("MOE_BACKEND", "MoE kernel backend", "b12x"),
    _kernel_backend("LINEAR_BACKEND", "linear (GEMM) kernel backend", "b12x"),
    _s("ALL2ALL_BACKEND", "enum", "backends", "expert all-to-all backend",
       default="allgather_reducescatter",
       choices=("allgather_reducescatter", "naive", "deepep_high_throughput",
                "deepep_low_latency"),
       refused={
           "deepep_high_throughput": "the image contains no DeepEP (removed as unused)",
           "deepep_low_latency": "the image contains no DeepEP (removed as unused)",
       }),
    # "auto" here is vLLM's own loader choice (LoadConfig.load_format), not an auto rule:
    # parse_value takes a choice spelled "auto" as a value
    _s("LOAD_FORMAT", "enum", "backends", "checkpoint loader", default="fastsafetensors",
       choices=("fastsafetensors", "safetensors", "auto")),
    _s("ALLREDUCE_SYMM_MEM", "bool", "backends", "symmetric-memory all-reduce probe",
       default="0"),
    _s("FLASHINFER_ALLREDUCE", "bool", "backends", "FlashInfer all-reduce probe", default="0"),
    _s("ALLREDUCE_RMS_FUSION", "bool", "backends", "all-reduce + RMSNorm fusion pass",
       default="0"),
    _s("LANGUAGE_MODEL_ONLY", "bool", "backends", "serve the language model only",
       default="1"),
    # --- CUDA graphs ------------------------------------------------------------------
    _s("CUDA_GRAPH_MODE", "enum", "cuda-graphs", "CUDA graph capture mode",
       default="FULL_AND_PIECEWISE",
       choices=("FULL_AND_PIECEWISE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "NONE")),
    # 128: the seeds' R8 launcher (MAX_CUDAGRAPH_CAPTURE_SIZE:=128): 16 sequences x (7 draft
    # tokens + 1) rows, so a full DFlash7 decode step replays a captured graph
    _s("MAX_CUDA_GRAPH_CAPTURE_SIZE", "int", "cuda-graphs", "largest captured batch",
       default="128", minimum=1, maximum=1024),
    # --- serving surface (the OpenAI API of rank 0) -------------------------------------
    _s("SERVED_MODEL_NAME", "name", "serving",
       "model id the API serves (--served-model-name); empty: the profile's name",
       default="", allow_empty=True),
    # Parser names: the registries of vLLM 0.33.0 (vllm/tool_parsers/__init__.py
    # _TOOL_PARSERS_TO_REGISTER, vllm/reasoning/__init__.py _REASONING_PARSERS_TO_REGISTER);
    # the runtime check asks the image's own registries (runtime/in_image/probe_serving.py).
    # glm47 / glm45: the seeds' R8 launcher (--tool-call-parser glm47 --reasoning-parser glm45).
    _s("TOOL_CALL_PARSER", "enum", "serving",
       "tool-call parser of the image's vLLM (--tool-call-parser); empty: no tool calls",
       default="glm47", allow_empty=True, choices=TOOL_CALL_PARSERS),
    _s("REASONING_PARSER", "enum", "serving",
       "reasoning parser of the image's vLLM (--reasoning-parser); empty: none",
       default="glm45", allow_empty=True, choices=REASONING_PARSERS),
    _s("AUTO_TOOL_CHOICE", "bool", "serving",
       "let the model decide when to call tools (--enable-auto-tool-choice; needs TOOL_CALL_PARSER)",
       default="1"),
    # --- SparkCache -------------------------------------------------------------------
    _s("SPARKCACHE_ENABLED", "bool", "sparkcache",
       "persistent SparkCache; 0 keeps vLLM prefix caching only", default="1"),
    _s("SPARKCACHE_ACCESS_MODE", "enum", "sparkcache", "publish and/or restore",
       default="read-write", choices=("read-write", "read-only", "write-only")),
    # Part of the runtime identity only: sparkcache 0.1.0a2 reads no namespace or
    # publication key (spark_context_cache_config.parse_connector_config), so neither is
    # passed to it.
    _s("SPARKCACHE_NAMESPACE", "enum", "sparkcache",
       "SparkCache namespace (runtime identity only; SparkCache 0.1.0a2 reads no such key)",
       default="manager-pages-v2", choices=("manager-pages-v2",), identity=True),
    _s("SPARKCACHE_PUBLICATION", "enum", "sparkcache",
       "publication schema (runtime identity only; SparkCache 0.1.0a2 reads no such key)",
       default="snapshot-v1", choices=("snapshot-v1",), identity=True),
    # sparkcache 0.1.0a2 has no GLM-5.3 profile (its PROFILES: runtime-capabilities);
    # glm52-nvfp4 is GLM-5.2's record layout, kept as the only value SparkCache accepts.
    _s("SPARKCACHE_MODEL_PROFILE", "enum", "sparkcache",
       "SparkCache model profile (persistent record layout; GLM-5.2's: SparkCache 0.1.0a2 has none "
       "for GLM-5.3)", default="glm52-nvfp4", choices=("glm52-nvfp4",), identity=True),
    _s("SPARKCACHE_DRAFT_KV_POLICY", "enum", "sparkcache",
       "draft KV persistence; auto: separate for an external draft, colocated_target otherwise",
       default=AUTO, auto=True, choices=("separate", "colocated_target"), identity=True),
    _s("SPARKCACHE_MAX_BYTES", "bytes", "sparkcache", "disk budget; 0 = unlimited",
       default="0", minimum=0, maximum=1 << 50),
    _s("SPARKCACHE_TTL_SECONDS", "int", "sparkcache", "entry lifetime; 0 = unlimited",
       default="0", minimum=0, maximum=1 << 31),
    _s("SPARKCACHE_MIN_SPAN_TOKENS", "int", "sparkcache", "shortest published span",
       default="1024", minimum=1, maximum=1 << 22),
    _s("SPARKCACHE_MAX_SPAN_TOKENS", "int", "sparkcache",
       "longest published span; auto: MAX_MODEL_LEN", default=AUTO, auto=True, minimum=1,
       maximum=1 << 22),
    # The seeds pass their SparkCache's CUDA placement library (sha256 d5750905...) through
    # kv_connector_extra_config["spark_cache_cuda_placement_library"]; sparkcache 0.1.0a2, the
    # image's, reads no such key (spark_context_cache_config.parse_connector_config), so a
    # value is refused by name rather than mounted where nothing would load it.
    _s("SPARKCACHE_PLACEMENT_LIBRARY", "path", "sparkcache",
       "host path of the SparkCache CUDA placement library (refused: the image's SparkCache "
       "0.1.0a2 reads no placement-library key)", default="", allow_empty=True, site=True),
    # --- ports ------------------------------------------------------------------------
    _s("API_PORT", "int", "ports", "OpenAI API port (rank 0)", default="8000", minimum=1,
       maximum=65535, site=True),
    _s("MASTER_PORT", "int", "ports", "rendezvous port on rank 0", default="29501",
       minimum=1, maximum=65535, site=True),
    # --- transport --------------------------------------------------------------------
    # The seeds' R8 launcher (SparkRing runtime/glm53-flash-jj-r8-gb10/launch-rank.sh) runs
    # the ring over RoCE: NCCL_NET=IB, NCCL_IB_GID_INDEX=3 (RoCE v2 over IPv4 on the GB10's
    # ConnectX-7), NCCL_ALGO=Ring, NCCL_CROSS_NIC=1, 4 channels. Those are the defaults; the
    # HCA and interface names are the site's (the seeds' rocep1s0f0,rocep1s0f1 / enP7s7 are
    # their hosts'). Every name below is a string of NCCL 2.30.7's libnccl.so.2 in the image.
    _s("NCCL_NET", "enum", "transport",
       "NCCL network: IB (RDMA over the ring's RoCE NICs, as the seeds run) or Socket (TCP)",
       default="IB", choices=("IB", "Socket")),
    _s("SOCKET_IFNAME", "ifname", "transport",
       "NCCL/Gloo socket (bootstrap) interface; required with NCCL_NET=IB", default="",
       allow_empty=True, site=True),
    _s("NCCL_IB_HCA", "ifname", "transport", "RDMA devices NCCL uses; required with NCCL_NET=IB",
       default="", allow_empty=True, site=True),
    _s("NCCL_IB_GID_INDEX", "int", "transport",
       "RoCE GID index (3: RoCE v2 over IPv4, as the seeds); auto: NCCL detects",
       default="3", auto=True, minimum=0, maximum=255),
    _s("NCCL_ALGO", "enum", "transport", "NCCL algorithm (Ring: the seeds' switchless ring)",
       default="Ring", choices=("Ring", "Tree")),
    _s("NCCL_CROSS_NIC", "int", "transport",
       "NCCL_CROSS_NIC: 1 lets a ring use different NICs on its two sides (the seeds' ring)",
       default="1", choices=("0", "1", "2")),
    _s("NCCL_MIN_NCHANNELS", "int", "transport", "minimum NCCL channels; auto: NCCL",
       default="4", auto=True, minimum=1, maximum=64),
    _s("NCCL_MAX_NCHANNELS", "int", "transport", "maximum NCCL channels; auto: NCCL",
       default="4", auto=True, minimum=1, maximum=64),
    # The operator's NCCL build (the seeds' switchless ring library), mounted read-only and
    # preloaded as the seeds do (LD_PRELOAD, and VLLM_NCCL_SO_PATH: vllm/envs.py:754 in
    # vLLM 0.33.0); checked against NCCL_LIBRARY_SHA256 before anything starts.
    _s("NCCL_LIBRARY", "path", "transport",
       "host path of an operator-supplied libnccl.so.2 (the switchless ring build); empty: the image's NCCL",
       default="", allow_empty=True, site=True),
    _s("NCCL_LIBRARY_SHA256", "sha256", "transport",
       "sha256 NCCL_LIBRARY must have (the profile binds the seeds' switchless library)",
       default="", allow_empty=True),
    # --- host -------------------------------------------------------------------------
    _s("OMP_NUM_THREADS", "int", "host", "host threads per rank", default="8", minimum=1,
       maximum=256),
    # --- container --------------------------------------------------------------------
    _s("GPU_DEVICES", "enum", "container",
       "GPUs passed to the container (none: a GPU-free test run, never qualified)",
       default="all", choices=("all", "none")),
    _s("IPC_MODE", "enum", "container", "container IPC namespace", default="host",
       choices=("host", "private")),
    _s("SHM_SIZE", "bytes", "container",
       "/dev/shm size for IPC_MODE=private; auto: omitted with host IPC, 32 GiB otherwise",
       default=AUTO, auto=True, minimum=1 << 20, maximum=1 << 40),
    _s("CONTAINER_ULIMITS", "ulimits", "container", "ulimits, comma-separated name=soft[:hard]",
       default="memlock=-1,stack=67108864"),
)

CATALOG: Mapping[str, Setting] = {setting.key: setting for setting in CATALOG_LIST}
REQUIRED_SITE_KEYS = tuple(s.key for s in CATALOG_LIST if s.required)


def suggest_key(key: str) -> str | None:
    matches = difflib.get_close_matches(key.upper(), list(CATALOG), n=1, cutoff=0.6)
    return matches[0] if matches else None


def unknown_key_message(key: str) -> str:
    suggestion = suggest_key(key)
    hint = f"; did you mean {suggestion}?" if suggestion else ""
    return f"unknown setting {key}{hint}"


def _cut(raw: str) -> str:
    return raw if len(raw) <= 40 else raw[:37] + "..."


# The kinds whose values are whatever one pattern matches: kind -> (the pattern, what a value
# must be, whether a refused value is shown cut short by ``_cut``).
_PATTERN_KINDS: Mapping[str, tuple[re.Pattern[str], str, bool]] = {
    "token": (_TOKEN, "letters, digits, '_', '.', ':', '-'", False),
    "name": (_MODEL_NAME, "a letter or digit, then letters, digits, '_', '.', ':', '/', '-' (at most 128)", True),
    "sha256": (SHA256_HEX_PATTERN, "64 lowercase hex digits", True),
    "ifname": (_IFNAME, "comma-separated interface names", False),
}


def parse_value(setting: Setting, raw: str) -> Any:
    """Typed value of ``raw`` for ``setting``; ``AUTO`` stays the string ``"auto"``.

    Raises ValueError with a message (no location: the caller adds file:line).
    """
    if raw == AUTO and AUTO not in setting.choices:  # where vLLM itself has "auto" it is a choice
        if setting.auto:
            return AUTO
        raise ValueError(f"{setting.key} has no auto rule; give a value")
    if raw == "":
        if setting.allow_empty:
            return ""
        raise ValueError(f"{setting.key} is empty; remove the line to use the default")
    kind = setting.kind
    if kind in ("int", "bytes"):
        if not _DECIMAL.match(raw):
            unit = " in bytes" if kind == "bytes" else ""
            raise ValueError(
                f"{setting.key}={_cut(raw)!r}: expected a non-negative decimal integer{unit} "
                "of at most 19 digits (no sign, unit, exponent or 0x prefix)"
            )
        value: Any = int(raw)
    elif kind == "float":
        if not _FLOAT.match(raw):
            raise ValueError(f"{setting.key}={_cut(raw)!r}: expected a decimal number like 0.86")
        value = float(raw)
    elif kind == "bool":
        if raw not in ("0", "1"):
            raise ValueError(f"{setting.key}={raw!r}: expected 0 or 1")
        return raw == "1"
    elif kind == "enum":
        value = raw
    elif kind == "path":
        if not raw.startswith("/"):
            raise ValueError(f"{setting.key}={raw!r}: expected an absolute path")
        if "\n" in raw or "\x00" in raw or any(part == ".." for part in raw.split("/")):
            raise ValueError(f"{setting.key}={raw!r}: path must not contain '..' or newlines")
        control = next((c for c in raw if c != "\t" and (ord(c) < 0x20 or ord(c) == 0x7F)), None)
        if control is not None:  # as the env file refuses it (launch.envfile), comment lines included
            raise ValueError(f"{setting.key}={raw!r}: control character U+{ord(control):04X} is not allowed in a path")
        if ":" in raw or "," in raw:
            raise ValueError(
                f"{setting.key}={raw!r}: ':' and ',' cannot appear in a mounted path"
            )
        return raw.rstrip("/") or "/"
    elif kind == "address":
        return _host_address(setting, raw)
    elif kind in _PATTERN_KINDS:
        pattern, expected, cut = _PATTERN_KINDS[kind]
        if not pattern.fullmatch(raw):
            raise ValueError(f"{setting.key}={_cut(raw) if cut else raw!r}: expected {expected}")
        return raw
    elif kind == "ulimits":
        return _ulimits(setting, raw)
    else:  # pragma: no cover - the catalog only uses the kinds above
        raise ValueError(f"{setting.key}: unknown kind {kind}")
    if setting.choices and str(raw) not in setting.choices:
        raise ValueError(
            f"{setting.key}={raw!r}: expected one of {', '.join(setting.choices)}"
        )
    if raw in setting.refused:
        raise ValueError(f"{setting.key}={raw}: refused: {setting.refused[raw]}")
    if setting.minimum is not None and value < setting.minimum:
        raise ValueError(f"{setting.key}={raw}: below the minimum {_num(setting.minimum)}")
    if setting.maximum is not None and value > setting.maximum:
        raise ValueError(f"{setting.key}={raw}: above the maximum {_num(setting.maximum)}")
    return value


def _host_address(setting: Setting, raw: str) -> str:
    """One host's own unicast address: what a rank binds and the others connect to. The
    unspecified address (0.0.0.0, ::) binds every interface but names none to connect to;
    multicast, the limited broadcast and the reserved 240/4 are no host's address. An IPv6
    zone id is an interface name or index (it reaches --master-addr and VLLM_HOST_IP)."""
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        raise ValueError(f"{setting.key}={raw!r}: expected an IPv4 or IPv6 address") from None
    if not zone_names_interface(address):
        raise ValueError(f"{setting.key}={raw!r}: the zone id after '%' is not an interface name or index")
    plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
    if plain.is_unspecified:
        problem = "the unspecified address binds every interface but names no host to connect to"
    elif plain.is_multicast:
        problem = "a multicast address is no host's address"
    elif isinstance(plain, ipaddress.IPv4Address) and (plain == _LIMITED_BROADCAST or plain.is_reserved):
        problem = "a broadcast or reserved (240.0.0.0/4) address is no host's address"
    else:
        return str(address)
    raise ValueError(f"{setting.key}={raw}: {problem}")


# the names podman and docker accept (go-units' ulimit table, the kernel's RLIMIT_*)
ULIMIT_NAMES = frozenset({"core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile",
                          "nproc", "rss", "rtprio", "rttime", "sigpending", "stack"})
# limits under which the engine starts nothing: no file, no process, no stack
_ULIMITS_ABOVE_ZERO = frozenset({"nofile", "nproc", "stack"})
_RLIM_MAX = (1 << 63) - 1


def _ulimits(setting: Setting, raw: str) -> str:
    """``name=soft[:hard],...`` that the engine and the kernel accept: a known name, once;
    soft at most hard (-1 is unlimited); nofile finite (the kernel caps it at fs.nr_open)."""
    names: set[str] = set()
    for item in raw.split(","):
        match = _ULIMIT.match(item)
        if not match:
            raise ValueError(f"{setting.key}: {item!r} is not name=soft[:hard] (decimal or -1)")
        name, soft_text, _, hard_text = match.groups()
        if name not in ULIMIT_NAMES:
            raise ValueError(f"{setting.key}: {name!r} is not a ulimit (one of {', '.join(sorted(ULIMIT_NAMES))})")
        if name in names:
            raise ValueError(f"{setting.key}: {name} is given twice")
        names.add(name)
        soft = _RLIM_MAX if soft_text == "-1" else int(soft_text)
        hard = soft if hard_text is None else _RLIM_MAX if hard_text == "-1" else int(hard_text)
        if max(soft, hard) > _RLIM_MAX:
            raise ValueError(f"{setting.key}: {item}: a limit is at most {_RLIM_MAX} (or -1, unlimited)")
        if soft > hard:
            raise ValueError(f"{setting.key}: {item}: the soft limit exceeds the hard limit")
        if name == "nofile" and hard == _RLIM_MAX:
            raise ValueError(f"{setting.key}: {item}: nofile cannot be unlimited (the kernel caps it at fs.nr_open)")
        if name in _ULIMITS_ABOVE_ZERO and soft == 0:
            raise ValueError(f"{setting.key}: {item}: a {name} limit of 0 lets the container start nothing")
    return raw


def render_value(value: Any) -> str:
    """The env-file spelling of a typed value (inverse of ``parse_value``)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _num(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def validate_runtime_table(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check a profile's ``[runtime]`` or ``[qualified]`` table against the catalog.

    Every key must be in the catalog and every value must parse (TOML integers, floats
    and booleans are accepted in their natural form). Returns the typed values. Errors
    name ``where`` (e.g. ``profiles/glm53-dflash7/profile.toml: runtime.DCP``).
    """
    typed: dict[str, Any] = {}
    for key, raw in table.items():
        setting = CATALOG.get(key)
        if setting is None:
            raise InputError(f"{where}.{key}: {unknown_key_message(key)}")
        text = table_value_text(raw)
        if text is None:
            raise InputError(
                f"{where}.{key}: expected a string, integer, float or boolean, got "
                f"{type(raw).__name__}"
            )
        try:
            typed[key] = parse_value(setting, text)
        except ValueError as exc:
            raise InputError(f"{where}.{key}: {exc}") from None
    return typed


def refused_values(table: Mapping[str, Mapping[str, str]], where: str) -> dict[str, dict[Any, str]]:
    """A profile's ``[refused]`` table typed: catalog key -> {parsed value -> reason}. Every
    key must be in the catalog and every refused value must parse as that setting's value
    (a misspelt value would refuse nothing)."""
    typed: dict[str, dict[Any, str]] = {}
    for key, values in table.items():
        setting = CATALOG.get(key)
        if setting is None:
            raise InputError(f"{where}.{key}: {unknown_key_message(key)}")
        typed[key] = {}
        for raw, reason in values.items():
            try:
                typed[key][parse_value(setting, raw)] = reason
            except ValueError as exc:
                raise InputError(f"{where}.{key}.{raw}: {exc}") from None
    return typed


def table_value_text(raw: Any) -> str | None:
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return repr(raw)
    if isinstance(raw, str):
        return raw
    return None


# Topology rules of the seeds (R8): DCP1 interleaves KV per token without full-CKV
# gather; DCP2/DCP4 interleave four tokens and need B12X's full-CKV gather.
DCP_INTERLEAVE = {1: 1, 2: 4, 4: 4}
DCP_FULL_CKV_GATHER = {1: False, 2: True, 4: True}
DCP_KV_GIB = {1: 26, 2: 30, 4: 30}
