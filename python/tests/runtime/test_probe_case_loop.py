"""The probe's loop over launch cases (``in_image/probe.py`` ``_judge_cases``) where it runs
without the image's packages: the cases whose served models are constructed are judged in
the first pass (so that the construction's child starts early), each verdict lands at its
case's index, and every case's environment is put back afterwards, the probe's own values
included (the capabilities judged after a case read PATH and CUDA_HOME). The judging itself
is vLLM's and runs on the real image in test_runtime_real.py."""

from __future__ import annotations

import json
import os
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.runtime.probe_runner import PROBE_DIRECTORY

sys.path.insert(0, str(PROBE_DIRECTORY))
import probe  # noqa: E402  (the probe's modules import one another by file name)
import probe_support  # noqa: E402

NAMES = st.sampled_from(["SPARKFLAKE_T_A", "SPARKFLAKE_T_B", "SPARKFLAKE_T_C"])
CASES = st.lists(st.fixed_dictionaries({
    "construct_models": st.booleans(),
    "env": st.dictionaries(NAMES, st.text(st.characters(min_codepoint=48, max_codepoint=122), max_size=5)),
}), max_size=5)


def _judge_all(cases, scratch, seen_env):
    def judge_case(case):
        seen_env.append((case["name"], {name: os.environ.get(name) for name in ("SPARKFLAKE_T_A", "SPARKFLAKE_T_B",
                                                                                  "SPARKFLAKE_T_C")}))
        return {"name": case["name"]}

    verdicts = [None] * len(cases)
    saved = probe.judge_case
    probe.judge_case = judge_case
    try:
        probe._judge_cases(cases, verdicts, str(scratch), constructed=True)
        probe._judge_cases(cases, verdicts, str(scratch), constructed=False)
    finally:
        probe.judge_case = saved
    return verdicts


@settings(max_examples=60, deadline=None)
@given(CASES, st.dictionaries(NAMES, st.text(st.characters(min_codepoint=48, max_codepoint=122), max_size=5)))
def test_constructed_cases_first_each_in_its_place_environment_restored(tmp_path_factory, drawn, before):
    scratch = tmp_path_factory.mktemp("probe")
    cases = [{**case, "name": f"case-{index}", "serve_args": []} for index, case in enumerate(drawn)]
    names = ("SPARKFLAKE_T_A", "SPARKFLAKE_T_B", "SPARKFLAKE_T_C")
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(before)
    try:
        seen: list[tuple[str, dict[str, str | None]]] = []
        verdicts = _judge_all(cases, scratch, seen)
        after = {name: os.environ.get(name) for name in names}
    finally:
        for name in names:
            os.environ.pop(name, None)
    assert [verdict["name"] for verdict in verdicts] == [case["name"] for case in cases]
    constructed = [case["name"] for case in cases if case["construct_models"]]
    assert [name for name, _ in seen] == constructed + [case["name"] for case in cases
                                                        if not case["construct_models"]]
    by_name = {case["name"]: case for case in cases}
    for name, env in seen:  # each case sees the probe's environment with its own over it
        assert env == {key: by_name[name]["env"].get(key, before.get(key)) for key in names}
    assert after == {name: before.get(name) for name in names}
    progress = [json.loads(line) for line in (scratch / probe_support.PROGRESS_FILE).read_text().splitlines()] \
        if cases else []
    assert [line["index"] for line in progress] == list(range(1, len(cases) + 1))
    assert [line["case"] for line in progress] == [name for name, _ in seen]


def test_a_failing_case_is_a_verdict_and_its_environment_is_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/probe/bin")

    def judge_case(case):
        raise RuntimeError("vLLM refused")

    monkeypatch.setattr(probe, "judge_case", judge_case)
    verdicts: list[dict[str, object] | None] = [None]
    probe._judge_cases([{"name": "bad", "serve_args": [], "env": {"PATH": "/case/bin"}}], verdicts, str(tmp_path),
                       constructed=False)
    assert verdicts[0] is not None and verdicts[0]["error"] == "RuntimeError: vLLM refused"
    assert os.environ["PATH"] == "/probe/bin"
