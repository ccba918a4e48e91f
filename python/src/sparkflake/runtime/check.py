"""The runtime check: does the software in this image accept every launch we would make?

The image's own interpreter judges, in one start (``in_image/probe.py``): the host unpacks
the verified layers, runs the probe in the image's root (``probe_runner``, ``sandbox``),
reads its one JSON document with a bound, and turns it into checks with stable ids
(``judge``):

``runtime.platform``, ``runtime.emulation``, ``runtime.sandbox``, ``runtime.scratch`` (the
scratch directory is the check's own, absent or empty, and no other check's), ``runtime.unpack``,
``runtime.interpreter``, ``runtime.bytecode``, ``runtime.probe``, ``runtime.imports``, ``runtime.versions``,
and per launch case ``runtime.vllm-args`` (vLLM's own serve parser), ``runtime.engine-args``,
``runtime.model-config`` (vLLM's ModelConfig from the checkpoint's config.json),
``runtime.speculative-config`` (unknown keys are named), ``runtime.vllm-config``
(compilation, parallel, cache, KV-transfer config objects), ``runtime.kv-connector``,
``runtime.backend-absent``, ``runtime.sparkcache-config``, ``runtime.sparkcache-key-unread``,
``runtime.env-unread``, and the engine start's checks (``engine_verdicts``; for the profile's
default launch ``runtime.meta-model``: its served models constructed on the meta device).

A case is plain data (name, serve args, env) made by the launcher; this stage does not
know how. What the image can honour is recorded as ``Capabilities``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.check_result import ERROR, FAIL, PASS
from ..core.directory_lock import DirectoryInUse, held_alone
from ..core.elf_machines import MACHINE_BY_ARCHITECTURE
from ..core.errors import CheckFailed, InputError
from ..core.progress import Progress, report_phase
from ..oci.layout import output_layout
from ..oci.reader import ImageReader, open_image
from ..oci.tree_paths import host_path_of
from . import checkpoint, driver_stand_in, rootfs, sandbox
from .check_report import Case, CheckReport
from .judge import FULL_CKV_GATHER_SWITCHES, capabilities_of, env_evidence, judge_result
from .probe_runner import HostWork, run_probe
from .scratch import claim_scratch, scratch_problem

DEFAULT_TIMEOUT = 3600.0


def _with_driver_stand_in(report: CheckReport, root: Path, architecture: str, scratch: Path, env: dict[str, str],
                          binds: list[tuple[Path, str, bool]]) -> tuple[dict[str, str], list[tuple[Path, str, bool]]]:
    """The probe's env and binds with the driver stand-in (driver_stand_in.py) found first
    by the dynamic loader; without one, vLLM's CUDA platform cannot load and the engine
    steps of every case fail naming it."""
    stand_in = driver_stand_in.build_stand_in(root, architecture, scratch)
    if stand_in.directory is None:
        report.add("runtime.driver-stand-in", FAIL, str(stand_in.problem))
        return env, binds
    report.add("runtime.driver-stand-in", PASS, f"{driver_stand_in.SONAME} exporting the {len(stand_in.symbols)} "
               f"driver functions {len(stand_in.binders)} extensions of the image bind, each returning "
               f"CUDA_ERROR_NO_DEVICE (the check's only; never in the image)")
    library_path = ":".join(filter(None, (driver_stand_in.INSIDE, env.get("LD_LIBRARY_PATH"))))
    return {**env, "LD_LIBRARY_PATH": library_path}, [*binds, (stand_in.directory, driver_stand_in.INSIDE, False)]


def _platform_of(reader: ImageReader) -> tuple[str, str]:
    config = reader.config
    return str(config.get("os", "")), str(config.get("architecture", ""))


def image_interpreter(root: Path, env: Mapping[str, str]) -> tuple[str | None, str]:
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
            candidate = host_path_of(root, relative, source=path) if relative else root
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


def config_env(reader: ImageReader) -> dict[str, str]:
    env: dict[str, str] = {}
    entries = (reader.config.get("config") or {}).get("Env") or []
    if not isinstance(entries, list):  # no array (the reader refuses it: oci.document_rules): no entries
        return env
    for item in entries:
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
    progress: Progress | None = None,
    mounts: Sequence[checkpoint.ContainerMount] = (),
    device: Mapping[str, Any] | None = None,
) -> CheckReport:
    """Check ``image`` (a build output, OCI layout or archive). Never raises for bad input:
    every problem becomes a check; the caller turns ``exit_code`` into the exit status.
    ``mounts``: where the container runtime mounts the checkpoints (synthetic ones are
    bound there: checkpoint.py) and the directories the container writes. ``device``: the
    profile's [device] as data, which vLLM's CUDA platform is faked as (None: vLLM's start
    is not judged past its configs). ``scratch`` must be absent, empty or the check's own
    scratch (``runtime.scratch``, ``scratch.py``): no other directory is touched."""
    report = CheckReport()
    problem = scratch_problem(scratch)
    if problem is not None:  # refused before anything is made or written
        report.add("runtime.scratch", ERROR, problem)
        return report
    try:
        reader = open_image(output_layout(image))
        image_os, image_arch = _platform_of(reader)  # reads the config, refused here if of another shape
    except InputError as exc:
        report.add("runtime.unpack", ERROR, str(exc))
        return report
    wanted_os, _, wanted_arch = platform.partition("/")
    wanted_arch = wanted_arch.split("/")[0]
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
    try:
        with held_alone(scratch, "another runtime check", "give this one another --scratch"):
            try:
                claim_scratch(scratch)  # again under the lock: it may have changed meanwhile
            except InputError as exc:
                report.add("runtime.scratch", ERROR, str(exc))
                return report
            _check_in_scratch(report, reader, platform=platform, image_arch=image_arch, scratch=scratch,
                              cases=cases, expected_versions=expected_versions, timeout=timeout,
                              progress=progress, mounts=mounts, device=device)
    except DirectoryInUse as exc:
        report.add("runtime.scratch", ERROR, str(exc))
    return report


def _check_in_scratch(report: CheckReport, reader: Any, *, platform: str, image_arch: str, scratch: Path,
                      cases: Sequence[Case], expected_versions: Mapping[str, str], timeout: float, progress: Progress | None,
                      mounts: Sequence[checkpoint.ContainerMount], device: Mapping[str, Any] | None) -> None:
    """The checks that use ``scratch``: unpack, interpreter, probe and judgement."""
    import time

    started = time.monotonic()
    report_phase(progress, "unpack: verified layers into the scratch root")
    try:
        unpacked = rootfs.unpack_image(reader, scratch, progress=progress)
    except (InputError, CheckFailed) as exc:
        report.add("runtime.unpack", ERROR if isinstance(exc, InputError) else FAIL, str(exc))
        return
    report.unpack_seconds = round(time.monotonic() - started, 3)
    report.add("runtime.unpack", PASS, f"{len(unpacked.layer_digests)} verified layers, {unpacked.entries} entries "
               f"in {unpacked.path}")
    env = config_env(reader)
    inside, resolved = image_interpreter(unpacked.path, env)
    if inside is None:
        report.add("runtime.interpreter", FAIL, f"the image has no Python interpreter (looked for {resolved})")
        return
    machine = _elf_machine(resolved)
    if machine != MACHINE_BY_ARCHITECTURE.get(image_arch):
        report.add("runtime.interpreter", FAIL, f"{inside} is not an {image_arch} ELF executable")
        return
    report.add("runtime.interpreter", PASS, inside)
    env_names = {name for case in cases for name in case.env} | set(FULL_CKV_GATHER_SWITCHES)
    # The host's share, on the cores the emulated interpreter leaves free, while it runs:
    # the image's bytecode compiled natively (in the order the probe imports), then the
    # file search for env-variable names.
    host_work = HostWork(unpacked.path, env_names)
    binds = checkpoint.prepare(scratch, tuple(mounts))
    if device is not None:
        env, binds = _with_driver_stand_in(report, unpacked.path, image_arch, scratch, env, binds)
    report_phase(progress, f"bytecode (host), imports and probe of {len(cases)} launch specs (the image's Python)")
    result = run_probe(report, unpacked.path, scratch, inside, image_env=env, cases=cases,
                       expected_versions=expected_versions, timeout=timeout, host_work=host_work, binds=binds,
                       device=device, progress=progress)
    found = host_work.found()
    if result is None:
        return
    report_phase(progress, "judge: the probe's answers against the launch specs")
    evidence = {name: env_evidence(name, result, found) for name in sorted(env_names)}
    if device is not None and "device_error" in result:
        report.add("runtime.device", FAIL, f"vLLM's CUDA platform could not be made the profile's "
                   f"{device.get('name')}: {result['device_error']}")
    elif device is not None:
        report.add("runtime.device", PASS, str(result.get("platform")))
    selections = judge_result(report, result, cases, expected_versions, evidence,
                              engine_judged=device is not None and "device_error" not in result)
    read = {name: text for name, text in evidence.items() if text is not None}
    report.capabilities = capabilities_of(result, reader, reader.config_ref.digest or "", platform, read, selections)
    return


