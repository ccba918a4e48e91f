"""Hypothesis profiles. The README's test command (``./bin/test``, plain pytest) runs the
``ci`` profile: derandomized (the examples are a function of the test alone) and without
an example database, so every run on every machine gives the same verdict. ``./bin/fuzz``
selects ``fuzz`` (``SPARKFLAKE_HYPOTHESIS_PROFILE=fuzz``): many more examples and a fresh
seed per run, for hunting; a finding is printed with its reproduction blob.

Tests live in one folder per stage (``tests/<stage>/``, the packages of ``src/sparkflake``
plus ``nix`` and ``repo``); each test is marked with its folder's name, so ``-m oci`` runs
the oci stage's tests wherever a file is renamed. Helpers shared across stages are the
``fixtures`` package."""

import os
from pathlib import Path

import pytest
from fixtures.netns_ranks import netns_ranks  # noqa: F401 - session fixture: four ranks in network namespaces
from hypothesis import HealthCheck, is_hypothesis_test, settings

TESTS = Path(__file__).resolve().parent
STAGES = ("core", "profile", "lock", "fetch", "compose", "oci", "signing", "audit", "runtime",
          "distribute", "launch", "pipeline", "cli", "nix", "repo")
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
