"""Run a program of the unpacked image as its container would: the image's root as ``/``,
its own interpreter and libraries, the config's environment; no container engine, no GPU.

bubblewrap (Debian's ``bubblewrap``) makes the root: the unpacked tree read-only at ``/``,
a fresh ``/dev``, ``/proc``, ``/tmp`` and ``/root`` (HOME), the host's ``/sys`` read-only (torch's cpuinfo
reads the CPU list there), no network. On an arm64 host the image's arm64 binaries run
natively; on x86_64 the kernel hands them to qemu-user through binfmt_misc. The ``F``
flag makes the kernel open the emulator when it is registered, so it runs inside a root
that does not contain it. Debian 12's qemu-user 7.2 crashes in ``import torch``; 10.0
(bookworm-backports) works, so older ones are refused.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.own_files import open_own_file

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# Debian's qemu-user-binfmt registers the emulator under this name
# (/usr/lib/binfmt.d/qemu-aarch64.conf)
BINFMT_ENTRY = {"arm64": "qemu-aarch64"}
HOST_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
MIN_QEMU = (10, 0)
_QEMU_VERSION = re.compile(rb"version (\d+)\.(\d+)")


@dataclass(frozen=True)
class Emulation:
    """How the image's binaries run here: natively, or through a binfmt_misc emulator."""

    native: bool
    problem: str | None  # why they cannot run here, or None
    detail: str


def host_architecture() -> str:
    machine = platform.machine()
    return HOST_ARCHITECTURES.get(machine, machine)


def emulation_for(architecture: str) -> Emulation:
    host = host_architecture()
    if architecture == host:
        return Emulation(True, None, f"native {host}")
    entry_name = BINFMT_ENTRY.get(architecture)
    if entry_name is None:
        return Emulation(False, f"no emulator is known for {architecture} on this {host} host", "")
    entry = BINFMT_DIR / entry_name
    try:
        text = entry.read_text(errors="replace")
    except OSError:
        return Emulation(False, f"{entry} is not registered: install qemu-user and qemu-user-binfmt from "
                         "bookworm-backports and register them (bin/bootstrap does)", "")
    fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    if not text.startswith("enabled"):
        return Emulation(False, f"{entry} is disabled", "")
    if "F" not in fields.get("flags:", ""):
        return Emulation(False, f"{entry} lacks the F flag: the emulator cannot run inside the image's root", "")
    interpreter = fields.get("interpreter", "")
    emulator = os.path.realpath(interpreter)
    try:
        completed = subprocess.run([emulator, "--version"], capture_output=True, timeout=30, check=False)
    except OSError as exc:
        return Emulation(False, f"{interpreter}: {exc.strerror}", "")
    found = _QEMU_VERSION.search(completed.stdout)
    if found is None:
        return Emulation(False, f"{emulator} --version printed no version", "")
    version = (int(found.group(1)), int(found.group(2)))
    if version < MIN_QEMU:
        return Emulation(False, f"{emulator} is qemu {version[0]}.{version[1]}; {MIN_QEMU[0]}.{MIN_QEMU[1]} or "
                         "newer is needed (7.2 crashes in import torch)", "")
    return Emulation(False, None, f"{emulator} qemu {version[0]}.{version[1]} via binfmt_misc {entry_name} (F)")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@dataclass(frozen=True)
class SandboxRun:
    returncode: int | None  # None: killed at the timeout
    stderr_tail: str
    seconds: float


# Made by the sandbox itself, not taken from the image's root
SANDBOX_MADE = ("dev", "proc", "sys", "tmp", "root")


def sandbox_argv(root: Path, argv: Sequence[str], env: Mapping[str, str],
                 binds: Sequence[tuple[Path, str, bool]]) -> list[str]:
    """bwrap argv running ``argv`` with ``root`` as ``/``; ``binds``: (host, inside, writable).

    ``/`` is a tmpfs holding each top-level entry of ``root`` (bound read-only, symlinks
    recreated), made read-only once the binds are in: a bind may then land where the image
    has no directory (``/models/target``, as the container runtime mounts a checkpoint),
    which a read-only bind of the whole root refuses (bwrap 0.8 has no overlay)."""
    bwrap = bwrap_path() or "bwrap"
    command = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--die-with-parent",
               "--tmpfs", "/"]
    # the image's directories above a bind's mount point are made in the tmpfs, their other
    # entries bound one by one, so that the mount point can be created (/var/lib/... of a
    # JIT directory where the image has /var)
    above = {str(parent) for _, inside, _ in binds for parent in Path(inside).parents if str(parent) != "/"}
    command += _root_entries(root, Path("/"), above)
    command += ["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/sys", "/sys",
                # what a container's writable layer gives: HOME (/root) and /tmp can be written
                "--tmpfs", "/tmp", "--tmpfs", "/root"]
    for host, inside, writable in binds:
        command += ["--bind" if writable else "--ro-bind", str(host), inside]
    command += ["--remount-ro", "/", "--chdir", "/", "--clearenv"]
    for key, value in sorted(env.items()):
        command += ["--setenv", key, value]
    command += ["--", *argv]
    return command


def _root_entries(directory: Path, inside: Path, above: set[str]) -> list[str]:
    arguments: list[str] = []
    for entry in sorted(directory.iterdir()):
        if inside == Path("/") and entry.name in SANDBOX_MADE:
            continue
        target = inside / entry.name
        if entry.is_symlink():
            arguments += ["--symlink", os.readlink(entry), str(target)]
        elif str(target) in above and entry.is_dir():
            arguments += ["--dir", str(target), *_root_entries(entry, target, above)]
        else:
            arguments += ["--ro-bind", str(entry), str(target)]
    return arguments


def run_sandboxed(command: Sequence[str], *, timeout: float, stderr_path: Path,
                  poll: Callable[[], None] | None = None, poll_seconds: float = 1.0) -> SandboxRun:
    """Run ``command`` in its own process group; at the timeout the whole group is killed.
    ``poll`` is called every ``poll_seconds`` while it runs and once after it ends (to follow
    what it writes). Its output goes to ``stderr_path``, a file of the check's own
    (``open_own_file``: a symlink, hard link or FIFO left at the name is refused, naming it,
    never written through), and its tail is read back from that file, not from whatever
    stands at the name by then (the sandboxed code can write the probe's run directory)."""
    import time

    started = time.monotonic()
    stderr = open_own_file(stderr_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, "the output of a sandboxed run")
    try:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                   start_new_session=True)
        try:
            returncode: int | None = None
            while returncode is None:
                left = timeout - (time.monotonic() - started)
                if left <= 0:
                    raise subprocess.TimeoutExpired(list(command), timeout)
                try:
                    returncode = process.wait(timeout=left if poll is None else min(left, poll_seconds))
                except subprocess.TimeoutExpired:
                    pass  # the loop's own test ends it at the timeout
                if poll is not None:
                    poll()
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        size = os.fstat(stderr).st_size
        tail = os.pread(stderr, 8192, max(0, size - 8192)).decode(errors="replace")
    finally:
        os.close(stderr)
    return SandboxRun(returncode, tail, time.monotonic() - started)
