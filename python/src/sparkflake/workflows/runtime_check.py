"""`sparkflake runtime check OUT`: the image's own code judges every launch the profile's
launcher would make.

1. the profile (``--profile``, else the image's ``org.sparkflake.profile`` label) and its
   launch contract;
2. ``launch.conformance.conformance_cases`` — every combination of the profile's settings,
   as the launcher renders it; what the launcher refuses is recorded as skipped;
3. ``runtime.check.run_check`` — unpack, probe, judge, with stand-ins bound where the
   launcher's container spec mounts the checkpoints and the writable directories;
4. the capability manifest kept beside the image's digests (OUT a build directory), in the
   cache by image ID, in the build's receipt, and in ``--capabilities FILE`` when asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic_write import write_bytes_atomic
from ..core.blob_cache import default_cache_root
from ..core.cache_root import claim_cache_root
from ..core.check_result import SKIP
from ..core.errors import InputError
from ..core.output_marker import check_entry_if_output
from ..core.progress import Progress
from ..core.records import record_to_dict
from ..launch.conformance import conformance_cases
from ..launch.contract import LaunchContract, contract_from_profile
from ..launch.image_capabilities import record_capabilities
from ..launch.spec import CONTAINER_DRAFT, CONTAINER_TARGET
from ..lock.pins import WheelPin
from ..lock.profile_locks import load_locks, load_profile
from ..oci.layout import output_layout
from ..oci.reader import open_image
from ..profile.model import Profile
from ..runtime.capabilities import FILE_NAME, Capabilities, dumps
from ..runtime.check import DEFAULT_TIMEOUT, run_check
from ..runtime.check_report import Case, CheckReport
from ..runtime.checkpoint import DRAFT, TARGET, WRITABLE, ContainerMount
from ..runtime.receipt_record import record_in_receipt


@dataclass(frozen=True)
class RuntimeCheckRequest:
    out: Path  # a build output directory, an OCI layout or an archive
    profile: str | None = None  # name or path; None: the image's org.sparkflake.profile label
    capabilities_file: Path | None = None  # also write the capability manifest here
    scratch: Path | None = None  # where the image root is unpacked and kept (default CACHE/runtime/PROFILE)
    cache_root: Path | None = None  # default $XDG_CACHE_HOME/sparkflake
    timeout: float = DEFAULT_TIMEOUT  # seconds the probe may take


@dataclass(frozen=True)
class RuntimeCheckResult:
    report: CheckReport  # every check, the launcher's refusals among them (skipped)
    launch_specs: int  # the launch specs the image's code judged


def profile_name_of(out: Path, given: str | None) -> str:
    """The profile to judge against: ``given``, else the image's own label."""
    if given:
        return given
    labels = (open_image(output_layout(out)).config.get("config") or {}).get("Labels") or {}
    name = labels.get("org.sparkflake.profile")
    if not isinstance(name, str):
        raise InputError(f"{out}: the image has no org.sparkflake.profile label; pass --profile")
    return name


def expected_versions(profile: Profile) -> dict[str, str]:
    """Every wheel of the profile's locks, by distribution name and version."""
    versions: dict[str, str] = {}
    for lock in load_locks(profile):
        for pin in lock.inputs:
            if isinstance(pin, WheelPin) and pin.version:
                versions.setdefault(pin.name, str(pin.version))
    return versions


def container_mounts(contract: LaunchContract, cases: Sequence[Case]) -> tuple[ContainerMount, ...]:
    """Where the launcher's container spec mounts the checkpoints and the directories the
    container writes (launch/spec.py build_spec): the check binds stand-ins there."""
    mounts = [ContainerMount(CONTAINER_TARGET, TARGET)]
    if any(CONTAINER_DRAFT in argument for case in cases for argument in case.serve_args):
        mounts.append(ContainerMount(CONTAINER_DRAFT, DRAFT))
    mounts += [ContainerMount(contract.container_jit_root, WRITABLE),
               ContainerMount(contract.container_cache_root, WRITABLE)]
    return tuple(mounts)


def check_runtime(request: RuntimeCheckRequest, progress: Progress | None = None) -> RuntimeCheckResult:
    """Judge every launch of the profile with the image's own code; record what it can
    honour. Bad input raises; a failed check is in the result's report."""
    out = request.out
    if not out.exists():
        raise InputError(f"{out}: no such file or directory")
    if out.is_dir():  # refused now, not after minutes of checking
        check_entry_if_output(out, FILE_NAME, "check the image from a copy of the output")
    cache_root = request.cache_root or default_cache_root()
    claim_cache_root(cache_root)  # its scratch and the capabilities store go there: only into sparkflake's cache
    profile = load_profile(profile_name_of(out, request.profile), check_locks=False)
    contract = contract_from_profile(profile)
    cases, refused = [], []
    for case in conformance_cases(contract):
        if case.serve_args is None:
            refused.append(case)
        else:
            cases.append(Case(case.name, case.serve_args, case.env, construct_models=case.default_launch))
    report = run_check(out, cases=cases, expected_versions=expected_versions(profile),
                       platform=profile.platform, scratch=request.scratch or cache_root / "runtime" / profile.name,
                       timeout=request.timeout, mounts=container_mounts(contract, cases), progress=progress,
                       device=None if profile.device is None else record_to_dict(profile.device))
    for refusal in refused:
        report.add("runtime.launch-refused", SKIP, f"{refusal.name}: the launcher refuses it: {refusal.refusal}")
    if report.capabilities is not None:
        _record(request, report, report.capabilities, cache_root, launch_specs=len(cases))
    return RuntimeCheckResult(report=report, launch_specs=len(cases))


def _record(request: RuntimeCheckRequest, report: CheckReport, capabilities: Capabilities, cache_root: Path, *,
            launch_specs: int) -> None:
    """The capability manifest beside the image's digests (OUT a build directory), in the
    cache by image ID, in the build's receipt and in ``--capabilities FILE``."""
    out = request.out
    written = dumps(capabilities)
    record_capabilities(capabilities, out if out.is_dir() else None, cache_root)
    if out.is_dir() and (out / "receipt.json").is_file():
        failed_ids = sorted({check.id for check in report.failures})
        record_in_receipt(out / "receipt.json", written, capabilities,
                          {"ok": not failed_ids, "checks": len(report.checks), "failed_checks": failed_ids,
                           "launch_specs": launch_specs, "emulation": report.emulation})
    if request.capabilities_file is not None:
        write_bytes_atomic(request.capabilities_file, written)
