"""`sparkflake runtime check OUT`: the image's own code judges every launch we would make."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.blob_cache import default_cache_root
from ..core.errors import InputError
from ..lock.pins import WheelPin
from ..lock.profile_locks import load_locks
from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for, warn
from ._parsers import add_command, add_group

if TYPE_CHECKING:  # imported where they are used, after the command is chosen
    from ..launch.contract import LaunchContract
    from ..profile.model import Profile
    from ..runtime.check_report import Case
    from ..runtime.checkpoint import ContainerMount


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "runtime",
        help="runtime conformance of a built image (its own vLLM, SparkCache, B12X judge)",
    )
    check = add_command(
        commands, "check", run_check_command,
        help="run the image's interpreter on every launch spec of the profile",
        description=(
            "Unpack the verified layers of OUT (a build output directory, an OCI layout or an "
            "archive), run the image's own Python in its root (natively on arm64, under "
            "qemu-user through binfmt_misc elsewhere) and have vLLM's, SparkCache's and the "
            "other components' code accept every launch spec of the profile. Writes "
            "OUT/runtime-capabilities.json and records it in OUT/receipt.json (OUT a build "
            "directory), keeps it in the cache by image ID (where `launch-rank --image` finds it), "
            "and --capabilities FILE if given. "
            "Exit 0 ok, 1 a check failed, 2 bad input."
        ),
    )
    check.add_argument("out", metavar="OUT", help="build output directory, OCI layout or archive")
    check.add_argument("--profile", help="profile name or path (default: the image's org.sparkflake.profile label)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress_flag(check)
    check.add_argument("--capabilities", metavar="FILE", type=arguments.output_file,
                       help="also write the capability manifest here")
    check.add_argument("--scratch", metavar="DIR",
                       help="where the image root is unpacked and kept for reuse after verification "
                            "(default: CACHE/runtime/PROFILE)")
    check.add_argument("--cache", metavar="DIR",
                       help="cache root (default $XDG_CACHE_HOME/sparkflake): the capabilities are kept in "
                            "CACHE/capabilities/<image ID hex>.json for launches of this image")
    check.add_argument("--timeout", type=arguments.seconds, default=3600.0, help="seconds the probe may take (default 3600)")


def _cache_root(args: argparse.Namespace) -> Path:
    return Path(args.cache) if args.cache else default_cache_root()


def _scratch(args: argparse.Namespace, profile: str) -> Path:
    if args.scratch:
        return Path(args.scratch)
    return _cache_root(args) / "runtime" / profile


def _profile_name(args: argparse.Namespace, out: Path) -> str:
    if args.profile:
        given: str = args.profile
        return given
    from ..oci.reader import open_image
    from ..runtime.check import image_location

    labels = (open_image(image_location(out)).config.get("config") or {}).get("Labels") or {}
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
    from ..launch.spec import CONTAINER_DRAFT, CONTAINER_TARGET
    from ..runtime.checkpoint import DRAFT, TARGET, WRITABLE, ContainerMount

    mounts = [ContainerMount(CONTAINER_TARGET, TARGET)]
    if any(CONTAINER_DRAFT in argument for case in cases for argument in case.serve_args):
        mounts.append(ContainerMount(CONTAINER_DRAFT, DRAFT))
    mounts += [ContainerMount(contract.container_jit_root, WRITABLE),
               ContainerMount(contract.container_cache_root, WRITABLE)]
    return tuple(mounts)


def run_check_command(args: argparse.Namespace) -> int:
    from ..core.atomic_write import write_bytes_atomic
    from ..core.check_result import SKIP
    from ..core.records import record_to_dict
    from ..launch.conformance import conformance_cases
    from ..launch.contract import contract_from_profile
    from ..launch.image_capabilities import record_capabilities
    from ..lock.profile_locks import load_profile
    from ..runtime import capabilities as capability_file
    from ..runtime.check import run_check
    from ..runtime.check_report import Case

    out = Path(args.out)
    if not out.exists():
        raise InputError(f"{out}: no such file or directory")
    profile = load_profile(_profile_name(args, out), check_locks=False)
    contract = contract_from_profile(profile)
    cases, refused = [], []
    for case in conformance_cases(contract):
        if case.serve_args is None:
            refused.append(case)
        else:
            cases.append(Case(case.name, case.serve_args, case.env, construct_models=case.default_launch))
    report = run_check(out, cases=cases, expected_versions=expected_versions(profile),
                       platform=profile.platform, scratch=_scratch(args, profile.name), timeout=args.timeout,
                       mounts=container_mounts(contract, cases), progress=progress_for("runtime check", args),
                       device=None if profile.device is None else record_to_dict(profile.device))
    for case in refused:
        report.add("runtime.launch-refused", SKIP, f"{case.name}: the launcher refuses it: {case.refusal}")
    if report.capabilities is not None:
        written = capability_file.dumps(report.capabilities)
        # beside the image's digests (OUT a build directory) and in the cache by image ID
        record_capabilities(report.capabilities, out if out.is_dir() else None, _cache_root(args))
        if out.is_dir():
            if (out / "receipt.json").is_file():
                from ..runtime.receipt_record import record_in_receipt

                failed_ids = sorted({check.id for check in report.failed()})
                record_in_receipt(out / "receipt.json", written, report.capabilities,
                                  {"ok": not failed_ids, "checks": len(report.checks), "failed_checks": failed_ids,
                                   "launch_specs": len(cases), "emulation": report.emulation})
        if args.capabilities:
            write_bytes_atomic(Path(args.capabilities), written)
    if args.json:
        print_json(report.as_record())
    else:
        for check in report.checks:
            print_line(f"[{check.status}] {check.id}: {check.detail}")
        seconds = ", ".join(f"{key} {value:.1f} s" for key, value in
                            (("unpack", report.unpack_seconds), ("probe", report.probe_seconds)) if value is not None)
        print_line(f"{len(cases)} launch specs judged by the image's code ({seconds})")
    failed = report.failed()
    if failed:
        warn(f"sparkflake: runtime check failed: {', '.join(sorted({check.id for check in failed}))}")
    return report.exit_code
