"""Checks before start, each with a stable id; all of them run and go into one report.

Ids: ``engine.detected``, ``image.id``, ``image.labels``, ``container.name-free``,
``checkpoint.target``, ``checkpoint.draft``, ``checkpoint.mtp-depth`` (launch/mtp_depth.py),
``checkpoint.target.model``, ``checkpoint.draft.model`` (launch/served_model.py),
``cache-root.dedicated``, ``cache-root.local``, ``cache-root.state``, ``ports.free``.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.check_result import FAIL, PASS, CheckResult
from ..core.container_engine import Engine, container_exists, inspect_image
from ..core.documents import read_json_file
from ..core.errors import InputError
from ..profile.model import CheckpointFile
from ..runtime.capabilities import Capabilities
from .checkpoint_pins import is_pattern, resolve_in_checkpoint
from .hashcache import VerifiedHashCache
from .identity import inspect_state

CACHE_ROOT_MARKER = ".sparkflake-cache-root.json"
MAX_MARKER_BYTES = 64 << 10  # a marker is a few hundred bytes
CACHE_ROOT_SCHEMA = "sparkflake.cache-root/v1"
TOOL_DIR = ".sparkflake"
QUARANTINE_DIR = "quarantine"
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "fuse.sshfs", "9p", "lustre",
     "fuse.glusterfs", "afs", "beegfs", "gpfs"}
)


def check_image(engine: Engine | None, image_id: str | None, expected_labels: Mapping[str, str]) -> list[CheckResult]:
    if engine is None:
        return [
            CheckResult("image.id", FAIL, "no container engine available"),
            CheckResult("image.labels", FAIL, "no container engine available"),
        ]
    if image_id is None:
        detail = "the profile pins no image ID; build the image or pass --image sha256:…"
        return [CheckResult("image.id", FAIL, detail), CheckResult("image.labels", FAIL, detail)]
    record = inspect_image(engine, image_id)
    if record is None:
        detail = f"{engine.name} has no image {image_id}"
        return [CheckResult("image.id", FAIL, detail), CheckResult("image.labels", FAIL, detail)]
    if record.image_id != image_id:
        return [
            CheckResult("image.id", FAIL, f"{engine.name} resolved {image_id} to {record.image_id}"),
            CheckResult("image.labels", FAIL, "image ID mismatch; labels not compared"),
        ]
    checks = [CheckResult("image.id", PASS, f"{engine.name} has {image_id}")]
    wrong = [
        f"{key}: expected {value!r}, found {record.labels.get(key)!r}"
        for key, value in sorted(expected_labels.items())
        if record.labels.get(key) != value
    ]
    if wrong:
        checks.append(CheckResult("image.labels", FAIL, "; ".join(wrong)))
    else:
        checks.append(CheckResult("image.labels", PASS, f"{len(expected_labels)} profile labels equal"))
    return checks


def check_image_capabilities(capabilities: Capabilities | None, image_id: str | None) -> CheckResult | None:
    """The capability manifest the launch was judged by must be the one written for the
    image being launched (its config digest is the engine's image ID); None: no manifest."""
    if capabilities is None:
        return None
    if image_id == capabilities.config_digest:
        return CheckResult("image.capabilities", PASS, f"{capabilities.source} was written for {image_id}")
    return CheckResult(
        "image.capabilities", FAIL,
        f"the image being launched is {image_id or 'not given'}, but {capabilities.source} was written by "
        f"`sparkflake runtime check` for image {capabilities.config_digest} (manifest "
        f"{capabilities.manifest_digest}): what this launch was checked against is not what it would run; "
        f"run `sparkflake runtime check OUT --capabilities {capabilities.source}` on the build of the image "
        "being launched, or launch the image it names")


def check_container_name(engine: Engine | None, name: str) -> CheckResult:
    if engine is None:
        return CheckResult("container.name-free", FAIL, "no container engine available")
    if container_exists(engine, name):
        return CheckResult(
            "container.name-free",
            FAIL,
            f"a container named {name} exists; remove it ({engine.name} rm {name}) before starting",
        )
    return CheckResult("container.name-free", PASS, f"no container named {name}")


def check_checkpoint(
    check_id: str,
    directory: str,
    files: Sequence[CheckpointFile],
    cache: VerifiedHashCache,
    pin: Sequence[str] = (),
) -> CheckResult:
    """Every bound file has its size and sha256, and every file the profile's ``pin``
    list names is bound (a shard added after pinning matches a pattern but has no pin)."""
    role = check_id.removeprefix("checkpoint.")
    if not files:
        return CheckResult(
            check_id,
            FAIL,
            f"{directory}: no identity-bearing file of the {role} checkpoint is pinned; record them with "
            f"`sparkflake checkpoint pin {directory} --role {role} --profile PROFILE -o PINS` "
            "and set CHECKPOINT_PINS=PINS in runtime.env (docs/operator-guide.md)",
        )
    problems = [f"{name}: named by the profile's pin list but not pinned; pin again"
                for name in unpinned_names(directory, pin, {entry.path for entry in files})]
    verified = 0
    for entry in files:
        try:
            path = resolve_in_checkpoint(directory, entry.path)
        except InputError as exc:
            problems.append(exc.message)
            continue
        try:
            stat = os.stat(path)
        except OSError as exc:
            problems.append(f"{entry.path}: {exc.strerror}")
            continue
        if not os.path.isfile(path):
            problems.append(f"{entry.path}: not a regular file")
            continue
        if stat.st_size != entry.size:
            problems.append(f"{entry.path}: size {stat.st_size}, expected {entry.size} (changed since it was pinned)")
            continue
        try:
            digest = cache.sha256(path, stat)
        except Exception as exc:  # noqa: BLE001 - any read failure is this check's failure
            problems.append(f"{entry.path}: {exc}")
            continue
        if digest != entry.sha256:
            problems.append(f"{entry.path}: sha256 {digest}, expected {entry.sha256} (changed since it was pinned)")
            continue
        verified += 1
    if problems:
        return CheckResult(check_id, FAIL, f"{directory}: " + "; ".join(problems))
    return CheckResult(check_id, PASS, f"{directory}: {verified} identity-bearing files match")


def unpinned_names(directory: str, pin: Sequence[str], bound: set[str]) -> list[str]:
    """Files the ``pin`` list names (present, for patterns) that no pin binds."""
    try:
        names = os.listdir(directory)
    except OSError:
        names = []  # the per-file checks below say what is wrong with the directory
    named: set[str] = set()
    for pattern in pin:
        named.update(fnmatch.filter(names, pattern) if is_pattern(pattern) else [pattern])
    return sorted(named - bound)


def cache_root_marker(profile: str, rank: int, node_address: str) -> dict[str, Any]:
    return {
        "schema": CACHE_ROOT_SCHEMA,
        "profile": profile,
        "physical_rank": rank,
        "node_address": node_address,
    }


def check_cache_root_dedicated(root: Path, marker: Mapping[str, Any], allowed: set[str]) -> CheckResult:
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        return CheckResult("cache-root.dedicated", FAIL, f"{root} is not a directory")
    if not root.exists():
        parent = root.parent
        if not parent.is_dir():
            return CheckResult("cache-root.dedicated", FAIL, f"{root}: parent {parent} does not exist")
        return CheckResult("cache-root.dedicated", PASS, f"{root} does not exist yet; it will be created")
    marker_path = root / CACHE_ROOT_MARKER
    if marker_path.exists():
        try:
            found = read_json_file(marker_path, "the cache root's marker", MAX_MARKER_BYTES)
        except InputError as exc:
            return CheckResult("cache-root.dedicated", FAIL, f"unreadable: {exc.message}")
        if found != dict(marker):
            return CheckResult(
                "cache-root.dedicated",
                FAIL,
                f"{root} belongs to another identity: {_describe_marker(found)}; this launch is "
                f"{_describe_marker(marker)}. Use a dedicated cache root per profile and rank",
            )
    try:
        foreign = sorted(name for name in os.listdir(root) if name not in allowed)
    except OSError as exc:
        return CheckResult("cache-root.dedicated", FAIL, f"{root}: {exc.strerror}")
    if foreign:
        shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
        return CheckResult(
            "cache-root.dedicated",
            FAIL,
            f"{root} is not dedicated to sparkflake: it holds {shown}",
        )
    return CheckResult("cache-root.dedicated", PASS, f"{root} is dedicated to {_describe_marker(marker)}")


def _describe_marker(marker: Any) -> str:
    if not isinstance(marker, Mapping):
        return "an unrecognised marker"
    return (
        f"profile {marker.get('profile')} rank {marker.get('physical_rank')} at "
        f"{marker.get('node_address')}"
    )


def filesystem_type(path: Path) -> str | None:
    """The filesystem type of the mount holding ``path`` (longest mountinfo prefix)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    real = os.path.realpath(probe)
    best, best_type = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if "-" not in fields:
                    continue
                mount_point = fields[4].replace("\\040", " ")
                fs_type = fields[fields.index("-") + 1]
                if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and len(
                    mount_point
                ) >= len(best):
                    best, best_type = mount_point, fs_type
    except OSError:
        return None
    return best_type


def check_cache_root_local(root: Path) -> CheckResult:
    fs_type = filesystem_type(root)
    if fs_type in NETWORK_FILESYSTEMS:
        return CheckResult(
            "cache-root.local", FAIL, f"{root} is on a network filesystem ({fs_type}); it must be rank-local"
        )
    return CheckResult("cache-root.local", PASS, f"{root} is on {fs_type or 'an unknown filesystem'}")


def check_cache_state(states: Mapping[str, tuple[Path, Mapping[str, Any]]]) -> CheckResult:
    parts = []
    for label, (path, identity) in states.items():
        action, reason = inspect_state(path, identity)
        if action == "reused":
            parts.append(f"{label}: reuse {path}")
        elif action == "created":
            parts.append(f"{label}: cold start in {path}")
        else:
            parts.append(f"{label}: {path} will be quarantined ({reason}); cold start")
    return CheckResult("cache-root.state", PASS, "; ".join(parts))


def check_ports(rank: int, ports: Sequence[tuple[str, int]]) -> CheckResult:
    if rank != 0:
        return CheckResult("ports.free", PASS, f"rank {rank} runs headless and listens on no launcher port")
    busy = []
    for name, port in ports:
        for family, wildcard in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            problem = _bind_problem(family, wildcard, port)
            if problem:
                busy.append(f"{name}={port} {problem}")
    if busy:
        return CheckResult("ports.free", FAIL, "; ".join(busy))
    return CheckResult("ports.free", PASS, ", ".join(f"{name}={port}" for name, port in ports) + " free")


def _bind_problem(family: socket.AddressFamily, wildcard: str, port: int) -> str | None:
    """Why ``port`` cannot be bound on every address of ``family`` (a listener on either
    family takes the port from the server), or None; a host without IPv6 has no IPv6 port
    to take."""
    try:
        probe = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        if exc.errno == errno.EAFNOSUPPORT:
            return None
        raise
    with probe:
        # as the servers that will bind it do (uvicorn through asyncio's create_server,
        # reuse_address on Unix; torch's TCPStore through libuv's uv_tcp_bind): a connection
        # of the last run still in TIME_WAIT does not make the port busy, a listener does
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            probe.bind((wildcard, port))
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno == errno.EADDRNOTAVAIL:
                return None  # IPv6 is compiled in but disabled on this host
            reason = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            return f"{reason} ({'IPv6' if family == socket.AF_INET6 else 'IPv4'})"
    return None
