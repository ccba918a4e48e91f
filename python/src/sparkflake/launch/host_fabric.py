"""Checks of the host's RDMA fabric and of operator-supplied libraries, before start.

Ids: ``fabric.rdma-devices``, ``fabric.hca``, ``fabric.interface``, ``nccl.library``.

The host is read as data from sysfs and /dev under ``host_root`` (``/`` on a rank; a test
directory in the tests): ``sys/class/infiniband/<hca>/ports/<n>/state`` (the kernel's
``"4: ACTIVE"``), ``sys/class/net/<interface>``, ``dev/infiniband/uverbs<n>``. Each value
is read with a bound; nothing is written.

NCCL's spellings (NCCL 2.30.7, docs "Environment Variables"): ``NCCL_IB_HCA`` is a comma
list of ``hca[:port]``, a leading ``^`` excludes the names that follow and a leading ``=``
asks for exact names (prefixes otherwise); ``NCCL_SOCKET_IFNAME`` is the same without ports.
An exclusion list names what must not be used, so nothing is required to exist then.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core.check_result import FAIL, PASS, CheckResult
from ..core.digest import file_digest
from ..core.errors import InputError

MAX_SYSFS_VALUE_BYTES = 256
ACTIVE_PORT_STATE = "4: ACTIVE"  # drivers/infiniband/core/sysfs.c state_show


@dataclass(frozen=True)
class NameList:
    """One NCCL interface or HCA list: the names, and how NCCL matches them."""

    names: tuple[str, ...]
    exclude: bool  # "^a,b": use everything but these
    exact: bool  # "=a,b": these names exactly (else: names starting with these)


def parse_name_list(text: str) -> NameList:
    """``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME`` as NCCL reads them; ports (``:1``) dropped."""
    exclude = text.startswith("^")
    body = text[1:] if exclude else text
    exact = body.startswith("=")
    body = body[1:] if exact else body
    names = tuple(item.split(":", 1)[0] for item in body.split(",") if item.split(":", 1)[0])
    return NameList(names, exclude, exact)


def _listing(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _matches(wanted: NameList, present: list[str]) -> dict[str, list[str]]:
    return {
        name: [found for found in present if (found == name if wanted.exact else found.startswith(name))]
        for name in wanted.names
    }


def _read_value(path: Path) -> str | None:
    """A sysfs attribute's first line; None: unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, MAX_SYSFS_VALUE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw.decode("ascii", errors="replace").splitlines()[0].strip() if raw else ""


def check_rdma_devices(host_root: Path) -> CheckResult:
    directory = host_root / "dev" / "infiniband"
    uverbs = [name for name in _listing(directory) if name.startswith("uverbs")]
    if not uverbs:
        return CheckResult(
            "fabric.rdma-devices", FAIL,
            f"{directory} has no uverbs device: the RDMA driver (ib_uverbs) is not loaded, and "
            "NCCL_NET=IB cannot open an HCA in the container; load it or set NCCL_NET=Socket",
        )
    return CheckResult("fabric.rdma-devices", PASS, f"{directory}: {', '.join(uverbs)}")


ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def check_hcas(host_root: Path, hca_list: str, gid_index: int | None = None) -> CheckResult:
    """Every HCA named is present with an ACTIVE port; with ``gid_index``, that port has an
    address at that GID index (``ports/<n>/gids/<index>``: all zeros when the RoCE GID is not
    configured, e.g. no IPv4 address on the interface for index 3)."""
    wanted = parse_name_list(hca_list)
    directory = host_root / "sys" / "class" / "infiniband"
    present = _listing(directory)
    if wanted.exclude:
        return CheckResult("fabric.hca", PASS, f"NCCL_IB_HCA={hca_list} excludes; {len(present)} HCA(s) present")
    problems, found = [], []
    for name, matched in _matches(wanted, present).items():
        if not matched:
            problems.append(f"{name}: no such HCA in {directory} (present: {', '.join(present) or 'none'})")
            continue
        for hca in matched:
            states = {port: _read_value(directory / hca / "ports" / port / "state")
                      for port in _listing(directory / hca / "ports")}
            active = [port for port, state in states.items() if state == ACTIVE_PORT_STATE]
            if not active:
                shown = ", ".join(f"port {port}: {state or 'unreadable'}" for port, state in states.items())
                problems.append(f"{hca}: no active port ({shown or 'no ports'})")
                continue
            if gid_index is not None:
                gids = {port: _read_value(directory / hca / "ports" / port / "gids" / str(gid_index)) for port in active}
                if not any(gid not in (None, "", ZERO_GID) for gid in gids.values()):
                    problems.append(f"{hca}: GID index {gid_index} has no address on port(s) {', '.join(active)} "
                                    "(NCCL_IB_GID_INDEX; RoCE v2 IPv4 GIDs appear once the interface has an IPv4 address)")
                    continue
            found.append(hca)
    if problems:
        return CheckResult("fabric.hca", FAIL, "NCCL_IB_HCA: " + "; ".join(problems))
    return CheckResult("fabric.hca", PASS, f"NCCL_IB_HCA: {', '.join(found)} present with an active port")


def check_interfaces(host_root: Path, interface_list: str) -> CheckResult:
    wanted = parse_name_list(interface_list)
    directory = host_root / "sys" / "class" / "net"
    present = _listing(directory)
    if wanted.exclude:
        return CheckResult("fabric.interface", PASS, f"SOCKET_IFNAME={interface_list} excludes")
    missing = [name for name, matched in _matches(wanted, present).items() if not matched]
    if missing:
        return CheckResult(
            "fabric.interface", FAIL,
            f"SOCKET_IFNAME: no interface {', '.join(missing)} on this host (present: {', '.join(present) or 'none'})",
        )
    return CheckResult("fabric.interface", PASS, f"SOCKET_IFNAME={interface_list} present")


def check_nccl_library(path: str, sha256: str) -> CheckResult:
    """The operator's NCCL build is the file the binding names, byte for byte."""
    try:
        digest = file_digest(path)
    except InputError as exc:  # absent, unreadable, or not a regular file
        return CheckResult("nccl.library", FAIL, f"NCCL_LIBRARY: {exc.message}; refused before start")
    found = digest.file_hash.base16
    if found != sha256:
        return CheckResult(
            "nccl.library", FAIL,
            f"NCCL_LIBRARY={path} has sha256 {found}, NCCL_LIBRARY_SHA256 binds {sha256}: refused before start",
        )
    return CheckResult("nccl.library", PASS, f"NCCL_LIBRARY={path}: sha256 {found} ({digest.size} bytes) as bound")
