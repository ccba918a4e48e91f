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

from ..core.bounded_lines import bounded_lines, keep_tail
from ..core.progress import ProgressCallback as Progress
from ..core.watchdog import Watchdog
from . import receive, relay
from .agent_protocol import LINE_LIMIT
from .agent_reply import (
    SSH_FAILED,
    MalformedReply,
    count_at,
    count_up_to,
    flag_at,
    identity_at,
    last_json,
    object_at,
    text_at,
    words_at,
)
from .site import Hop, Site
from .ssh import hop_argv, management_argv

HAS = "has"
PENDING = "pending"
FAILED = "failed"

MISMATCH_RETRIES = 2
# A relay is silent at most while its source grows no more and then while its receiver says
# nothing, each ended by the relay itself after STALL_SECONDS: silent longer, it hung (its
# host's keepalives may still answer), and its session is ended (a resumable transport error).
RELAY_SILENCE_SECONDS = 2 * relay.STALL_SECONDS + 60


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
    # file position -> the most bytes of it the receiver said it held after a run (offset +
    # received): a hop is resumed without end only while this grows
    held: dict[int, int] = field(default_factory=dict)

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


@dataclass
class HopAttempt:
    """What one run of a hop's relay said: its last line (None: it ended without one), its
    status, why the sender was not reached at all (None when it was), the files that got a
    result and those whose copy arrived wrong, whether a copy grew past what the receiver
    held after every earlier run, and what made a line of it unusable."""

    result: dict[str, Any] | None = None
    status: str = relay.TRANSPORT_ERROR
    message: str = ""
    stderr: str = ""
    reach_error: str | None = None
    answered: set[int] = field(default_factory=set)
    mismatched: set[int] = field(default_factory=set)
    advanced: bool = False
    unusable: str | None = None


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
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        """End the transfer now (the controller was interrupted): every relay running is
        ended, none is started again, and no rank is reported verified after this, so no
        commit or import begins. ``join`` then gives each unfinished rank as failed."""
        self.cancelled.set()
        if self.gate.size is None:
            self.gate.cancel()  # hops still waiting for the source end before any byte moves
        with self.condition:
            running = [*self.active.values(), *self.prestarted.values()]
            self.prestarted.clear()
            self.condition.notify_all()  # a hop waiting on its upstream's state looks again
        for process in running:
            with contextlib.suppress(OSError):
                process.kill()

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
        try:
            for worker in workers:
                worker.join()
        except BaseException:  # interrupted (run in the controller's own thread, as replicate does)
            self.cancel()
            for worker in workers:
                worker.join()
            raise
        for unused in self.prestarted.values():
            cancel_relay(unused)
        self.prestarted.clear()
        if not self.cancelled.is_set():
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
        try:
            self._carry(name)
        except Exception as exc:
            # not one of the relay's answers foreseen below, so a fault here: a thread that died
            # of it would leave the rank pending, its record half-filled, and every rank after
            # it waiting on its state for ever; it is this rank's failure, named, instead
            with self.condition:
                process = self.active.pop(name, None)
            if process is not None:
                with contextlib.suppress(OSError):
                    process.kill()
            self._fail_rank(name, f"rank {name}: the hop to it broke off: {type(exc).__name__}: {exc}")

    def _carry(self, name: str) -> None:
        hop = self.hops[name]
        upstream = hop.sender.name
        outcome = self.outcomes[name]
        outcome.upstream = upstream
        deadline = time.monotonic() + self.retry_seconds
        mismatches: Counter[int] = Counter()
        while True:
            if self.cancelled.is_set():
                self._fail_rank(name, f"rank {name}: not completed: the fan-out was interrupted")
                return
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
            attempt = self._run_hop(hop, pending, mismatches)
            status = relay.TRANSPORT_ERROR if attempt.reach_error is not None else attempt.status
            if status == relay.CANCELLED or self.gate.wait() is None:
                self._fail_rank(name, f"rank {name}: not started: the source did not verify")
                return
            if attempt.unusable is not None:
                # a relay (or receiver) of another version, or a damaged one: asking it again
                # gets the same answer, so the hop ends here rather than being restarted
                self._fail_rank(name, attempt.unusable)
                return
            if attempt.advanced:
                # progress: the hop keeps resuming. Progress is a copy that grew, not bytes a
                # relay says crossed (a damaged one saying so on every run resumed it for ever)
                deadline = time.monotonic() + self.retry_seconds
            if status == relay.DONE:
                with self.condition:
                    unanswered = [k for k in self._pending(name) if k not in attempt.mismatched]
                if unanswered:
                    # a relay says done once every file of its plan got its result; a file still
                    # pending with no mismatch to explain it never got one, and restarting the
                    # hop would ask for it again for ever
                    paths = [self.transfers[k].paths[name] for k in unanswered]
                    more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
                    self._fail_rank(name, f"rank {name}: the relay on rank {upstream} ({hop.sender.ssh}) said "
                                          f"done without a result for {paths[0]}{more}")
                    return
                # what is still pending arrived wrong: fetched again once upstream verified it
                # (at most MISMATCH_RETRIES times once it has)
                with self.condition:
                    self.condition.wait_for(lambda: self.cancelled.is_set() or all(
                        self.state[upstream][k] != PENDING for k in self._pending(name)))
                continue
            if status in (receive.NO_SPACE, receive.FAILED, "failed"):
                self._fail_rank(name, f"rank {name}: {attempt.message or status}")
                return
            # connect-failed, transport-error, incomplete, source-withdrawn: resumable
            if time.monotonic() > deadline:
                if attempt.reach_error is not None:
                    self._fail_rank(name, f"rank {name}: cannot start the hop on rank {upstream} "
                                          f"({hop.sender.ssh}): {attempt.reach_error}")
                else:
                    detail = attempt.stderr.strip() or attempt.message.strip() or status
                    self._fail_rank(name, f"rank {name}: hop {upstream} -> {name} over link "
                                          f"{hop.link.name} ({hop.sender_address} -> {hop.receiver_address}) "
                                          f"failed after {outcome.attempts} attempts: {detail}")
                return
            self.cancelled.wait(1.0)

    def _run_hop(self, hop: Hop, pending: list[int], mismatches: Counter[int]) -> HopAttempt:
        """Start the relay on the sender with the files in ``pending``; what it said."""
        name, upstream = hop.receiver.name, hop.sender.name
        with self.condition:
            prestarted = self.prestarted.pop(name, None)
        process = prestarted or start_relay(self.site, hop)
        with self.condition:
            self.active[name] = process
            if self.cancelled.is_set():  # cancel looked at the running relays before this one
                process.kill()
        stderr_tail: deque[bytes] = deque(maxlen=20)
        assert process.stdout is not None and process.stdin is not None and process.stderr is not None
        stderr = process.stderr
        reader = threading.Thread(target=keep_tail, args=(stderr, stderr_tail, relay.STDERR_LINE_LIMIT), daemon=True)
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
        attempt = HopAttempt()
        relay_on = f"rank {name}: the relay on rank {upstream} ({hop.sender.ssh})"
        last_line = b""
        watchdog = Watchdog(RELAY_SILENCE_SECONDS, process.kill)
        for number, line in enumerate(bounded_lines(process.stdout, LINE_LIMIT), start=1):
            watchdog.feed()
            last_line = line
            document = last_json(line.decode("utf-8", "replace"))
            if document is None or attempt.unusable is not None:
                continue  # not a line of the protocol (or the hop already ended on one)
            try:
                # what a line is, its keys say: canonical JSON sorts them, so a progress line
                # ({"file": i, "progress": n}) starts like a file's result ({"file": i, "result": ..})
                if "result" in document:
                    self._note_file(name, upstream, pending, document, mismatches=mismatches, attempt=attempt,
                                    where=f"{relay_on}, line {number}")
                elif "progress" in document:
                    self._note_progress(name, pending, document, f"{relay_on}, line {number}")
            except MalformedReply as exc:
                attempt.unusable = exc.message
                with contextlib.suppress(OSError):
                    process.kill()  # its later lines are read past: the hop has failed
        with contextlib.suppress(OSError):
            process.stdin.close()
        returncode = process.wait()
        watchdog.stop()
        reader.join(timeout=2)
        with self.condition:
            self.active.pop(name, None)
        attempt.result = last_json(last_line.decode("utf-8", "replace"))
        if watchdog.fired and attempt.result is None:
            attempt.message = f"{relay_on} said nothing for {RELAY_SILENCE_SECONDS:g}s: its session was ended"
        if attempt.result is None and returncode == SSH_FAILED:
            text = b"".join(stderr_tail).decode("utf-8", "replace").strip()
            attempt.reach_error = text.split("\n")[-1] if text else "ssh failed"  # lines end at \n only
        elif attempt.result is not None and attempt.unusable is None:
            try:
                self._note_last(attempt, f"{relay_on}, its last line")
            except MalformedReply as exc:
                attempt.unusable = exc.message
        return attempt

    @staticmethod
    def _note_last(attempt: HopAttempt, where: str) -> None:
        """The relay's last line: its status (none, when the relay ended before its last
        word and this is a file's line: the stream broke) and what it says of why."""
        last = attempt.result
        if last is not None and "status" in last:
            attempt.status = text_at(last, "status", where)
        attempt.message = words_at(last, "message", where)
        attempt.stderr = words_at(last, "stderr", where)

    def _plan_index(self, document: dict[str, Any], pending: list[int], where: str) -> int:
        """The file a line is about: its position in the plan this relay was given."""
        index = count_at(document, "file", where)
        if index >= len(pending):
            raise MalformedReply(where, "$.file", f"a file of the plan (0 to {len(pending) - 1})", index)
        return pending[index]

    def _note_file(self, name: str, upstream: str, pending: list[int], document: dict[str, Any], *,
                   mismatches: Counter[int], attempt: HopAttempt, where: str) -> None:
        """One file's result from the receiver: its bytes, its verdict. Every value is read
        in its shape and range (a count no larger than the file) before any is taken."""
        k = self._plan_index(document, pending, where)
        if k in attempt.answered:  # one result per file and run: its bytes are counted once
            raise MalformedReply(where, "$.file", "a file without a result yet on this run",
                                 pending.index(k))
        result = object_at(document, "result", where)
        status = text_at(result, "status", where, "$.result")
        size = self.size(k)
        # a receiver that stopped before writing (no space, cannot write) gives no counts
        offset = count_up_to(result, "offset", size, where, "$.result") if "offset" in result else 0
        # the receiver appends from offset: more than the rest of the file never crossed
        received = count_up_to(result, "received", size - offset, where, "$.result") if "received" in result else 0
        reused = flag_at(result, "reused", where, "$.result") if "reused" in result else False
        moved_aside = words_at(result, "moved_aside_final", where, "$.result")
        message = words_at(result, "message", where, "$.result")
        identity = identity_at(result, where, "$.result") if status == receive.OK else None
        outcome = self.outcomes[name]
        attempt.answered.add(k)
        if status == receive.MISMATCH:
            outcome.held[k] = 0  # the copy was moved aside: the next run starts it again
        elif status == receive.OK or offset + received > outcome.held.get(k, 0):
            attempt.advanced = True
            outcome.held[k] = size if status == receive.OK else offset + received
        outcome.bytes_received += received
        if status == receive.OK and not reused:
            outcome.files_received.append(k)
        if offset:
            outcome.resumed_from.append(offset)
        if moved_aside:
            outcome.moved_aside = moved_aside
        if status == receive.OK:
            if identity is not None:
                outcome.identities[k] = identity
            self._succeed_file(name, k)
        elif status == receive.MISMATCH:
            attempt.mismatched.add(k)
            mismatches[k] += 1
            with self.condition:
                upstream_verified = self.state[upstream][k] == HAS
            if upstream_verified and mismatches[k] > MISMATCH_RETRIES:
                self._fail_file(name, k, f"rank {name}: received copy does not match sha256 "
                                         f"{self.transfers[k].sha256} ({message})")

    def _note_progress(self, name: str, pending: list[int], document: dict[str, Any], where: str) -> None:
        """How far the receiver holds a file: read (and refused) even when nobody watches."""
        k = self._plan_index(document, pending, where)
        position = count_up_to(document, "progress", self.size(k), where)
        if not self.progress:
            return
        with self.condition:
            self.positions[(name, k)] = position
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
        if self.on_verified and not self.cancelled.is_set():
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

