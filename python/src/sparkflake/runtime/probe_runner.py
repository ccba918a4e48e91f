"""Running the probe (``in_image/``) in the image's root: every module of it copied into
the sandbox, the bytecode cache the check keeps (verified by its stat identity), the host's
share beside the emulated interpreter (the image's bytecode compiled natively, then the
file search for env-variable names), and the probe's one JSON document read with a bound
into ``runtime.probe`` / ``runtime.bytecode`` checks."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.atomic_write import run_directory, write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.check_result import FAIL, PASS, SKIP
from ..core.documents import parse_json
from ..core.errors import InputError
from ..core.own_files import open_own_file, read_own_bytes, read_own_json
from ..core.progress import Progress, report_phase
from . import bytecode, rootfs, sandbox
from .check_report import Case, CheckReport
from .env_evidence import find_names

PROBE_DIRECTORY = Path(__file__).with_name("in_image")
# The probe's modules, shipped side by side: probe.py imports the others by these names
PROBE_MODULES = ("probe.py", "probe_capabilities.py", "probe_cases.py", "probe_engine.py", "probe_meta_model.py",
                 "probe_serving.py", "probe_support.py")
MAX_RESULT_BYTES = 32 << 20
MAX_PROGRESS_BYTES = 1 << 20  # read per poll; a line is a few hundred bytes
PROGRESS_FILE = "progress.jsonl"  # in_image/probe_support.py PROGRESS_FILE
INSIDE = "/tmp/sparkflake"
PYCACHE_INSIDE = "/tmp/sparkflake-pycache"
# Top-level packages in the order the probe's imports reach them (torch's own dependencies
# first, then vLLM's), so that the host's compiler stays ahead of the emulated importer.
IMPORT_ORDER = ("typing_extensions", "torch", "numpy", "sympy", "jinja2", "networkx", "fsspec", "filelock",
                "vllm", "pydantic", "pydantic_core", "transformers", "huggingface_hub", "tokenizers", "regex",
                "safetensors", "yaml", "requests", "urllib3", "msgspec", "zmq", "psutil", "cachetools",
                "cloudpickle", "tqdm", "packaging", "b12x", "cutlass", "sparkcache", "fastsafetensors",
                "flashinfer")
# Read by huggingface_hub and transformers when they are imported (huggingface_hub/constants.py
# HF_HUB_OFFLINE), and CUDA_HOME by functools-cached functions the probe's capabilities call
# before any case (flashinfer/jit/cpp_ext.py:47 get_cuda_path, vllm/utils/flashinfer.py:87
# has_flashinfer), CXX by the kernel toolchains' check among them (cpp_ext.py:288), so the container's values are in the interpreter's environment from its
# start, not set per case after the imports as the other variables are
AT_START = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CUDA_HOME", "CXX")


class HostWork:
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


class CaseProgress:
    """Follows the probe's per-case lines (in_image/probe_support.py case_done, one JSON
    object a line in ``PROGRESS_FILE``) while it runs, and reports each complete line as a
    phase of ``progress`` (``runtime check --progress``): the case, its place, its time and
    the steps that did not pass. A line not yet complete waits for the next call."""

    def __init__(self, path: Path, progress: Progress | None) -> None:
        self.path, self.progress = path, progress
        self.offset = 0
        self.lines: list[str] = []
        self.refused = False

    def __call__(self) -> None:
        if self.refused:
            return
        # the image's code writes the file: a FIFO there would block this poll, and with it
        # the timeout, for ever; a symlink would have a host file's lines shown as progress
        try:
            descriptor = open_own_file(self.path, os.O_RDONLY, "the probe's progress lines")
        except FileNotFoundError:
            return
        except (OSError, InputError) as exc:
            self.refused = True
            text = f"the probe's progress is not followed: {exc}"
            self.lines.append(text)
            report_phase(self.progress, text)
            return
        try:
            chunk = os.pread(descriptor, MAX_PROGRESS_BYTES, self.offset)
        finally:
            os.close(descriptor)
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for raw in chunk[:end].splitlines():
            text = self.describe(raw)
            self.lines.append(text)
            report_phase(self.progress, text)

    @staticmethod
    def describe(raw: bytes) -> str:
        try:  # parse_json: a line nested too deeply (RecursionError) is refused too
            line = parse_json(raw, PROGRESS_FILE)
        except InputError:
            return f"the probe wrote a progress line that is not JSON: {raw[:200]!r}"
        if not isinstance(line, dict):
            return f"the probe wrote a progress line that is not an object: {raw[:200]!r}"
        failed = line.get("failed") or []
        verdict = f"did not pass: {', '.join(map(str, failed))}" if failed else "every step passed"
        return f"case {line.get('index')}/{line.get('total')} {line.get('case')}: {line.get('seconds')} s, {verdict}"


def run_probe(report: CheckReport, root: Path, scratch: Path, python: str, *, image_env: Mapping[str, str],
               cases: Sequence[Case], expected_versions: Mapping[str, str], timeout: float,
               host_work: HostWork, binds: Sequence[tuple[Path, str, bool]],
               device: Mapping[str, object] | None = None, progress: Progress | None = None) -> dict[str, Any] | None:
    pycache = _verified_pycache(scratch)
    env = probe_env(image_env, cases)
    host_work.start(pycache, _bytecode_facts(report, root, scratch, python, env))
    with run_directory(scratch, "probe") as work:  # after removing what a killed check left
        ship_probe(work)
        request = {"expected_versions": dict(expected_versions), "cases": [case.as_record() for case in cases]}
        if device is not None:
            request["device"] = dict(device)
        (work / "request.json").write_bytes(canonical_json_bytes(request))
        command = sandbox.sandbox_argv(
            root,
            [python, f"{INSIDE}/probe.py", f"{INSIDE}/request.json", f"{INSIDE}/result.json"],
            env,
            [(work, INSIDE, True), (pycache, PYCACHE_INSIDE, True), *binds],
        )
        run = sandbox.run_sandboxed(command, timeout=timeout, stderr_path=work / "stderr.log",
                                    poll=CaseProgress(work / PROGRESS_FILE, progress))
        host_work.found()  # the compiler is done with the cache before it is recorded
        _report_precompiled(report, host_work.precompiled)
        _record_pycache(scratch, pycache)
        report.probe_seconds = round(run.seconds, 3)
        result_path = work / "result.json"
        if run.returncode is None:
            report.add("runtime.probe", FAIL, f"the probe did not finish within {timeout:.0f} s")
            return None
        if not os.path.lexists(result_path):
            report.add("runtime.probe", FAIL, f"the probe wrote no result (exit {run.returncode}); "
                       f"its stderr ends: {run.stderr_tail[-2000:]}")
            return None
        raw = _probe_result(result_path)
        if isinstance(raw, InputError):
            report.add("runtime.probe", FAIL, f"the probe's result is not read: {raw}")
            return None
        # kept beside the root: what the image said, for the operator reading a failure
        _write_in_scratch(scratch / "probe-result.json", raw)
        if len(raw) > MAX_RESULT_BYTES:
            report.add("runtime.probe", FAIL, f"the probe's result is larger than {MAX_RESULT_BYTES} bytes")
            return None
        # json.loads, not parse_json: the probe writes with json.dump, which writes a NaN or
        # Infinity a config of the image's code may hold; RecursionError: nested too deeply
        try:
            result = json.loads(raw)
        except (ValueError, RecursionError) as exc:
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


def ship_probe(work: Path) -> None:
    """Every module of the probe into ``work``, the directory the sandbox binds at ``INSIDE``."""
    for name in PROBE_MODULES:
        shutil.copyfile(PROBE_DIRECTORY / name, work / name)


def probe_env(image_env: Mapping[str, str], cases: Sequence[Case] = ()) -> dict[str, str]:
    """The image config's environment, with the bytecode cache the check keeps, and the
    ``AT_START`` variables every case's container sets (to the same value).

    The image forbids writing bytecode (its root is read-only anyway); the check keeps the
    image interpreter's bytecode in sparkflake's scratch so that the next check of the
    same layers does not compile every module again under emulation."""
    env = dict(image_env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # humming (a kernel library vLLM's NVFP4 selectors import) starts two background
    # Python processes at import to prebuild its launcher and NVRTC helper
    # (humming/ops/utils.py build_humming_launcher_in_bg, humming/utils/nvrtc.py
    # build_nvrtc_compile_binary_in_bg): under emulation each is another interpreter start
    # beside the probe, and they judge nothing. Its own switch turns them off.
    env["HUMMING_DISABLE_PARALLEL_BUILD"] = "1"
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


def _probe_result(path: Path) -> bytes | InputError:
    """At most ``MAX_RESULT_BYTES`` + 1 bytes of the probe's result file. The image's code
    wrote the run directory: a symlink there (to a host file, /dev/zero), a FIFO or a
    hard link is refused (read_own_bytes), never followed."""
    try:
        return read_own_bytes(path, "the probe's result", MAX_RESULT_BYTES + 1)
    except InputError as exc:
        return exc


def _write_in_scratch(path: Path, content: bytes) -> None:
    """``write_bytes_atomic`` of a file the check keeps in its scratch. It writes through a
    symlink (an operator's output may be one); at a name of the check's own scratch a
    symlink is replaced instead, so nothing outside the scratch is written."""
    if os.path.islink(path):
        os.unlink(path)
    write_bytes_atomic(path, content)


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
    # another run, or anyone, may have left anything at the record's name: read bounded
    found = read_own_json(record, "the record of the check's bytecode cache", rootfs.RECORD_LIMIT)
    recorded = found.get("tree") if isinstance(found, dict) else None
    unpacked = scratch / rootfs.RECORD_NAME
    if pycache.exists() and (recorded is None or not unpacked.exists()
                             or record.stat().st_mtime_ns < unpacked.stat().st_mtime_ns
                             or rootfs.tree_identity(pycache) != recorded):
        shutil.rmtree(pycache)
    pycache.mkdir(exist_ok=True)
    return pycache


def _record_pycache(scratch: Path, pycache: Path) -> None:
    _write_in_scratch(scratch / "pycache.json", json.dumps({"tree": rootfs.tree_identity(pycache)}).encode())


