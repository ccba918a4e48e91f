"""The program the runtime check runs inside the image, in the image's own interpreter.

It is not imported by sparkflake: the host copies this file into the sandbox and runs
it with the image's ``/opt/venv/bin/python``. It uses only the standard library and the
packages of the image, and it makes ONE interpreter start judge every case: it imports
every runtime package once, then has vLLM's, SparkCache's and the other components' own
code accept (or refuse) each launch spec it is given.

Input (argv[1], JSON): ``{"expected_versions": {dist: version}, "cases": [{"name",
"serve_args": [...], "env": {...}}]}``. Output (argv[2]): one JSON document with the
versions, the capabilities (what this image's code offers) and, per case, one verdict
per judgement. The probe never raises: every failure becomes data with its message.

Every name used below was read in the image's source (paths relative to
``/opt/venv/lib/python3.11/site-packages``); the places are quoted where they are used.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import json
import logging
import os
import sys
import time
import traceback
import types
import typing
import warnings

STARTED = time.monotonic()
RUNTIME_MODULES = ("torch", "vllm", "b12x", "sparkcache", "fastsafetensors", "flashinfer")
FORKED_IMPORTS = ("flashinfer",)
# Keys of a case's env that were read by code running in this interpreter
ENV_READS: set[str] = set()


def _track_environ_reads() -> None:
    """Record every os.environ lookup (os.getenv goes through ``get``) from here on."""
    cls = type(os.environ)
    original_getitem = cls.__getitem__
    original_contains = cls.__contains__

    def note(key) -> None:
        # os.environb is an _Environ too: its keys are bytes
        ENV_READS.add(key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key))

    def getitem(self, key):
        note(key)
        return original_getitem(self, key)

    def contains(self, key):
        note(key)
        return original_contains(self, key)

    # the image's os.environ class is wrapped on purpose, to record which keys its code reads
    cls.__getitem__ = getitem  # type: ignore[method-assign]
    cls.__contains__ = contains  # type: ignore[method-assign]
    # Mapping.get calls __getitem__, so os.getenv and os.environ.get are seen too.


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken log call must not break the probe
            message = str(record.msg)
        self.records.append({"logger": record.name, "level": record.levelname, "message": message[:2000]})


CAPTURE = _LogCapture()


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text[:4000]


def _flatten_literal(annotation: object) -> list[str]:
    """All strings of a (nested) typing.Literal."""
    found: list[str] = []
    for argument in typing.get_args(annotation):
        if isinstance(argument, str):
            found.append(argument)
        else:
            found.extend(_flatten_literal(argument))
    return found


def _import_one(name: str, capture: _LogCapture) -> dict[str, object]:
    started = time.monotonic()
    before = len(capture.records)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            importlib.import_module(name)
        return {
            "ok": True,
            "seconds": round(time.monotonic() - started, 3),
            "warnings": [str(w.message)[:2000] for w in caught],
            "log": capture.records[before:],
            "stderr": stderr.getvalue()[-4000:],
        }
    except BaseException as exc:  # noqa: BLE001 - an import failure is a verdict
        return {"ok": False, "error": _error(exc), "log": capture.records[before:],
                "stderr": stderr.getvalue()[-4000:]}


def _forked(producer, result_path: str) -> int:
    """Run ``producer`` (returning JSON data) in a forked child, which inherits everything
    imported so far (under qemu its translated code too), on the other core; the parent
    reads what it returned with ``_forked_result``."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            try:
                produced = {"value": producer()}
            except BaseException as exc:  # noqa: BLE001 - a failure is data
                produced = {"error": _error(exc)}
            produced["env_reads"] = sorted(ENV_READS)
            with open(result_path, "w", encoding="utf-8") as handle:
                json.dump(produced, handle)
            status = 0
        finally:
            os._exit(status)
    return pid


def _forked_result(what: str, pid: int, result_path: str) -> dict[str, object]:
    """``{"value": ...}`` or ``{"error": ...}`` of the child ``pid``."""
    _, status = os.waitpid(pid, 0)
    try:
        with open(result_path, encoding="utf-8") as handle:
            produced = json.load(handle)
    except (OSError, ValueError):
        return {"error": f"the child {what} ended with wait status {status} and no result"}
    ENV_READS.update(produced.pop("env_reads", []))
    return produced


def _child_verdict(name: str, pid: int, result_path: str) -> dict[str, object]:
    produced = _forked_result(f"importing {name}", pid, result_path)
    if "value" not in produced:
        return {"ok": False, "error": produced["error"]}
    verdict = dict(produced["value"])
    verdict["process"] = "forked after torch"
    return verdict


def import_runtime(capture: _LogCapture, scratch: str) -> dict[str, object]:
    """Every runtime module imported. FlashInfer's import alone took 46 s under qemu after
    torch's and vLLM's: it is imported in a child forked once torch (which it needs) is in,
    on the other core, beside vLLM's import here (``parent_imported`` in the result says
    whether the rest of the probe imported it in this process all the same)."""
    imports: dict[str, object] = {}
    children = []
    for name in RUNTIME_MODULES:
        if name in FORKED_IMPORTS and hasattr(os, "fork"):
            continue
        imports[name] = _import_one(name, capture)
        if name == "torch" and imports[name].get("ok"):
            children = [(forked, _forked(lambda forked=forked: _import_one(forked, capture),
                                         f"{scratch}/import-{forked}.json"))
                        for forked in FORKED_IMPORTS if hasattr(os, "fork")]
    for name in FORKED_IMPORTS:
        if name not in imports and all(name != forked for forked, _ in children):
            imports[name] = _import_one(name, capture)  # torch failed: in this process
    for name, pid in children:
        imports[name] = _child_verdict(name, pid, f"{scratch}/import-{name}.json")
    return imports


def select_platform() -> str:
    """vLLM finds its platform through NVML and its CUDA platform module links the host
    driver's libcuda.so.1 (vllm/platforms/cuda.py:23 imports vllm._C_stable_libtorch),
    which the NVIDIA container toolkit mounts at run time: the image does not contain it
    and the check has no GPU. So the parser and configs are built on vLLM's CPU platform,
    as `vllm bench` does on a machine without an accelerator (vllm/entrypoints/cli/main.py:
    72-86), set where vllm/platforms/__init__.py:315 keeps the resolved platform. What
    depends on the CUDA platform (kernel selection at start) is not judged here."""
    import vllm.platforms as platforms

    try:
        from vllm.platforms.cuda import CudaPlatform  # a host that has the driver

        platforms._current_platform = CudaPlatform()
        return f"{CudaPlatform.__module__}.{CudaPlatform.__qualname__}"
    except ImportError as exc:
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
        return f"vllm.platforms.cpu.CpuPlatform (CUDA platform not importable: {_error(exc)})"


def versions(expected: dict[str, str]) -> dict[str, object]:
    found: dict[str, object] = {}
    for dist in sorted(expected):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


# seconds spent in each step after the imports (where a check's time goes under emulation)
PHASE_SECONDS: dict[str, float] = {}


def capabilities() -> dict[str, object]:
    """What this image's code offers. (Answering moe_backends and load_formats, the two
    slow steps, in forked children was measured: the same module imports then fell on the
    next step in this process, linear_backends, so they run here.)"""
    caps: dict[str, object] = {}

    def record(key: str, producer) -> None:
        started = time.monotonic()
        try:
            caps[key] = producer()
        except BaseException as exc:  # noqa: BLE001
            caps[key] = {"error": _error(exc)}
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

    def b12x_backend_importable() -> dict[str, object]:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        cls = AttentionBackendEnum.B12X.get_class()
        return {"attention": f"{cls.__module__}.{cls.__qualname__}"}

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
    record("b12x_attention_class", b12x_backend_importable)
    record("flashinfer_kernels", flashinfer_kernels)
    record("general_plugins", general_plugins)
    record("quantization_methods", quantization_methods)
    return caps


def _serve_parser():
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


def _parse(serve_args: list[str]) -> tuple[object | None, str | None]:
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
        return None, _error(exc)
    return args, None


class _ReadTracking(dict):
    """The extra config as SparkCache sees it, remembering which keys were read."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def _kv_cache_config(spec) -> object:
    """A KV-cache configuration with one group of ``spec``, as
    sparkcache.spark_context_cache_config.kv_group_topology reads it (:112: the
    ``kv_cache_groups`` attribute, each group's ``kv_cache_spec`` and ``layer_names``)."""
    group = types.SimpleNamespace(kv_cache_spec=spec, layer_names=["model.layers.0.self_attn"], is_eagle_group=False)
    return types.SimpleNamespace(kv_cache_groups=[group])


def _mla_spec(block_size: int, dtype: str):
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    # GLM-5.3's attention layers are MLA: one 576-wide latent (512 CKV + 64 rope) per token
    return MLAAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=576,
        dtype=torch.uint8 if dtype.startswith("fp8") else torch.bfloat16,
        cache_dtype_str=dtype,
    )


def _mamba_spec(block_size: int):
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec

    return MambaSpec(block_size=block_size, shapes=((1, 128),), dtypes=(torch.bfloat16,))


def judge_sparkcache(engine_args, kv_config) -> dict[str, object]:
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
        verdict["connector_config"] = {"ok": False, "error": _error(exc)}
    verdict["keys_given"] = sorted(dict.keys(extra))
    verdict["keys_read"] = sorted(extra.read & set(dict.keys(extra)))
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
        verdict["glm5next_kv_groups"] = {"ok": False, "error": _error(exc)}
    return verdict


def judge_case(case: dict[str, object]) -> dict[str, object]:
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
        verdict["engine_args"] = {"ok": False, "error": _error(exc)}
        return verdict
    verdict["backends"] = {
        "attention": getattr(getattr(engine_args, "attention_backend", None), "name", None),
        "moe": getattr(engine_args, "moe_backend", None),
        "linear": getattr(engine_args, "linear_backend", None),
    }
    verdict["load_format"] = getattr(engine_args, "load_format", None)
    configs: dict[str, object] = {}
    verdict["model_config"], verdict["speculative_with_target"] = _model_configs(engine_args)

    def build(name: str, producer) -> object:
        try:
            built = producer()
            configs[name] = {"ok": True}
            return built
        except BaseException as exc:  # noqa: BLE001
            configs[name] = {"ok": False, "error": _error(exc)}
            return None

    speculative = getattr(engine_args, "speculative_config", None)
    if speculative:
        # The target model config needs a checkpoint; the config object is built from the
        # JSON as vLLM's own constructor validates it (extra keys are forbidden:
        # vllm/config/utils.py:70). Errors that only say the target is missing are not
        # this case's fault and are recorded as such.
        from vllm.config.speculative import SpeculativeConfig

        configs["speculative"] = _build_speculative(SpeculativeConfig, dict(speculative))
    from vllm.config import CompilationConfig, KVTransferConfig, ParallelConfig

    compilation = getattr(engine_args, "compilation_config", None)
    build("compilation", lambda: compilation if isinstance(compilation, CompilationConfig)
          else CompilationConfig(**(compilation or {})))
    build("parallel", lambda: ParallelConfig(
        tensor_parallel_size=engine_args.tensor_parallel_size,
        pipeline_parallel_size=engine_args.pipeline_parallel_size,
        decode_context_parallel_size=engine_args.decode_context_parallel_size,
        cp_kv_cache_interleave_size=engine_args.cp_kv_cache_interleave_size,
        all2all_backend=engine_args.all2all_backend,
        distributed_executor_backend=engine_args.distributed_executor_backend,
        nnodes=engine_args.nnodes,
        node_rank=engine_args.node_rank,
        master_addr=engine_args.master_addr,
        master_port=engine_args.master_port,
    ))
    build("cache", lambda: _cache_config(engine_args))
    kv = getattr(engine_args, "kv_transfer_config", None)
    if kv is not None:
        kv_config = build("kv_transfer", lambda: kv if isinstance(kv, KVTransferConfig) else KVTransferConfig(**kv))
        if kv_config is not None:
            verdict["kv_connector"] = _judge_connector(kv_config)
            if kv_config.kv_connector == "SparkContextCacheConnector":
                verdict["sparkcache"] = judge_sparkcache(engine_args, kv_config)
    verdict["configs"] = configs
    return verdict


def _model_configs(engine_args) -> tuple[dict[str, object], dict[str, object] | None]:
    """vLLM's own ModelConfig for the case (AsyncEngineArgs.create_model_config,
    vllm/engine/arg_utils.py:1982) from the checkpoint's config.json bound at ``--model``,
    then the speculative config with it as the target (create_speculative_config, :2100),
    which builds the draft's model config. Nothing here needs a GPU."""
    from vllm.config import ParallelConfig

    try:
        model = engine_args.create_model_config()
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": _error(exc)}, None
    built: dict[str, object] = {"ok": True, "architecture": getattr(model, "architecture", None),
                                "max_model_len": model.max_model_len, "dtype": str(model.dtype)}
    if not getattr(engine_args, "speculative_config", None):
        return built, None
    try:
        parallel = ParallelConfig(tensor_parallel_size=engine_args.tensor_parallel_size,
                                  pipeline_parallel_size=engine_args.pipeline_parallel_size,
                                  decode_context_parallel_size=engine_args.decode_context_parallel_size)
        speculative = engine_args.create_speculative_config(model, parallel)
        draft = getattr(speculative, "draft_model_config", None)
        return built, {"ok": True, "method": speculative.method,
                       "draft_architectures": list(getattr(draft, "architectures", None) or [])}
    except BaseException as exc:  # noqa: BLE001
        return built, {"ok": False, "error": _error(exc)}


def warm_model_registry(case: dict[str, object]) -> dict[str, object]:
    """In a forked child: build the first case's model configs with the registry's model
    inspection done in this (already forked) process instead of a new interpreter
    (vllm/model_executor/models/registry.py:1123 ``_run_in_subprocess``: one more start of
    vLLM, ~150 s under qemu). The registry's own code then caches what it found under
    VLLM_CACHE_ROOT (registry.py:1013, keyed by the model module's hash), where the
    parent's ModelConfig finds it."""
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()
    for key, value in case.get("env", {}).items():
        os.environ[key] = value
    args, error = _parse(list(case["serve_args"]))
    if args is None:
        return {"parser": error}
    from vllm.engine.arg_utils import AsyncEngineArgs

    model, speculative = _model_configs(AsyncEngineArgs.from_cli_args(args))
    return {"model_config": model, "speculative_with_target": speculative}


def _cache_config(engine_args):
    from vllm.config import CacheConfig

    return CacheConfig(
        block_size=engine_args.block_size,
        gpu_memory_utilization=engine_args.gpu_memory_utilization,
        cache_dtype=engine_args.kv_cache_dtype,
        enable_prefix_caching=engine_args.enable_prefix_caching,
        kv_cache_memory_bytes=engine_args.kv_cache_memory_bytes,
    )


def _build_speculative(cls, values: dict[str, object]) -> dict[str, object]:
    try:
        cls(**values)
        return {"ok": True}
    except BaseException as exc:  # noqa: BLE001
        text = _error(exc)
        unexpected = []
        for item in getattr(exc, "errors", lambda: [])():
            if item.get("type") in ("unexpected_keyword_argument", "extra_forbidden"):
                unexpected.append(str(item.get("loc", ["?"])[-1]))
        # pydantic validates every given key and value before __post_init__ runs; what
        # __post_init__ raises without target_model_config is the absent checkpoint
        return {"ok": type(exc).__name__ != "ValidationError" and not unexpected, "error": text,
                "unexpected_keys": sorted(set(unexpected))}


def _judge_connector(kv_config) -> dict[str, object]:
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
        return {"ok": False, "error": _error(exc)}


def main(argv: list[str]) -> int:
    request = json.loads(open(argv[1], encoding="utf-8").read())
    result: dict[str, object] = {"schema": "sparkflake.runtime-probe/v1", "python": sys.version.split()[0],
                                 "machine": os.uname().machine}
    try:
        capture = CAPTURE
        logging.getLogger().addHandler(capture)
        logging.getLogger("vllm").addHandler(capture)
        _track_environ_reads()
        scratch = os.path.dirname(os.path.abspath(argv[2]))
        imports = import_runtime(capture, scratch)
        # vLLM's logger does not propagate to the root logger and its configuration at
        # import replaces the handlers of "vllm" (vllm/logger.py), so attach again
        if capture not in logging.getLogger("vllm").handlers:
            logging.getLogger("vllm").addHandler(capture)
        result["imports"] = imports
        result["import_seconds"] = round(time.monotonic() - STARTED, 3)
        started = time.monotonic()
        if imports.get("vllm", {}).get("ok"):
            try:
                result["platform"] = select_platform()
            except BaseException as exc:  # noqa: BLE001
                result["platform"] = {"error": _error(exc)}
        PHASE_SECONDS["platform"] = round(time.monotonic() - started, 3)
        started = time.monotonic()
        result["versions"] = versions(request.get("expected_versions", {}))
        PHASE_SECONDS["versions"] = round(time.monotonic() - started, 3)
        warming = None
        if imports.get("vllm", {}).get("ok") and request.get("cases") and hasattr(os, "fork"):
            warming = _forked(lambda: warm_model_registry(request["cases"][0]), f"{scratch}/warm-registry.json")
        result["capabilities"] = capabilities() if imports.get("vllm", {}).get("ok") else {}
        if warming is not None:
            started = time.monotonic()
            result["model_registry_warm"] = _forked_result("building the first case's model configs", warming,
                                                           f"{scratch}/warm-registry.json")
            PHASE_SECONDS["model_registry_warm_wait"] = round(time.monotonic() - started, 3)
        result["phase_seconds"] = PHASE_SECONDS
        cases = []
        if imports.get("vllm", {}).get("ok"):
            for case in request.get("cases", []):
                for key, value in case.get("env", {}).items():
                    os.environ[key] = value
                case_started = time.monotonic()
                try:
                    cases.append({**judge_case(case), "seconds": round(time.monotonic() - case_started, 3)})
                except BaseException as exc:  # noqa: BLE001
                    cases.append({"name": case.get("name"), "error": _error(exc),
                                  "traceback": traceback.format_exc()[-4000:]})
                # pop() reads the value through __getitem__: that read is the probe's own
                seen = set(ENV_READS)
                for key in case.get("env", {}):
                    os.environ.pop(key, None)
                ENV_READS.intersection_update(seen)
        result["cases"] = cases
        for name in FORKED_IMPORTS:
            if isinstance(imports.get(name), dict):
                imports[name]["parent_imported"] = name in sys.modules
        result["env_reads"] = sorted(ENV_READS)
        result["log"] = capture.records[-200:]
    except BaseException as exc:  # noqa: BLE001
        result["fatal"] = _error(exc)
        result["traceback"] = traceback.format_exc()[-8000:]
    result["seconds"] = round(time.monotonic() - STARTED, 3)
    with open(argv[2], "w", encoding="utf-8") as handle:
        json.dump(result, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    status = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written and closed. The interpreter's own shutdown (atexit handlers
    # and module teardown of torch, vLLM and their threads) took about 30 s under qemu and
    # judges nothing, so the probe ends here.
    os._exit(status)
