"""Per-case progress of the runtime check: the probe appends one line per judged case
(in_image/probe_support.py case_done) and the host follows the file while the probe runs
(probe_runner.CaseProgress through sandbox.run_sandboxed's poll), so that
``runtime check --progress`` prints each case as the probe finishes it. On the real image
test_runtime_real.py asserts one such line per launch case."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.runtime import sandbox
from sparkflake.runtime.probe_runner import PROBE_DIRECTORY, PROGRESS_FILE, CaseProgress

HOST_PYTHON = Path("/usr/bin/python3")


def _probe_support():
    spec = importlib.util.spec_from_file_location("shipped_probe_support_progress", PROBE_DIRECTORY / "probe_support.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """A progress callback that shows phases (as the CLI's Progress does), with the time
    each arrived."""

    def __init__(self) -> None:
        self.phases: list[tuple[float, str]] = []

    def __call__(self, done: int, total: int, what: str) -> None:
        raise AssertionError("the probe's progress is phases, not counts")

    def phase(self, name: str) -> None:
        self.phases.append((time.monotonic(), name))


def test_the_file_names_agree():
    assert _probe_support().PROGRESS_FILE == PROGRESS_FILE


def test_each_case_is_reported_while_the_probe_still_runs(tmp_path):
    """A real process writing the probe's lines 1.5 s apart, half a line first: each whole
    line is reported before the process ends, in order, and the half line only once whole."""
    assert HOST_PYTHON.is_file()
    path = tmp_path / PROGRESS_FILE
    verdicts = [{"name": "first", "seconds": 1.5, "parser": {"ok": True}},
                {"name": "second", "seconds": 2.0, "parser": {"ok": True}, "engine": {"memory": {"ok": False}}}]
    script = (
        "import json, sys, time\n"
        f"sys.path.insert(0, {str(PROBE_DIRECTORY)!r})\n"
        "import probe_support\n"
        f"verdicts = json.loads({json.dumps(json.dumps(verdicts))})\n"
        f"probe_support.case_done({str(path)!r}, 1, 2, verdicts[0])\n"
        "time.sleep(1.5)\n"
        f"open({str(path)!r}, 'a').write('{{\"case\": \"sec')\n"
        "time.sleep(1.5)\n"
        f"lines = open({str(path)!r}).read().splitlines()[:1]\n"
        f"open({str(path)!r}, 'w').write(''.join(line + chr(10) for line in lines))\n"
        f"probe_support.case_done({str(path)!r}, 2, 2, verdicts[1])\n"
        "time.sleep(1.5)\n"
    )
    recorder = Recorder()
    follower = CaseProgress(path, recorder)
    run = sandbox.run_sandboxed([str(HOST_PYTHON), "-c", script], timeout=60, stderr_path=tmp_path / "stderr",
                                poll=follower, poll_seconds=0.2)
    ended = time.monotonic()
    assert run.returncode == 0, run.stderr_tail
    assert [name for _, name in recorder.phases] == [
        "case 1/2 first: 1.5 s, every step passed",
        "case 2/2 second: 2.0 s, did not pass: engine.memory",
    ]
    # the first case was shown at least 3 s before the end, the second at least 1 s before
    assert ended - recorder.phases[0][0] > 3.0 and ended - recorder.phases[1][0] > 1.0


def test_the_poll_does_not_change_the_timeout(tmp_path):
    polls = []
    run = sandbox.run_sandboxed([str(HOST_PYTHON), "-c", "import time; time.sleep(30)"], timeout=1.0,
                                stderr_path=tmp_path / "stderr", poll=lambda: polls.append(1), poll_seconds=0.1)
    assert run.returncode is None and run.seconds < 10
    assert len(polls) >= 5


def test_a_case_the_probe_could_not_judge_is_reported_as_such(tmp_path):
    support = _probe_support()
    path = tmp_path / PROGRESS_FILE
    support.case_done(str(path), 3, 4, {"name": "broken", "error": "RuntimeError: boom"})
    recorder = Recorder()
    CaseProgress(path, recorder)()
    assert [name for _, name in recorder.phases] == ["case 3/4 broken: None s, did not pass: probe"]


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=30), st.floats(0, 1e5, allow_nan=False),
                          st.dictionaries(st.sampled_from(["parser", "engine_args", "model_config"]), st.booleans()),
                          st.dictionaries(st.sampled_from(["engine_config", "memory", "target.moe"]), st.booleans())),
                max_size=5))
def test_what_the_probe_writes_the_host_reads_back(cases):
    """case_done (the writer) and CaseProgress (the reader) round-trip every case's name, place
    and the steps that did not pass, whatever the names hold."""
    support = _probe_support()
    directory = Path(f"/tmp/sparkflake-h26c-progress-{id(cases)}")
    directory.mkdir(exist_ok=True)
    path = directory / PROGRESS_FILE
    path.unlink(missing_ok=True)
    try:
        for index, (name, seconds, steps, engine) in enumerate(cases, 1):
            verdict = {"name": name, "seconds": seconds, **{key: {"ok": ok} for key, ok in steps.items()},
                       "engine": {key: {"ok": ok} for key, ok in engine.items()}}
            support.case_done(str(path), index, len(cases), verdict)
        recorder = Recorder()
        CaseProgress(path, recorder)()
        assert len(recorder.phases) == len(cases)
        for (_, text), (index, (name, seconds, steps, engine)) in zip(recorder.phases, enumerate(cases, 1), strict=True):
            failed = sorted([key for key, ok in steps.items() if not ok] +
                            [f"engine.{key}" for key, ok in engine.items() if not ok])
            verdict = f"did not pass: {', '.join(failed)}" if failed else "every step passed"
            assert text == f"case {index}/{len(cases)} {name}: {seconds} s, {verdict}"
    finally:
        path.unlink(missing_ok=True)
        directory.rmdir()


@settings(max_examples=80, derandomize=True, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_in_the_progress_file_are_reported_not_raised(data):
    directory = Path(f"/tmp/sparkflake-h26c-garbage-{id(data)}")
    directory.mkdir(exist_ok=True)
    path = directory / PROGRESS_FILE
    try:
        path.write_bytes(data)
        recorder = Recorder()
        CaseProgress(path, recorder)()
        assert len(recorder.phases) == len(data[: data.rfind(b"\n") + 1].splitlines())
    finally:
        path.unlink(missing_ok=True)
        directory.rmdir()

