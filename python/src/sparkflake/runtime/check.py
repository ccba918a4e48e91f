"""The runtime check: does the software in this image accept every launch we would make?

The image's own interpreter judges, in one start (``probe.py``): the host unpacks the
verified layers, runs the probe in the image's root (sandbox), reads its one JSON
document with a bound, and turns it into checks with stable ids:

``runtime.platform``, ``runtime.emulation``, ``runtime.sandbox``, ``runtime.unpack``,
``runtime.interpreter``, ``runtime.bytecode``, ``runtime.probe``, ``runtime.imports``, ``runtime.versions``,
and per launch case ``runtime.vllm-args`` (vLLM's own serve parser), ``runtime.engine-args``,
``runtime.model-config`` (vLLM's ModelConfig from the checkpoint's config.json),
``runtime.speculative-config`` (unknown keys are named), ``runtime.vllm-config``
(compilation, parallel, cache, KV-transfer config objects), ``runtime.kv-connector``,
``runtime.backend-absent``, ``runtime.sparkcache-config``, ``runtime.sparkcache-key-unread``,
``runtime.env-unread``.

A case is plain data (name, serve args, env) made by the launcher; this stage does not
know how. What the image can honour is recorded as ``Capabilities``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compose.tree_paths import image_path
from ..core.atomic_write import write_bytes_atomic
from ..core.check_result import CheckResult
from ..core.elf_machines import MACHINE_BY_ARCHITECTURE
from ..core.errors import CheckFailed, InputError
from ..oci.reader import ImageReader, open_image
from . import bytecode, checkpoint, rootfs, sandbox
from .capabilities import Capabilities
from .env_evidence import EXTERNAL_READERS, find_names

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"
PROBE_SOURCE = Path(__file__).with_name("probe.py")
MAX_RESULT_BYTES = 32 << 20
DEFAULT_TIMEOUT = 3600.0
INSIDE = "/tmp/sparkflake"
PYCACHE_INSIDE = "/tmp/sparkflake-pycache"
# The variables that would switch B12X's full-CKV gather (DCP2/DCP4) on: the name the
# launcher used to emit, and the one the seeds' launcher passes to their vLLM fork.
FULL_CKV_GATHER_SWITCHES = ("VLLM_B12X_MLA_CKV_GATHER", "B12X_FULL_CKV_GATHER")
# Top-level packages in the order the probe's imports reach them (torch's own dependencies
# first, then vLLM's), so that the host's compiler stays ahead of the emulated importer.
IMPORT_ORDER = ("typing_extensions", "torch", "numpy", "sympy", "jinja2", "networkx", "fsspec", "filelock",
                "vllm", "pydantic", "pydantic_core", "transformers", "huggingface_hub", "tokenizers", "regex",
                "safetensors", "yaml", "requests", "urllib3", "msgspec", "zmq", "psutil", "cachetools",
                "cloudpickle", "tqdm", "packaging", "b12x", "cutlass", "sparkcache", "fastsafetensors",
                "flashinfer")
# Read by huggingface_hub and transformers when they are imported (huggingface_hub/constants.py
# HF_HUB_OFFLINE), so the container's values are in the interpreter's environment from its
# start, not set per case after the imports as the other variables are
AT_START = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclass(frozen=True)
class Case:
    name: str
    serve_args: tuple[str, ...]
    env: Mapping[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "serve_args": list(self.serve_args), "env": dict(sorted(self.env.items()))}


@dataclass
class CheckReport:
    checks: list[CheckResult] = field(default_factory=list)
    capabilities: Capabilities | None = None
    probe_seconds: float | None = None
    import_seconds: float | None = None
    unpack_seconds: float | None = None
    bytecode_seconds: float | None = None
    emulation: str = ""

    def add(self, check_id: str, status: str, detail: str) -> CheckResult:
        result = CheckResult(check_id, status, detail)
        self.checks.append(result)
        return result

    @property
    def exit_code(self) -> int:
        statuses = {check.status for check in self.checks}
        if ERROR in statuses:
            return 2
        return 1 if FAIL in statuses else 0

    def failed(self) -> list[CheckResult]:
        return [check for check in self.checks if check.status in (FAIL, ERROR)]

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": "sparkflake.runtime-check/v1",
            "ok": self.exit_code == 0,
            "emulation": self.emulation,
            "seconds": {"unpack": self.unpack_seconds, "bytecode": self.bytecode_seconds, "probe": self.probe_seconds,
                        "imports": self.import_seconds},
            "checks": [check.as_record() for check in self.checks],
            "capabilities": self.capabilities.as_json() if self.capabilities else None,
        }


def image_location(out: Path) -> Path:
    """A build output directory holds the OCI layout in ``oci/``; anything else is the image."""
    return out / "oci" if (out / "oci" / "oci-layout").is_file() else out


def _platform_of(reader: ImageReader) -> tuple[str, str]:
    config = reader.config
    return str(config.get("os", "")), str(config.get("architecture", ""))


def _interpreter(root: Path, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The image's Python as the container would run it (``$VIRTUAL_ENV/bin/python``, else
    ``python3`` on the config's PATH), resolved inside the root."""
    candidates = []
    if env.get("VIRTUAL_ENV"):
        candidates.append(env["VIRTUAL_ENV"].rstrip("/") + "/bin/python")
    for directory in env.get("PATH", "/usr/bin:/bin").split(":"):
        if directory.startswith("/"):
            candidates.append(directory.rstrip("/") + "/python3")
    for candidate in candidates:
        resolved = _resolve_in_root(root, candidate)
        if resolved is not None and resolved.is_file():
            return candidate, str(resolved)
    return None, ", ".join(candidates)


def _resolve_in_root(root: Path, path: str, hops: int = 40) -> Path | None:
    """``path`` of the image, every symlink (the last one too) followed inside ``root``."""
    relative = path.strip("/")
    for _ in range(hops):
        try:
            candidate = image_path(root, relative, source=path) if relative else root
            parent = candidate.parent
        except (CheckFailed, OSError):
            return None
        if not candidate.is_symlink():
            return candidate if candidate.exists() else None
        target = os.readlink(candidate)
        inside = os.path.relpath(parent, root)
        relative = os.path.normpath(target.lstrip("/") if target.startswith("/") else
                                    os.path.join("" if inside == "." else inside, target))
        if relative.startswith(".."):
            return None
    return None


def _elf_machine(path: str) -> int | None:
    with open(path, "rb") as handle:
        header = handle.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def _config_env(reader: ImageReader) -> dict[str, str]:
    env = {}
    for item in (reader.config.get("config") or {}).get("Env") or []:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            env[key] = value
    return env


def run_check(
    image: Path,
    *,
    cases: Sequence[Case],
    expected_versions: Mapping[str, str],
    platform: str,
    scratch: Path,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Any = None,
    mounts: Sequence[checkpoint.ContainerMount] = (),
) -> CheckReport:
    """Check ``image`` (a build output, OCI layout or archive). Never raises for bad input:
    every problem becomes a check; the caller turns ``exit_code`` into the exit status.
    ``mounts``: where the container runtime mounts the checkpoints (synthetic ones are
    bound there: checkpoint.py) and the directories the container writes."""
    import time

    report = CheckReport()
    try:
        reader = open_image(image_location(image))
        config_digest = reader.config_ref.digest or ""
    except InputError as exc:
        report.add("runtime.unpack", ERROR, str(exc))
        return report
    wanted_os, _, wanted_arch = platform.partition("/")
    wanted_arch = wanted_arch.split("/")[0]
    image_os, image_arch = _platform_of(reader)
    if (image_os, image_arch) != (wanted_os, wanted_arch):
        report.add("runtime.platform", FAIL, f"the image is {image_os}/{image_arch}; the profile runs {platform}")
        return report
    report.add("runtime.platform", PASS, f"{image_os}/{image_arch}")
    emulation = sandbox.emulation_for(image_arch)
    if emulation.problem:
        report.add("runtime.emulation", FAIL, emulation.problem)
        return report
    report.emulation = emulation.detail
    report.add("runtime.emulation", PASS, emulation.detail)
    if sandbox.bwrap_path() is None:
        report.add("runtime.sandbox", ERROR, "bwrap (Debian package bubblewrap) is not installed")
        return report
    started = time.monotonic()
    try:
        unpacked = rootfs.unpack_image(reader, scratch, progress=progress)
    except (InputError, CheckFailed) as exc:
        report.add("runtime.unpack", ERROR if isinstance(exc, InputError) else FAIL, str(exc))
        return report
    report.unpack_seconds = round(time.monotonic() - started, 3)
    report.add("runtime.unpack", PASS, f"{len(unpacked.layer_digests)} verified layers, {unpacked.entries} entries "
               f"in {unpacked.path}")
    env = _config_env(reader)
    inside, resolved = _interpreter(unpacked.path, env)
    if inside is None:
        report.add("runtime.interpreter", FAIL, f"the image has no Python interpreter (looked for {resolved})")
        return report
    machine = _elf_machine(resolved)
    if machine != MACHINE_BY_ARCHITECTURE.get(image_arch):
        report.add("runtime.interpreter", FAIL, f"{inside} is not an {image_arch} ELF executable")
        return report
    report.add("runtime.interpreter", PASS, inside)
    env_names = {name for case in cases for name in case.env} | set(FULL_CKV_GATHER_SWITCHES)
    # The host's share, on the cores the emulated interpreter leaves free, while it runs:
    # the image's bytecode compiled natively (in the order the probe imports), then the
    # file search for env-variable names.
    host_work = _HostWork(unpacked.path, env_names)
    binds = checkpoint.prepare(scratch, tuple(mounts))
    result = _run_probe(report, unpacked.path, scratch, inside, env, cases, expected_versions, timeout, host_work,
                        binds)
    found = host_work.found()
    if result is None:
        return report
    evidence = {name: _env_evidence(name, result, found) for name in sorted(env_names)}
    _judge(report, result, cases, expected_versions, evidence)
    read = {name: text for name, text in evidence.items() if text is not None}
    report.capabilities = _capabilities(result, reader, config_digest, platform, read)
    return report


class _HostWork:
    """A thread that compiles the image's bytecode (bytecode.precompile, one worker:
    the other core runs the emulated interpreter) and then searches the image's files for
    the env-variable names; ``found`` waits for it."""

    def __init__(self, root: Path, env_names: set[str]) -> None:
        self._root = root
        self._env_names = env_names
        self._thread: threading.Thread | None = None
        self.precompiled: bytecode.Precompiled | None = None
        self.error: BaseException | None = None
        self._found: dict[str, str] = {}

    def start(self, pycache: Path, facts: bytecode.InterpreterFacts | None) -> None:
        def work() -> None:
            try:
                if facts is not None:
                    self.precompiled = bytecode.precompile(self._root, pycache, facts, workers=max(1, (os.cpu_count()
                                                                                                     or 2) - 1),
                                                           first=IMPORT_ORDER)
                self._found = find_names(self._root, self._env_names)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self.error = exc

        self._thread = threading.Thread(target=work, name="runtime-host-work", daemon=True)
        self._thread.start()

    def found(self) -> dict[str, str]:
        if self._thread is None:
            self._found = find_names(self._root, self._env_names)
        else:
            self._thread.join()
        if self.error is not None:
            raise self.error
        return self._found


def _run_probe(report: CheckReport, root: Path, scratch: Path, python: str, image_env: Mapping[str, str],
               cases: Sequence[Case], expected_versions: Mapping[str, str], timeout: float,
               host_work: _HostWork, binds: Sequence[tuple[Path, str, bool]]) -> dict | None:
    pycache = _verified_pycache(scratch)
    for stale in scratch.glob("probe-*"):  # left by a check that was killed
        shutil.rmtree(stale, ignore_errors=True)
    env = probe_env(image_env, cases)
    host_work.start(pycache, _bytecode_facts(report, root, scratch, python, env))
    work = Path(tempfile.mkdtemp(prefix="probe-", dir=scratch))
    try:
        shutil.copyfile(PROBE_SOURCE, work / "probe.py")
        request = {"expected_versions": dict(expected_versions), "cases": [case.as_json() for case in cases]}
        (work / "request.json").write_text(json.dumps(request, sort_keys=True))
        command = sandbox.sandbox_argv(
            root,
            [python, f"{INSIDE}/probe.py", f"{INSIDE}/request.json", f"{INSIDE}/result.json"],
            env,
            [(work, INSIDE, True), (pycache, PYCACHE_INSIDE, True), *binds],
        )
        run = sandbox.run_sandboxed(command, timeout=timeout, stderr_path=work / "stderr.log")
        host_work.found()  # the compiler is done with the cache before it is recorded
        _report_precompiled(report, host_work.precompiled)
        _record_pycache(scratch, pycache)
        report.probe_seconds = round(run.seconds, 3)
        result_path = work / "result.json"
        if run.returncode is None:
            report.add("runtime.probe", FAIL, f"the probe did not finish within {timeout:.0f} s")
            return None
        if not result_path.is_file():
            report.add("runtime.probe", FAIL, f"the probe wrote no result (exit {run.returncode}); "
                       f"its stderr ends: {run.stderr_tail[-2000:]}")
            return None
        with open(result_path, "rb") as handle:
            raw = handle.read(MAX_RESULT_BYTES + 1)
        # kept beside the root: what the image said, for the operator reading a failure
        shutil.copyfile(result_path, scratch / "probe-result.json")
        if len(raw) > MAX_RESULT_BYTES:
            report.add("runtime.probe", FAIL, f"the probe's result is larger than {MAX_RESULT_BYTES} bytes")
            return None
        try:
            result = json.loads(raw)
        except ValueError as exc:
            report.add("runtime.probe", FAIL, f"the probe's result is not JSON: {exc}")
            return None
        if not isinstance(result, dict) or result.get("schema") != "sparkflake.runtime-probe/v1":
            report.add("runtime.probe", FAIL, "the probe's result is not a sparkflake.runtime-probe/v1 document")
            return None
        if "fatal" in result:
            report.add("runtime.probe", FAIL, f"the probe failed: {result['fatal']}")
            return None
        report.import_seconds = result.get("import_seconds")
        report.add("runtime.probe", PASS, f"python {result.get('python')} on {result.get('machine')}: one start, "
                   f"{len(result.get('cases', []))} cases in {run.seconds:.1f} s")
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def probe_env(image_env: Mapping[str, str], cases: Sequence[Case] = ()) -> dict[str, str]:
    """The image config's environment, with the bytecode cache the check keeps, and the
    ``AT_START`` variables every case's container sets (to the same value).

    The image forbids writing bytecode (its root is read-only anyway); the check keeps the
    image interpreter's bytecode in sparkflake's scratch so that the next check of the
    same layers does not compile every module again under emulation."""
    env = dict(image_env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE_INSIDE
    env.setdefault("HOME", "/root")
    for name in AT_START:
        values = {case.env.get(name) for case in cases}
        value = values.pop() if len(values) == 1 else None
        if value is not None:
            env[name] = value
    return env


def _bytecode_facts(report: CheckReport, root: Path, scratch: Path, python: str,
                    env: Mapping[str, str]) -> bytecode.InterpreterFacts | None:
    """The image interpreter's bytecode facts, when the host may compile for it (bytecode.py)."""
    facts = bytecode.interpreter_facts(root, python, env, scratch)
    reason = facts if isinstance(facts, str) else bytecode.host_can_compile(facts)
    if isinstance(facts, str) or reason is not None:
        report.add("runtime.bytecode", SKIP, f"the image compiles its own bytecode: {reason}")
        return None
    return facts


def _report_precompiled(report: CheckReport, done: bytecode.Precompiled | None) -> None:
    if done is None:
        return
    report.bytecode_seconds = done.seconds
    report.add("runtime.bytecode", PASS, f"bytecode magic and cache tag as the host's: {done.compiled} modules "
               f"compiled on the host in {done.seconds:.1f} s beside the probe, {done.kept} already cached, "
               f"{done.refused} the compiler refuses")


def _verified_pycache(scratch: Path) -> Path:
    """The bytecode the image's interpreter wrote in earlier checks of this root, kept only
    if every entry's stat identity is what the last check recorded; else started afresh.
    The record goes whenever the root is unpacked again (rootfs removes the scratch root)."""
    pycache = scratch / "pycache"
    record = scratch / "pycache.json"
    try:
        recorded = json.loads(record.read_bytes()[: 1 << 16]).get("tree")
    except (OSError, ValueError, AttributeError):
        recorded = None
    unpacked = scratch / rootfs.RECORD_NAME
    if pycache.exists() and (recorded is None or not unpacked.exists()
                             or record.stat().st_mtime_ns < unpacked.stat().st_mtime_ns
                             or rootfs.tree_identity(pycache) != recorded):
        shutil.rmtree(pycache)
    pycache.mkdir(exist_ok=True)
    return pycache


def _record_pycache(scratch: Path, pycache: Path) -> None:
    write_bytes_atomic(scratch / "pycache.json", json.dumps({"tree": rootfs.tree_identity(pycache)}).encode())


def _dynamic(result: Mapping[str, Any]) -> set[str]:
    """Names vLLM's own registry lists (no file search needed for those)."""
    registry = result.get("capabilities", {}).get("vllm_env_registry")
    return set(registry) if isinstance(registry, list) else set()


def _env_evidence(name: str, result: Mapping[str, Any], found: Mapping[str, str]) -> str | None:
    """The evidence that the image reads ``name``, most specific first; None: nothing does."""
    if name in _dynamic(result):
        return "vllm.envs.environment_variables (vllm/envs.py)"
    if name in found:
        return f"named in {found[name]}"
    if name in EXTERNAL_READERS:
        return f"external: {EXTERNAL_READERS[name]}"
    if name in result.get("env_reads", []):
        return "read through os.environ by the image's Python code during the probe"
    return None


def _judge(report: CheckReport, result: Mapping[str, Any], cases: Sequence[Case],
           expected_versions: Mapping[str, str], evidence: Mapping[str, str | None]) -> None:
    imports = result.get("imports", {})
    broken = [f"{name}: {entry.get('error')}" for name, entry in sorted(imports.items()) if not entry.get("ok")]
    report.add("runtime.imports", FAIL if broken else PASS,
               "; ".join(broken) if broken else f"imported {', '.join(sorted(imports))}")
    versions = result.get("versions", {})
    wrong = [f"{dist}: image has {versions.get(dist)!r}, the lock pins {version}"
             for dist, version in sorted(expected_versions.items()) if versions.get(dist) != version]
    report.add("runtime.versions", FAIL if wrong else PASS,
               "; ".join(wrong) if wrong else f"{len(expected_versions)} distributions as locked")
    capabilities = result.get("capabilities", {})
    verdicts = {verdict.get("name"): verdict for verdict in result.get("cases", [])}
    for case in cases:
        verdict = verdicts.get(case.name)
        if verdict is None:
            report.add("runtime.probe", FAIL, f"{case.name}: the probe returned no verdict")
            continue
        _judge_case(report, case, verdict, capabilities)
        unread = [name for name in sorted(case.env) if evidence.get(name) is None]
        report.add("runtime.env-unread", FAIL if unread else PASS,
                   f"{case.name}: read by nothing in the image: {', '.join(unread)}" if unread
                   else f"{case.name}: {len(case.env)} variables, each read by the image")


def _verdict_status(entry: Any) -> tuple[bool, str]:
    if not isinstance(entry, Mapping):
        return False, "no verdict"
    return bool(entry.get("ok")), str(entry.get("error") or "")


def _judge_case(report: CheckReport, case: Case, verdict: Mapping[str, Any], capabilities: Mapping[str, Any]) -> None:
    name = case.name
    if "error" in verdict and "parser" not in verdict:
        report.add("runtime.probe", FAIL, f"{name}: {verdict['error']}")
        return
    ok, error = _verdict_status(verdict.get("parser"))
    report.add("runtime.vllm-args", PASS if ok else FAIL,
               f"{name}: vllm serve parser accepts {len(case.serve_args)} arguments" if ok else f"{name}: {error}")
    _judge_backends(report, case, capabilities)
    if not ok:
        return
    ok, error = _verdict_status(verdict.get("engine_args"))
    report.add("runtime.engine-args", PASS if ok else FAIL, f"{name}: AsyncEngineArgs.from_cli_args" if ok
               else f"{name}: {error}")
    model = verdict.get("model_config")
    if isinstance(model, Mapping):
        ok, error = _verdict_status(model)
        report.add("runtime.model-config", PASS if ok else FAIL,
                   f"{name}: ModelConfig of {model.get('architecture')}, max_model_len {model.get('max_model_len')}"
                   if ok else f"{name}: {error}")
    configs = verdict.get("configs", {})
    speculative = configs.get("speculative")
    with_target = verdict.get("speculative_with_target")
    if isinstance(with_target, Mapping) and not with_target.get("ok") and _speculative_method(case) == "mtp":
        # MTP drafts with the target's own checkpoint: nothing synthetic stands in for the draft
        report.add("runtime.speculative-config", FAIL, f"{name}: with the target's ModelConfig: "
                   f"{with_target.get('error')}")
    elif isinstance(speculative, Mapping):
        unexpected = speculative.get("unexpected_keys") or []
        if unexpected:
            report.add("runtime.speculative-config", FAIL,
                       f"{name}: SpeculativeConfig rejects key(s) {', '.join(unexpected)}: {speculative.get('error')}")
        elif (str(speculative.get("error") or "").startswith("ValidationError")
              and "target_model_config must be present" not in str(speculative.get("error"))):
            # pydantic checks every key and value before __post_init__ (vllm/config/utils.py:70);
            # its validator's "target_model_config must be present for mtp"
            # (vllm/config/speculative.py:1255) is the checkpoint this check does not have
            report.add("runtime.speculative-config", FAIL, f"{name}: {speculative.get('error')}")
        else:
            # past validation, SpeculativeConfig.__post_init__ reads the target model config,
            # which needs a checkpoint: that part is not judged here
            report.add("runtime.speculative-config", PASS,
                       f"{name}: SpeculativeConfig validates every key and value" + _with_target_note(with_target))
    bad = [f"{key}: {entry.get('error')}" for key, entry in sorted(configs.items())
           if key != "speculative" and isinstance(entry, Mapping) and not entry.get("ok")]
    built = sorted(key for key in configs if key != "speculative")
    report.add("runtime.vllm-config", FAIL if bad else PASS,
               f"{name}: " + ("; ".join(bad) if bad else f"built {', '.join(built)}"))
    if "kv_connector" in verdict:
        ok, error = _verdict_status(verdict["kv_connector"])
        report.add("runtime.kv-connector", PASS if ok else FAIL,
                   f"{name}: connector {verdict['kv_connector'].get('source')}" if ok else f"{name}: {error}")
    spark = verdict.get("sparkcache")
    if isinstance(spark, Mapping):
        ok, error = _verdict_status(spark.get("connector_config"))
        report.add("runtime.sparkcache-config", PASS if ok else FAIL,
                   f"{name}: parse_connector_config accepts it" if ok else f"{name}: {error}")
        unread = sorted(set(spark.get("keys_given", [])) - set(spark.get("keys_read", [])))
        report.add("runtime.sparkcache-key-unread", FAIL if unread else PASS,
                   f"{name}: SparkCache reads no extra-config key {', '.join(unread)}" if unread
                   else f"{name}: SparkCache reads all {len(spark.get('keys_given', []))} extra-config keys")


def _speculative_method(case: Case) -> str | None:
    args = list(case.serve_args)
    if "--speculative-config" not in args or args.index("--speculative-config") + 1 >= len(args):
        return None
    try:
        method = json.loads(args[args.index("--speculative-config") + 1]).get("method")
    except (ValueError, AttributeError):
        return None
    return method if isinstance(method, str) else None


def _with_target_note(with_target: Any) -> str:
    """What building it with the target's ModelConfig gave, for a draft whose checkpoint is
    a synthetic stand-in (checkpoint.py): recorded, not judged."""
    if not isinstance(with_target, Mapping):
        return ""
    if with_target.get("ok"):
        return (f"; built with the target's ModelConfig ({with_target.get('method')}, draft "
                f"{', '.join(with_target.get('draft_architectures') or []) or 'the target'})")
    return f"; with the target's ModelConfig and the synthetic draft config: {with_target.get('error')}"


BACKEND_FLAGS = {"--attention-backend": "attention_backends", "--moe-backend": "moe_backends",
                 "--linear-backend": "linear_backends"}


def _judge_backends(report: CheckReport, case: Case, capabilities: Mapping[str, Any]) -> None:
    args = list(case.serve_args)
    for flag, key in BACKEND_FLAGS.items():
        if flag not in args or args.index(flag) + 1 >= len(args):
            continue
        value = args[args.index(flag) + 1]
        known = capabilities.get(key)
        if not isinstance(known, list):
            report.add("runtime.backend-absent", FAIL, f"{case.name}: the image reported no {key}")
        elif value not in known and value.lower().replace("-", "_") not in known:
            report.add("runtime.backend-absent", FAIL, f"{case.name}: {flag} {value}: the image has no such "
                       f"backend ({', '.join(known)})")
        else:
            report.add("runtime.backend-absent", PASS, f"{case.name}: {flag} {value} is a backend of the image")


def _capabilities(result: Mapping[str, Any], reader: ImageReader, config_digest: str, platform: str,
                  env_read: Mapping[str, str]) -> Capabilities:
    caps = result.get("capabilities", {})

    def strings(key: str) -> tuple[str, ...]:
        value = caps.get(key)
        return tuple(value) if isinstance(value, list) else ()

    sparkcache = caps.get("sparkcache") if isinstance(caps.get("sparkcache"), Mapping) else {}
    keys_read: set[str] = set()
    refusal = None
    for verdict in result.get("cases", []):
        spark = verdict.get("sparkcache")
        if isinstance(spark, Mapping):
            keys_read |= set(spark.get("keys_read", []))
            hybrid = spark.get("glm5next_kv_groups", {})
            if isinstance(hybrid, Mapping) and not hybrid.get("ok"):
                refusal = str(hybrid.get("error"))
    warnings = []
    for name, entry in sorted(result.get("imports", {}).items()):
        for record in entry.get("log", []):
            warnings.append(f"import {name}: {record.get('message')}")
        for message in entry.get("warnings", []):
            warnings.append(f"import {name}: {message}")
    plugins = caps.get("general_plugins")
    if isinstance(plugins, list):
        warnings += [f"general plugins: {message}" for message in plugins]
    switch = next((name for name in FULL_CKV_GATHER_SWITCHES if name in env_read), None)
    return Capabilities(
        manifest_digest=reader.manifest_ref.digest if reader.manifest_ref else None,
        config_digest=config_digest,
        platform=platform,
        versions=dict(result.get("versions", {})),
        attention_backends=strings("attention_backends"),
        moe_backends=strings("moe_backends"),
        linear_backends=strings("linear_backends"),
        speculative_methods=strings("speculative_methods"),
        speculative_config_fields=strings("speculative_config_fields"),
        load_formats=strings("load_formats"),
        kv_connectors=strings("kv_connectors"),
        sparkcache_profiles=tuple(sparkcache.get("profiles", ())) + tuple(sparkcache.get("aliases", {})),
        sparkcache_extra_keys_read=tuple(sorted(keys_read)),
        sparkcache_glm5next_refusal=refusal,
        env_read=dict(env_read),
        full_ckv_gather_switch=switch,
        flashinfer_kernels=caps.get("flashinfer_kernels") is True,
        quantization_methods=strings("quantization_methods"),
        plugin_warnings=tuple(warnings),
        vllm_platform=str(result.get("platform", "")),
    )
