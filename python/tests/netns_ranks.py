"""Four (or N) ranks on this machine: network namespaces chained by veth pairs, each with its
own sshd on its own addresses. Traffic stays inside namespaces this fixture creates.

Addresses (private ranges this fixture owns; S is the instance slot, 0..7, so that two
runs on one machine never share a name or a subnet):
- management: a bridge ``sfkmbS`` in the root namespace at 10.231.(210+S).1/24; rank i
  has 10.231.(210+S).(10+i) on its ``mgmt0`` veth. The controller (the test process)
  reaches every rank's sshd here; a server started by a test can listen on the bridge
  address (``mgmt_gateway``).
- fabric: link i joins rank i and rank i+1 with 10.(232+S).(i+1).1/30 (rank i, device
  ``fNa``) and 10.(232+S).(i+1).2/30 (rank i+1, device ``fNb``); the ring's closing link
  N-1 joins the last rank (``.1``) back to rank 0 (``.2``). A chain site does not list it.

``NetnsRanks`` is usable from tests (the session fixture ``netns_ranks``) and from
``bench/bench_fanout.py``. ``close()`` always kills the sshd processes it started, every
process left inside its namespaces, and removes the namespaces and the bridge.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkflake.distribute.site import Link, Rank, Site, SshOptions, dump_site

AGENT = (sys.executable, "-m", "sparkflake.distribute.agent")
INSTANCES = 8  # concurrent fixtures (e.g. a CI run beside a developer's run) get distinct slots


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(list(argv), capture_output=True, text=True)
    if check and completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {completed.returncode}: {completed.stderr.strip()}")
    return completed


def _claim_slot() -> tuple[int, int]:
    """A free instance slot, held by an flock for the fixture's lifetime; a crashed run's
    leftovers in that slot are removed by the next holder."""
    Path("/run/sparkflake-test").mkdir(parents=True, exist_ok=True)
    for slot in range(INSTANCES):
        fd = os.open(f"/run/sparkflake-test/netns-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, fd
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError(f"all {INSTANCES} netns fixture slots are in use")


class NetnsRanks:
    def __init__(self, root: Path, count: int = 4) -> None:
        self.root = Path(root)
        self.count = count
        self.slot, self._slot_lock = _claim_slot()
        self.bridge = f"sfkmb{self.slot}"
        self.mgmt_gateway = f"10.231.{210 + self.slot}.1"
        self.sshd: dict[int, subprocess.Popen[bytes]] = {}
        self.key = self.root / "client_key"
        # podman refuses a runroot path longer than 50 characters
        self.runroot = Path(tempfile.mkdtemp(prefix="sfk-run-", dir="/tmp"))
        self.known_hosts = self.root / "known_hosts"

    # ---- lifecycle -------------------------------------------------------------------
    def namespace(self, index: int) -> str:
        return f"sfk{self.slot}-r{index}"

    def mgmt_address(self, index: int) -> str:
        return f"10.231.{210 + self.slot}.{10 + index}"

    def fabric_address(self, link_index: int, side: int) -> str:
        return f"10.{232 + self.slot}.{link_index + 1}.{side + 1}"

    def _root_veth(self, index: int) -> str:
        return f"sfk{self.slot}m{index}"

    def start(self) -> NetnsRanks:
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_network()
        try:
            self._make_network()
            self._make_keys()
            for index in range(self.count):
                self.rank_dir(index).mkdir(parents=True, exist_ok=True)
                self.data_dir(index).mkdir(parents=True, exist_ok=True)
                self.start_sshd(index)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for index in list(self.sshd):
            self.stop_sshd(index)
        for index in range(self.count):
            self._kill_namespace_processes(index)
        self._remove_network()
        shutil.rmtree(self.runroot, ignore_errors=True)
        if self._slot_lock is not None:
            os.close(self._slot_lock)
            self._slot_lock = None

    def _make_network(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.mgmt_gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for index in range(self.count):
            ns = self.namespace(index)
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            root_side = self._root_veth(index)
            _run("ip", "link", "add", root_side, "type", "veth", "peer", "name", "mgmt0", "netns", ns)
            _run("ip", "link", "set", root_side, "master", self.bridge)
            _run("ip", "link", "set", root_side, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.mgmt_address(index)}/24", "dev", "mgmt0")
            _run("ip", "-n", ns, "link", "set", "mgmt0", "up")
        for link in range(self.count):  # the last one closes the ring
            left, right = self.namespace(link), self.namespace((link + 1) % self.count)
            _run("ip", "-n", left, "link", "add", f"f{link}a", "type", "veth", "peer", "name", f"f{link}b", "netns", right)
            _run("ip", "-n", left, "addr", "add", f"{self.fabric_address(link, 0)}/30", "dev", f"f{link}a")
            _run("ip", "-n", right, "addr", "add", f"{self.fabric_address(link, 1)}/30", "dev", f"f{link}b")
            _run("ip", "-n", left, "link", "set", f"f{link}a", "up")
            _run("ip", "-n", right, "link", "set", f"f{link}b", "up")

    def _remove_network(self) -> None:
        for index in range(self.count):
            _run("ip", "netns", "del", self.namespace(index), check=False)
            _run("ip", "link", "del", self._root_veth(index), check=False)
        _run("ip", "link", "del", self.bridge, check=False)

    def _kill_namespace_processes(self, index: int) -> None:
        listed = _run("ip", "netns", "pids", self.namespace(index), check=False)
        for pid_text in listed.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_text), signal.SIGKILL)

    def _make_keys(self) -> None:
        host_key = self.root / "host_key"
        for key in (self.key, host_key):
            if not key.exists():
                _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkflake-test", "-f", str(key))
        (self.root / "authorized_keys").write_text((self.root / "client_key.pub").read_text())
        self.known_hosts.write_text("")

    # ---- sshd per rank -----------------------------------------------------------------
    def rank_dir(self, index: int) -> Path:
        return self.root / f"rank{index}"

    def data_dir(self, index: int) -> Path:
        return self.rank_dir(index) / "data"

    def addresses(self, index: int) -> list[str]:
        # link index-1 ends here (side 1), link index starts here (side 0); modulo: the ring
        return [self.mgmt_address(index), self.fabric_address((index - 1) % self.count, 1),
                self.fabric_address(index, 0)]

    def start_sshd(self, index: int) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        config = self.rank_dir(index) / "sshd_config"
        lines = [
            "Port 22",
            *[f"ListenAddress {address}" for address in self.addresses(index)],
            f"HostKey {self.root / 'host_key'}",
            f"PidFile {self.rank_dir(index) / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PrintMotd no",
            "LogLevel ERROR",
            "MaxStartups 100",
            "MaxSessions 100",
            "Subsystem sftp internal-sftp",
            # bash sources ~/.bashrc for commands run by sshd when SHLVL < 2; this machine's
            # root .bashrc (pyenv init) costs ~0.4 s per command, which is not what we measure
            "SetEnv SHLVL=1",
        ]
        config.write_text("\n".join(lines) + "\n")
        log = open(self.rank_dir(index) / "sshd.log", "ab")  # noqa: SIM115 - owned by the Popen
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(index), "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=log,
        )
        log.close()
        self.sshd[index] = process
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as probe:
                probe.settimeout(0.5)
                if probe.connect_ex((self.mgmt_address(index), 22)) == 0:
                    return
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd for rank {index} did not start: see {self.rank_dir(index) / 'sshd.log'}")
            time.sleep(0.05)

    def stop_sshd(self, index: int) -> None:
        process = self.sshd.pop(index, None)
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # ---- faults and shaping -------------------------------------------------------------
    def _in_rank_mounts(self, index: int, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ip netns exec`` gives each sshd its own mount namespace, so a disk for rank i is
        mounted (and looked at) from inside it."""
        return _run("nsenter", "-t", str(self.sshd[index].pid), "-m", *argv, check=check)

    def mount_tmpfs(self, index: int, path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._in_rank_mounts(index, "mount", "-t", "tmpfs", "-o", f"size={size}", "sfk-test-disk", str(path))

    def unmount(self, index: int, path: Path) -> None:
        self._in_rank_mounts(index, "umount", str(path), check=False)

    def rank_sees(self, index: int, path: Path) -> bool:
        return self._in_rank_mounts(index, "test", "-e", str(path), check=False).returncode == 0

    def set_link(self, link: int, up: bool) -> None:
        state = "up" if up else "down"
        _run("ip", "-n", self.namespace(link), "link", "set", f"f{link}a", state)
        _run("ip", "-n", self.namespace((link + 1) % self.count), "link", "set", f"f{link}b", state)

    def cut_while_arriving(self, process: subprocess.Popen[str], partial: Path, at_least: int, link: int,
                           down_seconds: float = 6.0) -> int:
        """Once ``partial`` holds ``at_least`` bytes (``process`` still running), cut ``link``
        for ``down_seconds``; the size the partial copy had when the link went down."""
        deadline = time.monotonic() + 90
        while not (partial.exists() and partial.stat().st_size > at_least):
            if time.monotonic() > deadline or process.poll() is not None:
                raise AssertionError(f"{partial} never reached {at_least} bytes (process exit {process.poll()})")
            time.sleep(0.05)
        self.set_link(link, up=False)
        cut_at = partial.stat().st_size
        time.sleep(down_seconds)
        self.set_link(link, up=True)
        return cut_at

    def shape(self, rate: str | None) -> None:
        """Limit every fabric link to ``rate`` (tc tbf, e.g. ``"400mbit"``); None removes it."""
        for link in range(self.count):
            for ns, device in ((self.namespace(link), f"f{link}a"),
                               (self.namespace((link + 1) % self.count), f"f{link}b")):
                if rate is None:
                    _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", device, "root", check=False)
                else:
                    _run(
                        "ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", device, "root",
                        "tbf", "rate", rate, "burst", "512kb", "latency", "100ms",
                    )

    # ---- the site file ------------------------------------------------------------------
    def site(self, *, data_dirs: dict[int, Path] | None = None, topology: str = "chain") -> Site:
        data_dirs = data_dirs or {}
        ranks = []
        for index in range(self.count):
            fabric = {}
            if index > 0:
                fabric[f"l{index - 1}{index}"] = self.fabric_address(index - 1, 1)
            if index < self.count - 1:
                fabric[f"l{index}{index + 1}"] = self.fabric_address(index, 0)
            podman = self.rank_dir(index) / "podman"
            ranks.append(
                Rank(
                    name=f"rank{index}",
                    ssh=f"root@{self.mgmt_address(index)}",
                    management=self.mgmt_address(index),
                    data_dir=str(data_dirs.get(index, self.data_dir(index))),
                    fabric=fabric,
                    engine_args=(
                        "--root", str(podman / "root"),
                        "--runroot", str(self.runroot / f"r{index}"),
                        "--storage-driver", "vfs",
                        "--cgroup-manager", "cgroupfs",
                        "--events-backend", "file",
                    ),
                )
            )
        links = tuple(
            Link(name=f"l{index}{index + 1}", endpoints=(f"rank{index}", f"rank{index + 1}"))
            for index in range(self.count - 1)
        )
        if topology == "ring":
            last = self.count - 1
            links += (Link(name=f"l{last}0", endpoints=(f"rank{last}", "rank0")),)
            ranks[last].fabric[f"l{last}0"] = self.fabric_address(last, 0)
            ranks[0].fabric[f"l{last}0"] = self.fabric_address(last, 1)
        return Site(
            ranks=tuple(ranks),
            links=links,
            order=tuple(f"rank{index}" for index in range(self.count)),
            topology=topology,
            ssh=SshOptions(
                user=None,
                identity_file=str(self.key),
                known_hosts_file=str(self.known_hosts),
                cipher="aes128-gcm@openssh.com",
                connect_timeout=10,
                server_alive_interval=1,
                server_alive_count_max=3,
                strict_host_key_checking="accept-new",
                # the post-quantum default key exchange costs ~0.4 s of CPU per connection here
                options=("KexAlgorithms=curve25519-sha256",),
            ),
            agent=AGENT,
        )

    def write_site(self, path: Path, **kwargs: object) -> Path:
        path.write_text(dump_site(self.site(**kwargs)))  # type: ignore[arg-type]
        return path


@pytest.fixture(scope="session")
def netns_ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsRanks]:
    ranks = NetnsRanks(tmp_path_factory.mktemp("netns-ranks"))
    ranks.start()
    try:
        yield ranks
    finally:
        ranks.close()
