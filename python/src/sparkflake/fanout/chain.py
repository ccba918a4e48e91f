"""The controller of a chain transfer: one file from the first rank of the order to every
rank that needs it, forwarded rank i -> i+1 over their link, all hops at once.

Every hop runs a relay on rank i (started over the management SSH connection) that follows
rank i's copy as it grows and streams it to rank i+1's receiver: rank i forwards while it
receives. A hop that breaks (link down, connection reset) is started again and resumes at
the offset rank i+1 already holds. A copy that arrives wrong is moved aside by its receiver
and fetched again once its upstream copy is verified. When a rank fails for good, every rank
after it that still needed the file fails with a message naming the rank that broke the
chain; ranks before it are unaffected.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import receive, relay
from .site import Hop, Site
from .ssh import SSH_FAILED, hop_argv, last_json, management_argv

Progress = Callable[[int, int, str], None]

HAS = "has"
PENDING = "pending"
FAILED = "failed"

MISMATCH_RETRIES = 2


@dataclass(frozen=True)
class Transfer:
    """One file: its digest, and where each rank keeps (or will keep) its copy."""

    sha256: str
    paths: dict[str, str]


class SizeGate:
    """Hops are set up (ssh connections, agents started) while the source is still being
    verified; bytes move only once the gate opens with the verified size. A cancelled gate
    ends every hop before any rank changed anything."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.size: int | None = None

    @classmethod
    def opened(cls, size: int) -> SizeGate:
        gate = cls()
        gate.open(size)
        return gate

    def open(self, size: int) -> None:
        self.size = size
        self._event.set()

    def cancel(self) -> None:
        self.size = None
        self._event.set()

    def wait(self) -> int | None:
        self._event.wait()
        return self.size


@dataclass
class HopOutcome:
    rank: str
    status: str = PENDING
    attempts: int = 0
    bytes_received: int = 0
    resumed_from: list[int] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    upstream: str | None = None
    moved_aside: str | None = None  # a wrong copy the receiver found under the final name


class ChainTransfer:
    def __init__(
        self,
        site: Site,
        transfer: Transfer,
        gate: SizeGate,
        *,
        needs: set[str],
        failed: dict[str, str] | None = None,
        retry_seconds: float = 120.0,
        on_verified: Callable[[str], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.site = site
        self.transfer = transfer
        self.gate = gate
        self.retry_seconds = retry_seconds
        self.on_verified = on_verified
        self.progress = progress
        self.hops = {hop.receiver.name: hop for hop in site.hops()}
        self.state: dict[str, str] = {}
        self.errors: dict[str, str] = dict(failed or {})
        for index, name in enumerate(site.order):
            if name in self.errors:
                self.state[name] = FAILED
            elif index > 0 and name in needs:
                self.state[name] = PENDING
            else:
                self.state[name] = HAS
        self.outcomes = {name: HopOutcome(rank=name) for name in site.order}
        self.condition = threading.Condition()
        self.active: dict[str, subprocess.Popen[bytes]] = {}
        # bytes each receiving rank holds, as its relay last reported (for progress)
        self.positions: dict[str, int] = {name: 0 for name, state in self.state.items() if state == PENDING}
        self.started = time.monotonic()

    def run(self) -> dict[str, HopOutcome]:
        workers = [
            threading.Thread(target=self._hop_worker, args=(name,), name=f"hop-{name}")
            for name, state in self.state.items()
            if state == PENDING
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        for name, state in self.state.items():
            outcome = self.outcomes[name]
            if state == FAILED and outcome.status == PENDING:
                outcome.status = FAILED
                outcome.error = self.errors.get(name)
        return self.outcomes

    # ---- one hop ------------------------------------------------------------------------
    def _hop_worker(self, name: str) -> None:
        hop = self.hops[name]
        upstream = hop.sender.name
        outcome = self.outcomes[name]
        outcome.upstream = upstream
        deadline = time.monotonic() + self.retry_seconds
        mismatches = 0
        while True:
            with self.condition:
                if self.state[upstream] == FAILED:
                    self._fail(name, f"rank {name}: not reached because rank {upstream} failed "
                                     f"({self.errors.get(upstream, 'no copy')})")
                    return
            outcome.attempts += 1
            result, reach_error = self._run_hop(hop)
            downstream = (result or {}).get("downstream") or {}
            outcome.bytes_received += int(downstream.get("received", 0) or 0)
            if downstream.get("offset"):
                outcome.resumed_from.append(int(downstream["offset"]))
            if downstream.get("moved_aside_final"):
                outcome.moved_aside = str(downstream["moved_aside_final"])
            status = (result or {}).get("status", relay.TRANSPORT_ERROR)
            if reach_error is not None:
                status = relay.TRANSPORT_ERROR
            if status == relay.CANCELLED or self.gate.wait() is None:
                self._fail(name, f"rank {name}: not started: the source did not verify")
                return
            if status == receive.OK:
                outcome.seconds = round(time.monotonic() - self.started, 6)
                outcome.status = HAS
                self._succeed(name)
                return
            if status == receive.MISMATCH:
                with self.condition:
                    self.condition.wait_for(lambda: self.state[upstream] != PENDING)
                    upstream_state = self.state[upstream]
                if upstream_state == HAS and mismatches < MISMATCH_RETRIES:
                    mismatches += 1
                    continue
                self._fail(name, f"rank {name}: received copy does not match sha256 "
                                 f"{self.transfer.sha256} ({downstream.get('message', '')})")
                return
            if status in (receive.NO_SPACE, receive.FAILED, "failed"):
                message = (result or {}).get("message") or downstream.get("message") or status
                self._fail(name, f"rank {name}: {message}")
                return
            # connect-failed, transport-error, incomplete, source-withdrawn: resumable
            if time.monotonic() > deadline:
                if reach_error is not None:
                    self._fail(name, f"rank {name}: cannot start the hop on rank {upstream} "
                                     f"({hop.sender.ssh}): {reach_error}")
                else:
                    detail = (result or {}).get("stderr") or (result or {}).get("message") or status
                    self._fail(name, f"rank {name}: hop {upstream} -> {name} over link "
                                     f"{hop.link.name} ({hop.sender_address} -> {hop.receiver_address}) "
                                     f"failed after {outcome.attempts} attempts: {detail.strip()}")
                return
            time.sleep(1.0)

    def _run_hop(self, hop: Hop) -> tuple[dict[str, Any] | None, str | None]:
        """Start the relay on the sender; the second value says why the sender was not
        reached at all (None when it was)."""
        receive_args = [
            "receive",
            "--path", self.transfer.paths[hop.receiver.name],
            "--sha256", self.transfer.sha256,
        ]
        downstream = hop_argv(self.site, hop, receive_args)
        relay_args = [
            "relay",
            "--source", self.transfer.paths[hop.sender.name],
            "--downstream-json", json.dumps(downstream),
        ]
        argv = management_argv(self.site, hop.sender, relay_args)
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        with self.condition:
            self.active[hop.receiver.name] = process
        stderr_tail: deque[bytes] = deque(maxlen=20)
        reader = threading.Thread(target=lambda: stderr_tail.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
        reader.start()
        assert process.stdout is not None and process.stdin is not None
        size = self.gate.wait()
        try:
            if size is not None:
                process.stdin.write(relay.go_line(size))
                process.stdin.flush()
            else:
                process.stdin.close()  # the relay cancels its hop and exits
        except OSError:
            pass  # the relay already ended; its output says why
        lines = []
        for line in process.stdout:
            lines.append(line)
            self._note_progress(hop.receiver.name, line)
        with contextlib.suppress(OSError):
            process.stdin.close()
        returncode = process.wait()
        reader.join(timeout=2)
        with self.condition:
            self.active.pop(hop.receiver.name, None)
        result = last_json(b"".join(lines).decode("utf-8", "replace"))
        if result is None and returncode == SSH_FAILED:
            text = b"".join(stderr_tail).decode("utf-8", "replace").strip()
            return None, text.splitlines()[-1] if text else "ssh failed"
        return result, None

    def _note_progress(self, name: str, line: bytes) -> None:
        if not self.progress or not line.startswith(b'{"progress"'):
            return
        try:
            position = int(json.loads(line)["progress"])
        except (ValueError, KeyError, TypeError):
            return
        with self.condition:
            self.positions[name] = position
            done = sum(self.positions.values())
        self.progress(done, (self.gate.size or 0) * len(self.positions), f"-> {name}")

    # ---- state changes ------------------------------------------------------------------
    def _succeed(self, name: str) -> None:
        with self.condition:
            self.state[name] = HAS
            self.positions[name] = self.gate.size or 0
            self.condition.notify_all()
            done = sum(self.positions.values())
        if self.progress:
            self.progress(done, (self.gate.size or 0) * len(self.positions), f"{name} verified")
        if self.on_verified:
            self.on_verified(name)

    def _fail(self, name: str, message: str) -> None:
        outcome = self.outcomes[name]
        outcome.status = FAILED
        outcome.error = message
        outcome.seconds = round(time.monotonic() - self.started, 6)
        with self.condition:
            self.state[name] = FAILED
            self.errors[name] = message
            if name in self.positions:
                self.positions[name] = self.gate.size or 0  # nothing more will arrive
            self.condition.notify_all()
            downstream_names = [n for n, hop in self.hops.items() if hop.sender.name == name]
            for downstream_name in downstream_names:
                process = self.active.get(downstream_name)
                if process is not None:
                    process.kill()
