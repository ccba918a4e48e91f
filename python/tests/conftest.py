"""Hypothesis profiles. The README's test command (``./bin/test``, plain pytest) runs the
``ci`` profile: derandomized (the examples are a function of the test alone) and without
an example database, so every run on every machine gives the same verdict. ``./bin/fuzz``
selects ``fuzz`` (``SPARKFLAKE_HYPOTHESIS_PROFILE=fuzz``): many more examples and a fresh
seed per run, for hunting; a finding is printed with its reproduction blob.

Under ``fuzz`` each property gets a time budget, so that one run reaches every property
(with 300 examples each a 10-minute run reached 81 of 110: a few slow properties took the
rest): ``bin/fuzz`` says how long the run may take (``SPARKFLAKE_FUZZ_SECONDS``) and half
of that, shared out over the properties collected, is each one's budget. Past its budget a
property's further examples are rejected (``hypothesis.reject``, so Hypothesis ends the
test as it would after too many filtered examples), but never before one example ran and
never once an example failed (shrinking and the replay of the failure run in full). The
summary line says how many properties were reached."""

import os
import time

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, reject, settings
from netns_ranks import netns_ranks  # noqa: F401 - session fixture: four ranks in network namespaces

PROFILE_ENV = "SPARKFLAKE_HYPOTHESIS_PROFILE"
_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    "print_blob": True,
}
settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "60")),
    derandomize=True,
    database=None,
    **_COMMON,
)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "300")),
    derandomize=False,
    database=None,
    **_COMMON,
)
PROFILE = os.environ.get(PROFILE_ENV, "ci")
settings.load_profile(PROFILE)


def pytest_report_header() -> str:
    return f"hypothesis profile: {PROFILE} ({PROFILE_ENV})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under the fuzz profile only the property tests run (the others learn nothing from
    a fresh seed)."""
    if PROFILE != "fuzz":
        return
    kept = [item for item in items if is_hypothesis_test(getattr(item, "obj", None))]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
    _FUZZ.collected = len(kept)
    seconds = float(os.environ.get(FUZZ_SECONDS_ENV) or 0)
    if seconds > 0 and kept:
        _FUZZ.budget = seconds / 2 / len(kept)
        for handle in {id(item.obj.hypothesis): item.obj.hypothesis for item in kept}.values():
            handle.inner_test = _budgeted(handle.inner_test)


FUZZ_SECONDS_ENV = "SPARKFLAKE_FUZZ_SECONDS"
FUZZ_REACHED_ENV = "SPARKFLAKE_FUZZ_REACHED"  # a file the reached property tests are appended to


class _FuzzRun:
    collected = 0
    budget: float | None = None  # seconds per property
    started = 0.0  # when the property under way started
    examples = 0  # its examples that ran
    failed = False  # one of them failed: no more rejections
    reached: set[str] = set()


_FUZZ = _FuzzRun()


def _budgeted(inner_test):
    def run_example(*args, **kwargs):
        if (_FUZZ.budget is not None and _FUZZ.examples and not _FUZZ.failed
                and time.monotonic() - _FUZZ.started > _FUZZ.budget):
            reject()
        _FUZZ.examples += 1
        try:
            return inner_test(*args, **kwargs)
        except BaseException:
            _FUZZ.failed = True
            raise

    return run_example


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _FUZZ.started, _FUZZ.examples, _FUZZ.failed = time.monotonic(), 0, False
    yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if PROFILE == "fuzz" and report.when == "call":
        _FUZZ.reached.add(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's TerminalReporter
    if PROFILE == "fuzz":
        budget = f", {_FUZZ.budget:.1f} s each" if _FUZZ.budget is not None else ""
        terminalreporter.write_line(
            f"fuzz: reached {len(_FUZZ.reached)} of {_FUZZ.collected} property tests{budget}"
        )
        if os.environ.get(FUZZ_REACHED_ENV):  # bin/fuzz: the union over its runs
            with open(os.environ[FUZZ_REACHED_ENV], "a", encoding="utf-8") as reached:
                reached.writelines(f"{nodeid}\n" for nodeid in sorted(_FUZZ.reached))
