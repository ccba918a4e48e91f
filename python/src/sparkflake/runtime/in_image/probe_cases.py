"""Each launch case judged by the image's own code: vLLM's serve parser, AsyncEngineArgs,
ModelConfig from the checkpoint bound at ``--model`` and the speculative config with it as
the target, the compilation, parallel, cache and KV-transfer configs, the KV connector's
class, and SparkCache's parse_connector_config (which extra-config keys it reads). Runs
inside the image (see ``__init__.py``); vLLM's platform is already chosen (``probe.py``)."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import types
from collections.abc import Callable, Mapping
from typing import Any

from probe_engine import judge_engine
from probe_support import error_text


def _serve_parser() -> tuple[Any, Any]:
    # The parser `vllm serve` uses: vllm/entrypoints/cli/main.py:88-108 builds a
    # FlexibleArgumentParser with subparsers and calls each subcommand's subparser_init;
    # vllm/entrypoints/cli/serve.py:161 ServeSubcommand.subparser_init, :158 validate.
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
    return parser, command


def _parse(serve_args: list[str]) -> tuple[Any, str | None]:
    parser, command = _serve_parser()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(["serve", *serve_args])
            command.validate(args)
        # what ServeSubcommand.cmd does first (vllm/entrypoints/cli/serve.py:56): the
        # positional model_tag is the model (else --model's default, a Hub id, is used)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
    except SystemExit:
        return None, stderr.getvalue().strip()[-2000:] or "the parser exited"
    except BaseException as exc:  # noqa: BLE001
        return None, error_text(exc)
    return args, None


class _ReadTracking(dict[str, Any]):
    """The extra config as SparkCache sees it, remembering which keys were read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[Any] = set()  # the keys SparkCache asked for (strings)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def _kv_cache_config(spec: Any) -> types.SimpleNamespace:
    """A KV-cache configuration with one group of ``spec``, as
    sparkcache.spark_context_cache_config.kv_group_topology reads it (:112: the
    ``kv_cache_groups`` attribute, each group's ``kv_cache_spec`` and ``layer_names``)."""
    group = types.SimpleNamespace(kv_cache_spec=spec, layer_names=["model.layers.0.self_attn"], is_eagle_group=False)
    return types.SimpleNamespace(kv_cache_groups=[group])


def _mla_spec(block_size: int, dtype: str) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    # GLM-5.3's attention layers are MLA: one 576-wide latent (512 CKV + 64 rope) per token
    return MLAAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=576,
        dtype=torch.uint8 if dtype.startswith("fp8") else torch.bfloat16,
        cache_dtype_str=dtype,
    )


def _mamba_spec(block_size: int) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec

    return MambaSpec(block_size=block_size, shapes=((1, 128),), dtypes=(torch.bfloat16,))


def judge_sparkcache(engine_args: Any, kv_config: Any) -> dict[str, object]:
    """SparkCache's own parse_connector_config on the case's configuration
    (sparkcache/spark_context_cache_config.py:194; keys read via
    ``kv_transfer_config.get_from_extra_config`` at :225)."""
    from sparkcache.spark_context_cache_config import parse_connector_config

    verdict: dict[str, object] = {}
    extra = _ReadTracking(kv_config.kv_connector_extra_config or {})
    kv_config.kv_connector_extra_config = extra
    cache = types.SimpleNamespace(block_size=engine_args.block_size, cache_dtype=engine_args.kv_cache_dtype)
    parallel = types.SimpleNamespace(
        tensor_parallel_size=engine_args.tensor_parallel_size,
        decode_context_parallel_size=engine_args.decode_context_parallel_size,
        pipeline_parallel_size=engine_args.pipeline_parallel_size,
    )
    model = types.SimpleNamespace(max_model_len=engine_args.max_model_len)
    vllm_config = types.SimpleNamespace(cache_config=cache, parallel_config=parallel, model_config=model)
    block = engine_args.block_size or 64
    try:
        mla = _kv_cache_config(_mla_spec(block, engine_args.kv_cache_dtype or "fp8"))
        parsed = parse_connector_config(vllm_config, kv_config, mla)
        verdict["connector_config"] = {"ok": True, "storage_mode": parsed.storage_mode,
                                       "profile": getattr(parsed.profile, "name", str(parsed.profile))}
    except BaseException as exc:  # noqa: BLE001
        verdict["connector_config"] = {"ok": False, "error": error_text(exc)}
    given: list[str] = sorted(dict.keys(extra))
    verdict["keys_given"] = given
    verdict["keys_read"] = sorted(extra.read & set(given))
    # The GLM-5.3 architecture (vLLM's Glm5Next) also has KDA linear-attention layers,
    # whose KV-cache spec is a MambaSpec; SparkCache classifies every group at start.
    try:
        hybrid = types.SimpleNamespace(kv_cache_groups=[
            *_kv_cache_config(_mla_spec(block, engine_args.kv_cache_dtype or "fp8")).kv_cache_groups,
            types.SimpleNamespace(kv_cache_spec=_mamba_spec(block), layer_names=["model.layers.1.linear_attn"],
                                  is_eagle_group=False),
        ])
        kv_config.kv_connector_extra_config = dict(extra)
        parse_connector_config(vllm_config, kv_config, hybrid)
        verdict["glm5next_kv_groups"] = {"ok": True}
    except BaseException as exc:  # noqa: BLE001
        verdict["glm5next_kv_groups"] = {"ok": False, "error": error_text(exc)}
    return verdict


def judge_case(case: dict[str, Any]) -> dict[str, object]:
    verdict: dict[str, object] = {"name": case["name"]}
    args, error = _parse(list(case["serve_args"]))
    verdict["parser"] = {"ok": error is None, "error": error}
    if args is None:
        return verdict
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs

        engine_args = AsyncEngineArgs.from_cli_args(args)
        verdict["engine_args"] = {"ok": True}
    except BaseException as exc:  # noqa: BLE001
        verdict["engine_args"] = {"ok": False, "error": error_text(exc)}
        return verdict
    verdict["backends"] = {
        "attention": getattr(getattr(engine_args, "attention_backend", None), "name", None),
        "moe": getattr(engine_args, "moe_backend", None),
        "linear": getattr(engine_args, "linear_backend", None),
    }
    verdict["load_format"] = getattr(engine_args, "load_format", None)
    configs: dict[str, object] = {}
    verdict["model_config"], verdict["speculative_with_target"] = _model_configs(engine_args)

    def build(name: str, producer: Callable[[], Any]) -> Any:
        try:
            built = producer()
            configs[name] = {"ok": True}
            return built
        except BaseException as exc:  # noqa: BLE001
            configs[name] = {"ok": False, "error": error_text(exc)}
            return None

    speculative = getattr(engine_args, "speculative_config", None)
    if speculative:
        # The target model config needs a checkpoint; the config object is built from the
        # JSON as vLLM's own constructor validates it (extra keys are forbidden:
        # vllm/config/utils.py:70). Errors that only say the target is missing are not
        # this case's fault and are recorded as such.
        from vllm.config.speculative import SpeculativeConfig

        configs["speculative"] = _build_speculative(SpeculativeConfig, dict(speculative))
    from vllm.config import CacheConfig, CompilationConfig, KVTransferConfig, ParallelConfig

    compilation = getattr(engine_args, "compilation_config", None)
    build("compilation", lambda: compilation if isinstance(compilation, CompilationConfig)
          else CompilationConfig(**(compilation or {})))
    build("parallel", lambda: _engine_config(ParallelConfig, engine_args, LAUNCHED_PARALLEL_ARGS))
    build("cache", lambda: _engine_config(CacheConfig, engine_args, LAUNCHED_CACHE_ARGS))
    kv = getattr(engine_args, "kv_transfer_config", None)
    if kv is not None:
        kv_config = build("kv_transfer", lambda: kv if isinstance(kv, KVTransferConfig) else KVTransferConfig(**kv))
        if kv_config is not None:
            verdict["kv_connector"] = _judge_connector(kv_config)
            if kv_config.kv_connector == "SparkContextCacheConnector":
                verdict["sparkcache"] = judge_sparkcache(engine_args, kv_config)
    verdict["configs"] = configs
    # last: create_engine_config resolves the engine arguments in place
    verdict["engine"] = judge_engine(engine_args, headless=bool(getattr(args, "headless", False)),
                                     construct_models=bool(case.get("construct_models")))
    return verdict


def _model_configs(engine_args: Any) -> tuple[dict[str, object], dict[str, object] | None]:
    """vLLM's own ModelConfig for the case (AsyncEngineArgs.create_model_config,
    vllm/engine/arg_utils.py:1982) from the checkpoint's config.json bound at ``--model``,
    then the speculative config with it as the target (create_speculative_config, :2100),
    which builds the draft's model config. Nothing here needs a GPU."""
    try:
        model = engine_args.create_model_config()
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": error_text(exc)}, None
    built: dict[str, object] = {"ok": True, "architecture": getattr(model, "architecture", None),
                                "max_model_len": model.max_model_len, "dtype": str(model.dtype)}
    if not getattr(engine_args, "speculative_config", None):
        return built, None
    try:
        # all the launch's parallel arguments: on vLLM's CUDA platform ParallelConfig compares
        # the world size with the node's devices unless --nnodes and the mp backend say
        # the ranks are on other nodes (vllm/config/parallel.py:1064)
        from vllm.config import ParallelConfig

        parallel = _engine_config(ParallelConfig, engine_args, LAUNCHED_PARALLEL_ARGS)
        speculative = engine_args.create_speculative_config(model, parallel)
        draft = getattr(speculative, "draft_model_config", None)
        return built, {"ok": True, "method": speculative.method,
                       "draft_architectures": list(getattr(draft, "architectures", None) or [])}
    except BaseException as exc:  # noqa: BLE001
        return built, {"ok": False, "error": error_text(exc)}


def inspect_models_here() -> None:
    """vLLM's model inspection (the interfaces a model class declares, which ModelConfig
    reads) done in this process instead of a new interpreter: vllm/model_executor/models/
    registry.py:1122 runs it through ``_run_in_subprocess`` (one more start of vLLM, ~150 s
    under qemu) to leave CUDA uninitialized in the caller. Here CUDA cannot be initialized
    (no driver; torch.cuda's queries are answered as data), the inspection only reads the
    class's attributes (registry.py:934 _ModelInfo.from_model_cls), the subprocess's one
    other step, load_general_plugins (registry.py:1628), is done in this process already,
    and the registry's own code caches what it found under VLLM_CACHE_ROOT as it does after
    the subprocess. (A forked child that warmed that cache beside the capabilities imported
    vLLM's config, loaders, plugins and the model classes a second time: 88 s of the other
    core on the dflash7 image, measured.)"""
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()


def preload_model_classes(cases: list[dict[str, Any]]) -> dict[str, object]:
    """The model classes of the cases whose served models are constructed on the meta device,
    imported in this process before those cases are judged: the construction's child, forked
    from this process then, inherits them. Loading a registered class is importing its module
    (vllm/model_executor/models/registry.py:1136 load_model_cls); the MTP head's class is in
    the target's module (registry.py:732)."""
    from vllm.model_executor.models import ModelRegistry

    loaded: dict[str, object] = {}
    for case in cases:
        if not case.get("construct_models"):
            continue
        args = list(case["serve_args"])
        speculative = _after(args, "--speculative-config")
        directories = [args[0]] if args else []
        with contextlib.suppress(ValueError, AttributeError):
            directories.append(str(json.loads(speculative or "{}").get("model") or ""))
        for directory in filter(None, directories):
            try:
                with open(os.path.join(directory, "config.json"), encoding="utf-8") as handle:
                    architectures = json.load(handle).get("architectures") or []
            except (OSError, ValueError, AttributeError):
                continue  # the case's own judgement names an unreadable checkpoint
            for architecture in architectures:
                if architecture in loaded or architecture not in ModelRegistry.models:
                    continue
                try:
                    ModelRegistry.models[architecture].load_model_cls()
                    loaded[architecture] = {"ok": True}
                except BaseException as exc:  # noqa: BLE001 - the construction reports it as vLLM's
                    loaded[architecture] = {"ok": False, "error": error_text(exc)}
    return loaded


def _after(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


# The engine arguments a launch sets that vLLM's create_engine_config hands to ParallelConfig
# (vllm/engine/arg_utils.py:2569 in the image) and to CacheConfig, by the config field each
# fills: ParallelConfig's under their own names; CacheConfig's cache_dtype is kv_cache_dtype.
LAUNCHED_PARALLEL_ARGS = {name: name for name in (
    "tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size",
    "cp_kv_cache_interleave_size", "all2all_backend", "distributed_executor_backend",
    "nnodes", "node_rank", "master_addr", "master_port",
)}
LAUNCHED_CACHE_ARGS = {
    "block_size": "block_size", "gpu_memory_utilization": "gpu_memory_utilization",
    "cache_dtype": "kv_cache_dtype", "enable_prefix_caching": "enable_prefix_caching",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
}


def _engine_config(config_class: Any, engine_args: Any, arguments: Mapping[str, str]) -> Any:
    """``config_class`` with each field of ``arguments`` the engine argument it names."""
    return config_class(**{name: getattr(engine_args, argument) for name, argument in arguments.items()})


def _build_speculative(cls: Any, values: dict[str, object]) -> dict[str, object]:
    try:
        cls(**values)
        return {"ok": True}
    except BaseException as exc:  # noqa: BLE001
        text = error_text(exc)
        unexpected = []
        for item in getattr(exc, "errors", lambda: [])():
            if item.get("type") in ("unexpected_keyword_argument", "extra_forbidden"):
                unexpected.append(str(item.get("loc", ["?"])[-1]))
        # pydantic validates every given key and value before __post_init__ runs; what
        # __post_init__ raises without target_model_config is the absent checkpoint
        return {"ok": type(exc).__name__ != "ValidationError" and not unexpected, "error": text,
                "unexpected_keys": sorted(set(unexpected))}


def _judge_connector(kv_config: Any) -> dict[str, object]:
    """The connector class exists where the config says (module path + class name), as
    KVConnectorFactory loads it (vllm/distributed/kv_transfer/kv_connector/factory.py)."""
    name = kv_config.kv_connector
    module_path = getattr(kv_config, "kv_connector_module_path", None)
    try:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

        if name in KVConnectorFactory._registry:
            KVConnectorFactory._registry[name]()
            return {"ok": True, "source": "registry"}
        if module_path:
            module = importlib.import_module(module_path)
            getattr(module, name)
            return {"ok": True, "source": module_path}
        return {"ok": False, "error": f"{name} is not registered and no kv_connector_module_path is given"}
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": error_text(exc)}

