"""Hypothesis profiles. The README's test command (``./bin/test``, plain pytest) runs the
``ci`` profile: derandomized (the examples are a function of the test alone) and without
an example database, so every run on every machine gives the same verdict. ``./bin/fuzz``
selects ``fuzz`` (``SPARKFLAKE_HYPOTHESIS_PROFILE=fuzz``): many more examples and a fresh
seed per run, for hunting; a finding is printed with its reproduction blob.

Under ``fuzz`` every property gets examples by time, so that one 10-minute hunt reaches
every property (with 300 examples each, one reached 81 of 110: a few slow ones took the
rest). ``bin/fuzz`` gives each run the seconds left (``SPARKFLAKE_FUZZ_SECONDS``) and a file
of seconds per example measured by the runs before (``SPARKFLAKE_FUZZ_TIMES``). A property
not measured yet runs ``FIRST_EXAMPLES`` examples; a measured one as many as half the
seconds left, shared out over the properties, allow (at least ``FIRST_EXAMPLES``, at most
the profile's ``max_examples``). The count is set per test before it runs, on the
settings Hypothesis reads when the test is called (the test's own settings are the
parent, so its other settings stay). The summary line says how many were reached.

Tests live in one folder per stage (``tests/<stage>/``, the packages of ``src/sparkflake``
plus ``nix`` and ``repo``); each test is marked with its folder's name, so ``-m oci`` runs
the oci stage's tests wherever a file is renamed. Helpers shared across stages are the
``fixtures`` package."""

import json
import os
import time
from pathlib import Path

import pytest
from fixtures.netns_ranks import netns_ranks  # noqa: F401 - session fixture: four ranks in network namespaces
from hypothesis import HealthCheck, is_hypothesis_test, settings

TESTS = Path(__file__).resolve().parent
STAGES = ("core", "profile", "lock", "fetch", "compose", "oci", "signing", "audit", "runtime",
          "distribute", "launch", "service", "housekeeping", "workflows", "cli", "nix", "repo")
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


# A path tests name as absent ("/nonexistent/…": also user nobody's HOME, which a program run
# with that HOME may create, as fish did): a run that makes it breaks every later run's
# refusals of it, so the run that made it fails.
ABSENT = Path("/nonexistent")


@pytest.fixture(scope="session", autouse=True)
def absent_path_stays_absent():
    existed = ABSENT.exists()
    yield
    assert existed or not ABSENT.exists(), f"a test created {ABSENT}: give the program a HOME of the test's own"


def pytest_report_header() -> str:
    return f"hypothesis profile: {PROFILE} ({PROFILE_ENV})"


def stage_of(path: Path) -> str:
    """The stage folder a test file lives in; a test outside one is a layout error."""
    relative = path.resolve().relative_to(TESTS)
    if len(relative.parts) != 2 or relative.parts[0] not in STAGES:
        raise pytest.UsageError(f"{path}: a test belongs in tests/<stage>/ (stages: {', '.join(STAGES)})")
    return relative.parts[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets its stage's marker. Under the fuzz profile only the property tests
    run (the others learn nothing from a fresh seed)."""
    for item in items:
        item.add_marker(getattr(pytest.mark, stage_of(item.path)))
    if PROFILE != "fuzz":
        return
    kept = [item for item in items if is_hypothesis_test(getattr(item, "obj", None))]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
    _FUZZ.collected = len(kept)
    _FUZZ.seconds = float(os.environ.get(FUZZ_SECONDS_ENV) or 0)
    times_file = os.environ.get(FUZZ_TIMES_ENV)
    if times_file and os.path.exists(times_file):
        with open(times_file, encoding="utf-8") as recorded:
            _FUZZ.times = json.load(recorded)
    for handle in {id(item.obj.hypothesis): item.obj.hypothesis for item in kept}.values():
        handle.inner_test = _counted(handle.inner_test)


FUZZ_SECONDS_ENV = "SPARKFLAKE_FUZZ_SECONDS"
FUZZ_TIMES_ENV = "SPARKFLAKE_FUZZ_TIMES"  # JSON: node id -> seconds per example, kept across runs
FUZZ_REACHED_ENV = "SPARKFLAKE_FUZZ_REACHED"  # a file the reached property tests are appended to
FIRST_EXAMPLES = 30


class _FuzzRun:
    collected = 0
    seconds = 0.0  # what bin/fuzz has left for this run (0: no budget)
    times: dict[str, float] = {}
    examples = 0  # examples of the property under way
    reached: set[str] = set()


_FUZZ = _FuzzRun()


def _counted(inner_test):
    def run_example(*args, **kwargs):
        _FUZZ.examples += 1
        return inner_test(*args, **kwargs)

    return run_example


def _fuzz_examples(nodeid: str, ceiling: int) -> int:
    per_example = _FUZZ.times.get(nodeid)
    if per_example is None or not _FUZZ.seconds:
        return min(FIRST_EXAMPLES, ceiling)
    budget = _FUZZ.seconds / 2 / max(_FUZZ.collected, 1)
    return max(min(FIRST_EXAMPLES, ceiling), min(ceiling, int(budget / max(per_example, 1e-6))))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if PROFILE != "fuzz" or not is_hypothesis_test(getattr(item, "obj", None)):
        yield
        return
    function = item.function
    own = function._hypothesis_internal_use_settings  # what @given(/@settings) recorded
    function._hypothesis_internal_use_settings = settings(
        own, max_examples=_fuzz_examples(item.nodeid, settings.default.max_examples)
    )
    _FUZZ.examples = 0
    started = time.monotonic()
    try:
        yield
    finally:
        function._hypothesis_internal_use_settings = own
        if _FUZZ.examples:
            _FUZZ.times[item.nodeid] = (time.monotonic() - started) / _FUZZ.examples


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if PROFILE == "fuzz" and report.when == "call":
        _FUZZ.reached.add(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's TerminalReporter
    if PROFILE == "fuzz":
        terminalreporter.write_line(f"fuzz: reached {len(_FUZZ.reached)} of {_FUZZ.collected} property tests")
        if os.environ.get(FUZZ_TIMES_ENV):
            with open(os.environ[FUZZ_TIMES_ENV], "w", encoding="utf-8") as recorded:
                json.dump(_FUZZ.times, recorded)
        if os.environ.get(FUZZ_REACHED_ENV):  # bin/fuzz: the union over its runs
            with open(os.environ[FUZZ_REACHED_ENV], "a", encoding="utf-8") as reached:
                reached.writelines(f"{nodeid}\n" for nodeid in sorted(_FUZZ.reached))
