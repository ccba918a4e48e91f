"""The chain's controller (``distribute/chain.py``) reading what a hop's relay writes, and the
relay (``distribute/relay.py``, on the sending rank) reading what the receiver answers, when
a line has an unexpected shape: a relay or receiver of another version, or a damaged one.
Every such line is that hop's failure, named in the rank's outcome; none is a thread's
traceback that leaves the rank half-recorded, none restarts the hop for ever, and no value
outside the plan (a file index, a byte count) reaches a count. A hunt over relay lines of
the wrong shape found the DONE branch restarting a hop without end, four places raising in
a hop's worker thread, negative and oversized counts summed, and progress lines dropped.

The relays here are in-process fakes at ``chain.start_relay``: the lines they write are the
test's; no process, ssh or file is involved (the real hops run in test_fanout*.py)."""

from __future__ import annotations

import io
import json
import math
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.canonical_json import canonical_json_bytes
from sparkflake.distribute import chain, receive, relay
from sparkflake.distribute.site import Link, Rank, Site

SHA = "ab" * 32
SIZE = 1000
STARTS_LIMIT = 12  # a hop started this often in one run: the chain would restart it for ever
RUN_SECONDS = 20.0


def three_ranks() -> Site:
    ranks = tuple(Rank(name=f"s{i}", ssh=f"root@192.0.2.{10 + i}", management=f"192.0.2.{10 + i}",
                       data_dir="/var/lib/sparkflake",
                       fabric={name: f"10.0.{i}.{i}" for name in (f"l{i - 1}{i}", f"l{i}{i + 1}")})
                  for i in range(3))
    links = (Link("l01", ("s0", "s1")), Link("l12", ("s1", "s2")))
    return Site(ranks=ranks, links=links, order=("s0", "s1", "s2"))


def line(document: object) -> bytes:
    """As the relay's agent writes it: canonical JSON (keys sorted), NaN and Infinity as
    Python's json writes them when a foreign agent lets it."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def good_result(size: int = SIZE, offset: int = 0) -> dict:
    return {"status": "ok", "path": "/p", "size": size, "offset": offset, "received": size - offset,
            "seconds": 0.01, "sha256": SHA, "reused": False, "identity": [1, 2, size, 4, 5]}


def good_lines(planned: list) -> list[bytes]:
    """What a relay writes when every planned file arrives verified."""
    lines, results = [], []
    for index, item in enumerate(planned):
        lines.append(line({"file": index, "progress": item["size"] // 2}))
        result = good_result(item["size"])
        results.append(result)
        lines.append(line({"file": index, "result": result}))
    lines.append(line({"status": "done", "message": "", "offsets": [0] * len(planned), "sent": 0,
                       "seconds": 0.02, "results": results, "returncode": 0, "stderr": ""}))
    return lines


def done() -> bytes:
    return line({"status": "done", "message": "", "results": [], "stderr": ""})


class FakeStdin:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeRelay:
    """Popen-like: once the plan line is written, stdout gives what ``answer(receiver,
    planned)`` says."""

    def __init__(self, receiver: str, answer) -> None:
        self.receiver, self.answer = receiver, answer
        self.stdin = FakeStdin()
        self.stderr = io.BytesIO()
        self.lines: io.BytesIO | None = None

    @property
    def stdout(self):
        relay_process = self

        class Lines:  # read only once the controller wrote the plan
            def readline(self, limit: int = -1) -> bytes:
                if relay_process.lines is None:
                    planned = json.loads(relay_process.stdin.data)["files"]
                    relay_process.lines = io.BytesIO(b"".join(relay_process.answer(relay_process.receiver, planned)))
                return relay_process.lines.readline(limit)

        return Lines()

    def wait(self, timeout=None) -> int:
        return 0

    def kill(self) -> None:
        pass


class Run:
    """One ChainTransfer over ``three_ranks`` (s1 and s2 need every file) with fake relays:
    ``answers[receiver](planned) -> lines`` (default: all verified), ended within
    RUN_SECONDS; what its worker threads raised, how often each hop started, what progress
    said."""

    def __init__(self, monkeypatch, answers: dict, *, files: int = 1, progress: bool = False,
                 receivers: tuple[str, ...] = ("s1", "s2"), retry_seconds: float = 0.0) -> None:
        self.starts: dict[str, int] = {}
        self.thread_errors: list[BaseException] = []
        self.reports: list[tuple[int, int, str]] = []
        self.receivers = receivers
        lock = threading.Lock()

        def answer(receiver: str, planned: list) -> list[bytes]:
            with lock:
                self.starts[receiver] = self.starts.get(receiver, 0) + 1
                if self.starts[receiver] > STARTS_LIMIT:  # end what would loop: fail this hop
                    return [line({"status": "failed", "message": "test: restarted for ever"})]
            return answers.get(receiver, lambda planned: good_lines(planned))(planned)

        monkeypatch.setattr(chain, "start_relay", lambda site, hop: FakeRelay(hop.receiver.name, answer))
        monkeypatch.setattr(threading, "excepthook", lambda args: self.thread_errors.append(args.exc_value))
        site = three_ranks()
        transfers = [chain.Transfer(sha256=SHA, paths={name: f"/data/f{k}" for name in site.order}, size=SIZE)
                     for k in range(files)]
        self.transfer = chain.ChainTransfer(
            site, transfers, chain.SizeGate.opened(SIZE), needs={name: range(files) for name in receivers},
            retry_seconds=retry_seconds, progress=(lambda done, total, label: self.reports.append((done, total, label)))
            if progress else None)
        self.transfer.start()
        self.transfer._thread.join(timeout=RUN_SECONDS)
        assert not self.transfer._thread.is_alive(), "the chain did not end (a hop restarted for ever?)"
        self.outcomes = self.transfer.join()

    def assert_settled(self) -> None:
        """Every rank ended verified or failed with an error; no worker died; no hop looped."""
        assert self.thread_errors == []
        assert all(count <= STARTS_LIMIT for count in self.starts.values()), self.starts
        for name in self.receivers:  # s0 is the source: it sends, it has no outcome of its own
            outcome = self.outcomes[name]
            assert outcome.status in (chain.HAS, chain.FAILED), (name, outcome)
            if outcome.status == chain.FAILED:
                assert isinstance(outcome.error, str) and outcome.error.startswith(f"rank {name}: "), outcome
                assert "restarted for ever" not in outcome.error and "broke off" not in outcome.error, outcome.error
            assert 0 <= outcome.bytes_received <= SIZE * len(self.transfer.transfers) * (chain.MISMATCH_RETRIES + 2)
            assert all(0 < offset <= SIZE for offset in outcome.resumed_from)
            assert all(0 <= k < len(self.transfer.transfers) for k in outcome.files_received)


def only_s1(lines_of):
    return {"s1": lines_of}


def test_the_well_formed_relay_lines_verify_every_rank(monkeypatch):
    run = Run(monkeypatch, {}, files=2, progress=True)
    run.assert_settled()
    assert [run.outcomes[name].status for name in ("s1", "s2")] == [chain.HAS, chain.HAS]
    assert run.outcomes["s1"].bytes_received == 2 * SIZE and run.outcomes["s1"].files_received == [0, 1]
    assert run.starts == {"s1": 1, "s2": 1}


@pytest.mark.parametrize("file_line", [
    {"file": "x", "result": good_result()},
    {"file": None, "result": good_result()},
    {"file": True, "result": good_result()},
    {"file": 2 ** 70, "result": good_result()},
    {"file": 0, "result": [1, 2, 3]},
    {"file": 0, "result": {**good_result(), "status": None}},
    {"file": 0, "result": {key: value for key, value in good_result().items() if key != "status"}},
], ids=["file-text", "file-null", "file-true", "file-2**70", "result-array", "status-null", "status-missing"])
def test_a_relay_that_says_done_over_an_unusable_file_line_fails_the_rank_once(monkeypatch, file_line):
    # before: the file stayed pending, and the DONE branch (no deadline, no attempt cap)
    # restarted the hop for ever
    run = Run(monkeypatch, only_s1(lambda planned: [line(file_line), done()]))
    run.assert_settled()
    assert run.starts["s1"] == 1
    error = run.outcomes["s1"].error
    assert run.outcomes["s1"].status == chain.FAILED and "the relay on rank s0" in error


def test_a_relay_that_says_done_without_a_result_for_a_file_fails_the_rank_naming_it(monkeypatch):
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": 0, "result": good_result()}), done()]), files=2)
    run.assert_settled()
    assert run.starts["s1"] == 1
    assert run.outcomes["s1"].status == chain.FAILED
    assert run.outcomes["s1"].error == ("rank s1: the relay on rank s0 (root@192.0.2.10) said done without "
                                        "a result for /data/f1")
    assert run.transfer.state["s1"] == [chain.HAS, chain.FAILED]  # the file that did arrive counts


def test_a_file_line_holding_infinity_is_passed_over_not_a_thread_traceback(monkeypatch):
    # before: int(inf) raised OverflowError in the hop's worker thread; the rank stayed pending
    raw = b'{"file":Infinity,"result":' + line(good_result()).strip() + b"}\n"
    run = Run(monkeypatch, only_s1(lambda planned: [raw, done()]))
    run.assert_settled()
    assert run.outcomes["s1"].status == chain.FAILED and "said done without a result" in run.outcomes["s1"].error


@pytest.mark.parametrize("last", [
    {"status": "transport-error", "message": "", "stderr": ["ssh: broken pipe"]},
    {"status": "transport-error", "message": {"a": 1}, "stderr": ""},
    {"status": None, "message": "", "stderr": ""},
    {"status": 1, "message": "", "stderr": ""},
    {"status": [], "message": "", "stderr": ""},
], ids=["stderr-array", "message-object", "status-null", "status-1", "status-array"])
def test_a_last_line_of_another_shape_is_the_ranks_failure_not_a_thread_traceback(monkeypatch, last):
    # before: detail.strip() raised AttributeError in the worker once the deadline had passed:
    # the rank stayed pending with no error and on_verified never came
    run = Run(monkeypatch, only_s1(lambda planned: [line(last)]))
    run.assert_settled()
    error = run.outcomes["s1"].error
    assert run.outcomes["s1"].status == chain.FAILED
    assert error.startswith("rank s1: the relay on rank s0 (root@192.0.2.10), its last line: the agent's reply $.")


def test_a_last_line_with_a_resumable_status_names_its_stderr_once_the_retries_ran_out(monkeypatch):
    run = Run(monkeypatch, only_s1(lambda planned: [line({"status": "transport-error", "message": "",
                                                          "stderr": "ssh: broken pipe\n"})]))
    run.assert_settled()
    assert run.outcomes["s1"].error.endswith("failed after 1 attempts: ssh: broken pipe")


def incomplete(offset: int, received: int) -> dict:
    """A run that ended early, the receiver holding ``offset + received`` bytes of the file."""
    return {**good_result(), "status": receive.INCOMPLETE, "offset": offset, "received": received,
            "sha256": None, "identity": None}


def test_a_relay_that_claims_the_same_bytes_on_every_run_is_not_resumed_for_ever(monkeypatch):
    # before: any run that said it received bytes put the retry deadline back, so a damaged
    # relay (or receiver) saying the same 500 bytes crossed on every run was resumed without end
    same = incomplete(0, SIZE // 2)
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": 0, "result": same}),
                                                    line({"status": "incomplete", "message": "", "stderr": "cut"})]),
              retry_seconds=2.0)
    run.assert_settled()
    assert 2 <= run.starts["s1"] <= 5, run.starts  # the first run's 500 bytes were progress, then 2 s of retries
    assert run.outcomes["s1"].status == chain.FAILED and run.outcomes["s1"].error.endswith(": cut")


def test_a_copy_that_grows_on_every_run_is_resumed_until_it_verifies(monkeypatch):
    runs = iter(range(10))
    quarter = SIZE // 4

    def growing(planned):
        n = next(runs)
        if n == 3:
            return good_lines(planned)
        return [line({"file": 0, "result": incomplete(n * quarter, quarter)}),
                line({"status": "incomplete", "message": "", "stderr": "cut"})]

    run = Run(monkeypatch, only_s1(growing), retry_seconds=1.5)  # each retry waits 1 s: one run's progress
    run.assert_settled()
    assert run.starts["s1"] == 4 and run.outcomes["s1"].status == chain.HAS
    assert run.outcomes["s1"].resumed_from == [quarter, 2 * quarter]


def test_more_bytes_than_the_rest_of_the_file_after_its_offset_are_refused(monkeypatch):
    result = {**good_result(), "offset": SIZE // 2, "received": SIZE // 2 + 1}
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": 0, "result": result}), done()]))
    run.assert_settled()
    assert run.outcomes["s1"].bytes_received == 0
    assert f"$.result.received: expected a whole number from 0 to {SIZE // 2} (bytes of the planned file), got integer {SIZE // 2 + 1}" \
        in run.outcomes["s1"].error


def test_a_line_longer_than_the_protocol_allows_is_read_cut_and_passed_over(monkeypatch):
    monkeypatch.setattr(chain, "LINE_LIMIT", 64)
    long_result = line({"file": 0, "result": {**good_result(), "message": "m" * 200}})
    run = Run(monkeypatch, only_s1(lambda planned: [long_result, done()]))
    run.assert_settled()
    assert run.outcomes["s1"].status == chain.FAILED and "said done without a result for /data/f0" in run.outcomes["s1"].error


@pytest.mark.parametrize(("key", "value"), [
    ("received", "x"), ("received", 1.5), ("received", [1, 2, 3]), ("received", -1), ("received", 2 ** 70),
    ("received", SIZE + 1), ("received", True),
    ("offset", "x"), ("offset", 1.5), ("offset", [1]), ("offset", -1), ("offset", 2 ** 70), ("offset", SIZE + 1),
    ("reused", "false"), ("identity", ["x"]), ("moved_aside_final", 1),
])
def test_a_count_that_is_no_byte_count_of_the_file_is_refused_not_summed(monkeypatch, key, value):
    # before: "x", 1.5 and [..] raised in the worker thread (the rank left pending, its
    # bytes short); -1 and 2**70 were summed into bytes_received
    result = {**good_result(), key: value}
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": 0, "result": result}), done()]))
    run.assert_settled()
    outcome = run.outcomes["s1"]
    assert outcome.status == chain.FAILED and outcome.bytes_received == 0 and outcome.files_received == []
    assert f"the agent's reply $.result.{key}: expected" in outcome.error
    assert outcome.error.startswith("rank s1: the relay on rank s0 (root@192.0.2.10), line 1: ")


def test_a_negative_file_index_is_refused_not_credited_to_the_last_file(monkeypatch):
    # before: pending[-1]: a result for "file -1" verified the last file of the plan
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": 0, "result": good_result()}),
                                                    line({"file": -1, "result": good_result()}), done()]), files=2)
    run.assert_settled()
    assert run.transfer.state["s1"] == [chain.HAS, chain.FAILED]
    assert run.outcomes["s1"].bytes_received == SIZE
    assert "$.file: expected a whole number" in run.outcomes["s1"].error


def test_an_index_past_the_plan_is_refused(monkeypatch):
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": len(planned), "result": good_result()}),
                                                    done()]), files=2)
    run.assert_settled()
    assert "$.file: expected a file of the plan (0 to 1), got integer 2" in run.outcomes["s1"].error


def test_progress_lines_report_bytes_between_file_completions(monkeypatch):
    # canonical JSON sorts keys, so {"file": 0, "progress": 500} starts like a file's result;
    # before, the result handler took it and dropped it: no progress until a file completed
    def answer(planned):
        return [line({"file": 0, "progress": 400}), line({"file": 0, "progress": 700}),
                *good_lines(planned)[1:]]

    run = Run(monkeypatch, only_s1(answer), progress=True, receivers=("s1",))
    run.assert_settled()
    assert run.reports == [(400, SIZE, "-> s1"), (700, SIZE, "-> s1"), (SIZE, SIZE, "s1 verified")]


@pytest.mark.parametrize("progress_line", [
    {"file": 0, "progress": "x"}, {"file": 0, "progress": -1}, {"file": 0, "progress": SIZE + 1},
    {"file": 5, "progress": 10}, {"file": "x", "progress": 10},
])
def test_a_progress_line_of_another_shape_is_the_hops_failure(monkeypatch, progress_line):
    run = Run(monkeypatch, only_s1(lambda planned: [line(progress_line), *good_lines(planned)]), progress=True)
    run.assert_settled()
    assert run.outcomes["s1"].status == chain.FAILED and "line 1: the agent's reply $." in run.outcomes["s1"].error
    assert all(done <= total for done, total, _ in run.reports)


def test_a_mismatch_the_relay_reports_as_done_is_fetched_again_then_failed(monkeypatch):
    # the one file a relay may leave pending when it says done: bounded by MISMATCH_RETRIES
    wrong = {**good_result(), "status": receive.MISMATCH, "message": "sha256 differs"}
    run = Run(monkeypatch, only_s1(lambda planned: [line({"file": 0, "result": wrong}), done()]))
    run.assert_settled()
    assert run.starts["s1"] == chain.MISMATCH_RETRIES + 1
    assert run.outcomes["s1"].error == f"rank s1: received copy does not match sha256 {SHA} (sha256 differs)"


# ---- any line, any shape ------------------------------------------------------------------
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2, max_value=SIZE + 2) | st.sampled_from([2 ** 70, -2 ** 70])
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=4)
           | st.sampled_from(["ok", "sha256-mismatch", "done", "failed", "transport-error", "incomplete"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
RESULT_KEYS = st.sampled_from(["status", "received", "offset", "reused", "identity", "moved_aside_final", "message"])
RESULTS = st.dictionaries(RESULT_KEYS, JSON, max_size=7) | JSON
LINE_KEYS = st.sampled_from(["file", "result", "progress", "status", "message", "stderr", "results"])
LINES = st.dictionaries(LINE_KEYS, JSON | RESULTS, max_size=4) | JSON


@settings(max_examples=60, deadline=None)
@given(st.lists(LINES, max_size=4), st.lists(LINES, max_size=2), st.integers(min_value=1, max_value=2))
def test_any_line_of_any_shape_never_raises_and_never_hangs(monkeypatch, s1_lines, s2_lines, files):
    def lines(documents):
        def answer(planned):
            return [json.dumps(document).encode() + b"\n" for document in documents]
        return answer

    run = Run(monkeypatch, {"s1": lines(s1_lines), "s2": lines(s2_lines)}, files=files, progress=True)
    run.assert_settled()
    assert all(done <= total for done, total, _ in run.reports)


# ---- the relay, on the sending rank: the receiver's handshake and result ---------------------
RECEIVER = r'''import json, os, sys
handshake, result = sys.argv[1].encode(), sys.argv[2].encode()
sys.stdin.buffer.readline()  # the plan line
os.write(1, handshake + b"\n")
document = json.loads(handshake)
offset = document.get("offset") if isinstance(document, dict) else None
want = {size} - offset if isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset <= {size} else 0
got = 0
while got < want:
    chunk = os.read(0, want - got)
    if not chunk:
        break
    got += len(chunk)
os.write(1, result + b"\n")
'''


def relay_against(tmp_path: Path, handshake: bytes, result: bytes) -> dict:
    source = tmp_path / "source.bin"
    source.write_bytes(b"a" * SIZE)
    planned = [relay.PlannedFile(path="/dst/f", sha256=SHA, size=SIZE, source=str(source))]
    receiver = [sys.executable, "-c", RECEIVER.replace("{size}", str(SIZE)), handshake.decode(), result.decode()]
    outcome = relay.relay(planned, receiver, stall_seconds=5.0)
    canonical_json_bytes(outcome).decode("utf-8")  # what the relay agent's emit then writes
    return outcome


@pytest.mark.parametrize("offset", [b'"x"', b"null", b"[]", b"{}", b"Infinity", b"NaN", b"1.5", b"true", b"-1",
                                    str(SIZE + 1).encode(), str(2 ** 70).encode()])
def test_a_handshake_offset_that_is_no_byte_count_fails_the_hop_with_a_reason(tmp_path, offset):
    # before: int(offset) raised ValueError/TypeError/OverflowError (a traceback of the relay
    # agent on the rank, no last line: the controller retried it as a transport error);
    # -1 raised EINVAL from sendfile
    outcome = relay_against(tmp_path, b'{"offset": ' + offset + b"}", line(good_result()).strip())
    assert outcome["status"] == receive.FAILED and outcome["results"] == [] and outcome["sent"] == 0
    assert outcome["message"].startswith("/dst/f: the receiver's handshake gave offset ")
    assert f"expected a whole number from 0 to {SIZE}" in outcome["message"]


@pytest.mark.parametrize("result", [b'{"status": "ok", "received": NaN}', b'{"status": "ok", "seconds": Infinity}',
                                    b'{"status": "ok", "path": "\\ud800"}'])
def test_a_receiver_result_no_json_line_can_carry_fails_the_hop_instead_of_the_relays_own_line(tmp_path, result):
    # before: the result was passed on as read, and the agent's emit (canonical JSON)
    # raised on it: a traceback on the rank instead of the relay's last line
    outcome = relay_against(tmp_path, b'{"offset": 0}', result)
    assert outcome["status"] == receive.FAILED and outcome["results"] == []
    assert "NaN, Infinity or text that is not Unicode" in outcome["message"]


def test_a_well_formed_handshake_and_result_are_passed_on(tmp_path):
    outcome = relay_against(tmp_path, b'{"offset": 0}', line(good_result()).strip())
    assert outcome["status"] == relay.DONE and outcome["sent"] == SIZE and outcome["offsets"] == [0]
    assert outcome["results"] == [good_result()]
    assert not math.isnan(outcome["seconds"])


def test_a_receiver_line_without_end_is_read_past_within_the_line_limit(tmp_path, monkeypatch):
    # before: readline() held the whole line (8 MiB here; without end, the relay's memory)
    monkeypatch.setattr(relay, "LINE_LIMIT", 4096)
    source = tmp_path / "source.bin"
    source.write_bytes(b"a" * SIZE)
    planned = [relay.PlannedFile(path="/dst/f", sha256=SHA, size=SIZE, source=str(source))]
    receiver = [sys.executable, "-c", "import os, sys\nsys.stdin.buffer.readline()\n"
                                      "for _ in range(128): os.write(1, b'{' * 65536)\nos.write(1, b'\\n')"]
    outcome = relay.relay(planned, receiver, stall_seconds=5.0)
    assert outcome["status"] == relay.CONNECT_FAILED and outcome["sent"] == 0 and outcome["results"] == []


# ---- a peer that goes silent without closing its end ------------------------------------------
SILENT_RECEIVERS = {
    # hung before its handshake: the relay's read of it blocked for ever
    "before-handshake": ("import sys, time\nsys.stdin.buffer.readline()\ntime.sleep(600)", relay.CONNECT_FAILED),
    # reads nothing after its handshake: sendfile into the full pipe blocked for ever
    "not-reading": ("import os, sys, time\nsys.stdin.buffer.readline()\nos.write(1, b'{\"offset\": 0}\\n')\n"
                    "time.sleep(600)", relay.TRANSPORT_ERROR),
    # takes every byte, then never writes its result: the relay's read of it blocked for ever
    "no-result": ("import os, sys, time\nsys.stdin.buffer.readline()\nos.write(1, b'{\"offset\": 0}\\n')\n"
                  "want = {size}\nwhile want > 0: want -= len(os.read(0, min(want, 1 << 20)))\ntime.sleep(600)",
                  relay.TRANSPORT_ERROR),
}


@pytest.mark.parametrize("case", sorted(SILENT_RECEIVERS))
def test_a_receiver_silent_past_the_stall_time_is_ended_and_the_hop_resumable(tmp_path, case):
    # before: each blocked the relay (and so the hop, and the whole fan-out) for ever
    script, status = SILENT_RECEIVERS[case]
    size = 32 << 20  # more than the pipe to the receiver holds (SEND_CHUNK)
    source = tmp_path / "source.bin"
    source.write_bytes(b"a" * size)
    planned = [relay.PlannedFile(path="/dst/f", sha256=SHA, size=size, source=str(source))]
    began = time.monotonic()
    outcome = relay.relay(planned, [sys.executable, "-c", script.replace("{size}", str(size))], stall_seconds=1.0)
    assert time.monotonic() - began < 30
    assert outcome["status"] == status and outcome["results"] == []
    assert outcome["message"] == "the receiver said nothing for 1s: its connection was ended"


class SilentRelay(FakeRelay):
    """A relay that says nothing, its session open, until it is killed."""

    def __init__(self, receiver: str, answer) -> None:
        super().__init__(receiver, answer)
        self.killed = threading.Event()

    @property
    def stdout(self):
        killed = self.killed

        class Silent:
            def readline(self, limit: int = -1) -> bytes:
                killed.wait(60)
                return b""

        return Silent()

    def kill(self) -> None:
        self.killed.set()

    def wait(self, timeout=None) -> int:
        return -9 if self.killed.is_set() else 0


def test_a_hung_relay_is_ended_after_the_silence_and_the_rank_fails_naming_it(monkeypatch):
    monkeypatch.setattr(chain, "RELAY_SILENCE_SECONDS", 0.5)
    monkeypatch.setattr(chain, "start_relay", lambda site, hop: SilentRelay(hop.receiver.name, None))
    site = three_ranks()
    transfer = chain.ChainTransfer(site, [chain.Transfer(sha256=SHA, paths={n: "/data/f0" for n in site.order}, size=SIZE)],
                                   chain.SizeGate.opened(SIZE), needs={"s1": [0], "s2": [0]}, retry_seconds=0.0)
    began = time.monotonic()
    transfer.start()
    outcomes = transfer.join()
    assert time.monotonic() - began < 30
    assert outcomes["s1"].status == chain.FAILED
    assert outcomes["s1"].error.endswith("failed after 1 attempts: rank s1: the relay on rank s0 (root@192.0.2.10) "
                                         "said nothing for 0.5s: its session was ended")


def test_a_receiver_that_hangs_only_after_its_last_result_leaves_the_hop_done(tmp_path):
    script = ("import os, sys, time\nsys.stdin.buffer.readline()\nos.write(1, b'{\"offset\": 0}\\n')\n"
              "want = {size}\nwhile want > 0: want -= len(os.read(0, min(want, 1 << 20)))\n"
              "os.write(1, sys.argv[1].encode() + b'\\n')\ntime.sleep(600)")
    source = tmp_path / "source.bin"
    source.write_bytes(b"a" * SIZE)
    planned = [relay.PlannedFile(path="/dst/f", sha256=SHA, size=SIZE, source=str(source))]
    outcome = relay.relay(planned, [sys.executable, "-c", script.replace("{size}", str(SIZE)),
                                    line(good_result()).strip().decode()], stall_seconds=1.0)
    assert outcome["status"] == relay.DONE and outcome["message"] == "" and outcome["results"] == [good_result()]
