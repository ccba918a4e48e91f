"""The controller of a chain transfer: a list of files from the first rank of the order to
every rank that needs them, forwarded rank i -> i+1 over their link, all hops at once.

Every hop runs one relay on rank i (started over the management SSH connection) that
carries, over one connection, every file rank i+1 still needs, in order: it follows rank
i's copy of each as it grows and streams it to rank i+1's receiver, so rank i forwards
while it receives. A hop that breaks (link down, connection reset) is started again with
the files rank i+1 still lacks and resumes each at the offset rank i+1 already holds. A
copy that arrives wrong is moved aside by its receiver and fetched again once its upstream
copy is verified. When a rank fails a file for good, every rank after it that still needed
that file fails it with a message naming the rank that broke the chain; ranks before it,
and files it did not fail, are unaffected.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.progress import ProgressCallback as Progress
from . import receive, relay
from .agent_reply import SSH_FAILED, last_json
from .site import Hop, Site
from .ssh import hop_argv, management_argv

HAS = "has"
PENDING = "pending"
FAILED = "failed"

MISMATCH_RETRIES = 2


@dataclass(frozen=True)
class Transfer:
    """One file: its digest, its size (None: the gate's size, for a single file whose size
    the source check gives), and where each rank keeps (or will keep) its copy."""

    sha256: str
    paths: dict[str, str]
    size: int | None = None


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
    files_received: list[int] = field(default_factory=list)  # positions of files that crossed the link
    resumed_from: list[int] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    upstream: str | None = None
    stranded: bool = False  # failed only because a rank before it in the order failed
    detour: bool = False  # reached the other way round a ring, past a failed rank
    moved_aside: str | None = None  # a wrong copy the receiver found under the final name
    # file position -> the stat identity the receiver saw once that file verified
    identities: dict[int, list[int]] = field(default_factory=dict)

    def evidence(self) -> dict[str, Any]:
        """The fields of a rank's evidence record that the chain decides."""
        fields: dict[str, Any] = {"attempts": self.attempts, "bytes_received": self.bytes_received,
                                  "resumed_from": self.resumed_from, "upstream": self.upstream,
                                  "detour": self.detour}
        if self.moved_aside:
            fields["moved_aside"] = self.moved_aside
        if self.status == FAILED:
            fields["status"] = FAILED
        return fields


def start_relay(site: Site, hop: Hop) -> subprocess.Popen[bytes]:
    """The relay on ``hop.sender``; it connects to the receiver at once and both wait for
    the plan line (which names the files), so a hop can be set up before its files are known."""
    downstream = hop_argv(site, hop, ["receive"])
    argv = management_argv(site, hop.sender, ["relay", "--downstream-json", json.dumps(downstream)])
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def start_relays(site: Site) -> dict[str, subprocess.Popen[bytes]]:
    """Every hop of ``site`` set up now, keyed by receiving rank, for ``prestarted``."""
    return {hop.receiver.name: start_relay(site, hop) for hop in site.hops()}


def cancel_relay(process: subprocess.Popen[bytes]) -> None:
    """End of stdin before a plan: the relay cancels its hop and exits."""
    try:
        process.communicate(timeout=30)  # closes stdin first
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


class ChainTransfer:
    """``needs`` maps a rank to the positions in ``transfers`` it lacks (ranks not named
    need nothing); ``failed`` names ranks that failed before the transfer (unreachable).
    ``prestarted``: relays from ``start_relays``, used for each hop's first attempt; the
    ones no hop uses are cancelled (stdin closed before a plan: nothing changes anywhere)."""

    def __init__(
        self,
        site: Site,
        transfers: Sequence[Transfer],
        gate: SizeGate,
        *,
        needs: Mapping[str, Sequence[int]],
        failed: dict[str, str] | None = None,
        retry_seconds: float = 120.0,
        on_verified: Callable[[str], None] | None = None,
        progress: Progress | None = None,
        prestarted: dict[str, subprocess.Popen[bytes]] | None = None,
    ) -> None:
        self.site = site
        self.prestarted = dict(prestarted or {})
        self.transfers = list(transfers)
        self.gate = gate
        self.retry_seconds = retry_seconds
        self.on_verified = on_verified
        self.progress = progress
        self.hops = {hop.receiver.name: hop for hop in site.hops()}
        self.errors: dict[str, str] = dict(failed or {})
        everything = range(len(self.transfers))
        # state[rank][k]: does the rank hold file k verified, is it still coming, or not at all
        self.state: dict[str, list[str]] = {}
        self.needs: dict[str, list[int]] = {}
        for index, name in enumerate(site.order):
            wanted = sorted(set(needs.get(name, ()))) if index > 0 else []
            if name in self.errors:
                self.state[name] = [FAILED for _ in everything]
                wanted = []
            else:
                self.state[name] = [PENDING if k in wanted else HAS for k in everything]
            self.needs[name] = wanted
        self.outcomes = {name: HopOutcome(rank=name) for name in site.order}
        self.condition = threading.Condition()
        self.active: dict[str, subprocess.Popen[bytes]] = {}
        # bytes each receiving rank holds of each file it needs, as its relay last reported
        self.positions: dict[tuple[str, int], int] = {
            (name, k): 0 for name, wanted in self.needs.items() for k in wanted
        }
        self.started = time.monotonic()

    def start(self) -> None:
        """``run`` in a thread of its own (the controller meanwhile verifies the source and
        opens the gate); ``join`` gives its outcomes, or raises what it raised."""
        self._result: dict[str, HopOutcome] | BaseException = RuntimeError("chain transfer never ran")

        def run_capturing() -> None:
            try:
                self._result = self.run()
            except BaseException as exc:  # re-raised by join, in the controller's thread
                self._result = exc

        self._thread = threading.Thread(target=run_capturing, name="chain")
        self._thread.start()

    def join(self) -> dict[str, HopOutcome]:
        self._thread.join()
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result

    def size(self, k: int) -> int:
        size = self.transfers[k].size
        return size if size is not None else (self.gate.size or 0)

    def run(self) -> dict[str, HopOutcome]:
        workers = [
            threading.Thread(target=self._hop_worker, args=(name,), name=f"hop-{name}")
            for name, wanted in self.needs.items()
            if wanted
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        for unused in self.prestarted.values():
            cancel_relay(unused)
        self.prestarted.clear()
        self._run_detour()
        for name, files in self.state.items():
            outcome = self.outcomes[name]
            if FAILED in files and outcome.status == PENDING:
                outcome.status = FAILED
                outcome.error = self.errors.get(name)
        return self.outcomes

    def _run_detour(self) -> None:
        """Ranks stranded behind a failed rank of a ring get the files the other way round
        (rank 0 over the closing link, then backwards), once the forward chain is done."""
        broken = {name for name in self.site.order[1:]
                  if FAILED in self.state[name] and not self.outcomes[name].stranded}
        stranded = {name for name in self.site.order if self.outcomes[name].stranded}
        detour = self.site.detour(broken) if broken and stranded else None
        if detour is None:
            return
        needs = {}
        for name in detour.order[1:]:
            if self.outcomes[name].stranded:
                needs[name] = [k for k in self.needs[name] if self.state[name][k] != HAS]
                self.state[name] = [PENDING if k in needs[name] else held for k, held in enumerate(self.state[name])]
                self.errors.pop(name, None)
        other_way = ChainTransfer(detour, self.transfers, self.gate, needs=needs, retry_seconds=self.retry_seconds,
                                  on_verified=self.on_verified, progress=self.progress)
        other_way.started = self.started
        for name, outcome in other_way.run().items():
            if name not in needs:
                continue
            outcome.detour = True
            outcome.attempts += self.outcomes[name].attempts
            self.outcomes[name] = outcome
            self.state[name] = other_way.state[name]
            if outcome.status == FAILED and outcome.error:
                self.errors[name] = outcome.error

    # ---- one hop ------------------------------------------------------------------------
    def _pending(self, name: str) -> list[int]:
        return [k for k in self.needs[name] if self.state[name][k] == PENDING]

    def _hop_worker(self, name: str) -> None:
        hop = self.hops[name]
        upstream = hop.sender.name
        outcome = self.outcomes[name]
        outcome.upstream = upstream
        deadline = time.monotonic() + self.retry_seconds
        mismatches: Counter[int] = Counter()
        while True:
            with self.condition:
                for k in self._pending(name):
                    if self.state[upstream][k] == FAILED:
                        if outcome.status != FAILED:
                            outcome.stranded = True
                        self._fail_file(name, k, f"rank {name}: not reached because rank {upstream} failed "
                                                 f"({self.errors.get(upstream, 'no copy')})")
                pending = self._pending(name)
            if not pending:
                self._finish(name)
                return
            outcome.attempts += 1
            result, reach_error, received = self._run_hop(hop, pending, mismatches)
            status = (result or {}).get("status", relay.TRANSPORT_ERROR)
            if reach_error is not None:
                status = relay.TRANSPORT_ERROR
            if status == relay.CANCELLED or self.gate.wait() is None:
                self._fail_rank(name, f"rank {name}: not started: the source did not verify")
                return
            if received:
                deadline = time.monotonic() + self.retry_seconds  # progress: the hop keeps resuming
            if status == relay.DONE:
                # what is still pending arrived wrong: fetched again once upstream verified it
                with self.condition:
                    self.condition.wait_for(
                        lambda: all(self.state[upstream][k] != PENDING for k in self._pending(name)))
                continue
            if status in (receive.NO_SPACE, receive.FAILED, "failed"):
                self._fail_rank(name, f"rank {name}: {(result or {}).get('message') or status}")
                return
            # connect-failed, transport-error, incomplete, source-withdrawn: resumable
            if time.monotonic() > deadline:
                if reach_error is not None:
                    self._fail_rank(name, f"rank {name}: cannot start the hop on rank {upstream} "
                                          f"({hop.sender.ssh}): {reach_error}")
                else:
                    detail = (result or {}).get("stderr") or (result or {}).get("message") or status
                    self._fail_rank(name, f"rank {name}: hop {upstream} -> {name} over link "
                                          f"{hop.link.name} ({hop.sender_address} -> {hop.receiver_address}) "
                                          f"failed after {outcome.attempts} attempts: {detail.strip()}")
                return
            time.sleep(1.0)

    def _run_hop(
        self, hop: Hop, pending: list[int], mismatches: Counter[int]
    ) -> tuple[dict[str, Any] | None, str | None, int]:
        """Start the relay on the sender with the files in ``pending``; the second value says
        why the sender was not reached at all (None when it was), the third how many bytes
        crossed the link."""
        name, upstream = hop.receiver.name, hop.sender.name
        process = self.prestarted.pop(name, None) or start_relay(self.site, hop)
        with self.condition:
            self.active[name] = process
        stderr_tail: deque[bytes] = deque(maxlen=20)
        assert process.stdout is not None and process.stdin is not None and process.stderr is not None
        stderr = process.stderr
        reader = threading.Thread(target=lambda: stderr_tail.extend(stderr), daemon=True)
        reader.start()
        opened = self.gate.wait()
        try:
            if opened is not None:
                planned = [relay.PlannedFile(path=self.transfers[k].paths[name], sha256=self.transfers[k].sha256,
                                             size=self.size(k), source=self.transfers[k].paths[upstream])
                           for k in pending]
                process.stdin.write(relay.plan_line(planned))
                process.stdin.flush()
            else:
                process.stdin.close()  # the relay cancels its hop and exits
        except OSError:
            pass  # the relay already ended; its output says why
        received = 0
        last_line = b""
        for line in process.stdout:
            last_line = line
            if line.startswith(b'{"file"'):
                received += self._note_file(name, upstream, pending, line, mismatches)
            elif line.startswith(b'{"progress"'):
                self._note_progress(name, pending, line)
        with contextlib.suppress(OSError):
            process.stdin.close()
        returncode = process.wait()
        reader.join(timeout=2)
        with self.condition:
            self.active.pop(name, None)
        result = last_json(last_line.decode("utf-8", "replace"))
        if result is None and returncode == SSH_FAILED:
            text = b"".join(stderr_tail).decode("utf-8", "replace").strip()
            return None, text.splitlines()[-1] if text else "ssh failed", received
        return result, None, received

    def _note_file(self, name: str, upstream: str, pending: list[int], line: bytes,
                   mismatches: Counter[int]) -> int:
        """One file's result from the receiver: its bytes, its verdict."""
        try:
            document = json.loads(line)
            k = pending[int(document["file"])]
            result = document["result"]
            status = result["status"]
        except (ValueError, KeyError, TypeError, IndexError):
            return 0
        outcome = self.outcomes[name]
        received = int(result.get("received", 0) or 0)
        outcome.bytes_received += received
        if status == receive.OK and not result.get("reused"):
            outcome.files_received.append(k)
        if result.get("offset"):
            outcome.resumed_from.append(int(result["offset"]))
        if result.get("moved_aside_final"):
            outcome.moved_aside = str(result["moved_aside_final"])
        if status == receive.OK:
            if isinstance(result.get("identity"), list):
                outcome.identities[k] = result["identity"]
            self._succeed_file(name, k)
        elif status == receive.MISMATCH:
            mismatches[k] += 1
            with self.condition:
                upstream_verified = self.state[upstream][k] == HAS
            if upstream_verified and mismatches[k] > MISMATCH_RETRIES:
                self._fail_file(name, k, f"rank {name}: received copy does not match sha256 "
                                         f"{self.transfers[k].sha256} ({result.get('message', '')})")
        return received

    def _note_progress(self, name: str, pending: list[int], line: bytes) -> None:
        if not self.progress:
            return
        try:
            document = json.loads(line)
            key = (name, pending[int(document["file"])])
            position = int(document["progress"])
        except (ValueError, KeyError, TypeError, IndexError):
            return
        with self.condition:
            self.positions[key] = position
        self._report(f"-> {name}")

    def _report(self, label: str) -> None:
        if not self.progress:
            return
        with self.condition:
            done = sum(self.positions.values())
        total = sum(self.size(k) for _, k in self.positions)
        self.progress(done, total, label)

    # ---- state changes ------------------------------------------------------------------
    def _succeed_file(self, name: str, k: int) -> None:
        with self.condition:
            self.state[name][k] = HAS
            self.positions[(name, k)] = self.size(k)
            self.condition.notify_all()

    def _finish(self, name: str) -> None:
        """Every file the rank needed was settled: verified, or failed (then it is failed)."""
        outcome = self.outcomes[name]
        if outcome.status == FAILED:
            return
        outcome.seconds = round(time.monotonic() - self.started, 6)
        outcome.status = HAS
        self._report(f"{name} verified")
        if self.on_verified:
            self.on_verified(name)

    def _fail_file(self, name: str, k: int, message: str) -> None:
        outcome = self.outcomes[name]
        if outcome.status != FAILED:
            outcome.status = FAILED
            outcome.error = message
            outcome.seconds = round(time.monotonic() - self.started, 6)
        with self.condition:
            self.state[name][k] = FAILED
            self.errors.setdefault(name, message)
            self.positions[(name, k)] = self.size(k)  # nothing more will arrive
            self.condition.notify_all()
            downstream_names = [n for n, hop in self.hops.items() if hop.sender.name == name]
            for downstream_name in downstream_names:
                process = self.active.get(downstream_name)
                if process is not None and self.state[downstream_name][k] == PENDING:
                    process.kill()  # it may be following the copy that will never come

    def _fail_rank(self, name: str, message: str) -> None:
        for k in self._pending(name):
            self._fail_file(name, k, message)
        if self.outcomes[name].status != FAILED:  # nothing was pending: a late cancel
            self.outcomes[name].status = FAILED
            self.outcomes[name].error = message
