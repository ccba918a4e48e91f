"""The seeds' exact compositions: glm53-dflash7-exact and glm53-mtp5-exact pin the seeds'
vLLM, B12X and SparkCache commits and trees in profiles/glm53-exact.lock. Offline, `lock
--check` passes; fetching or building them stops at fetch with one message naming each
git input and how to supply it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.compose.composition import load_composition
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.pins import GitPin
from sparkflake.lock.profile_locks import load_profile

REPO = Path(__file__).resolve().parents[3]
EXACT = ("glm53-dflash7-exact", "glm53-mtp5-exact")
# The seeds' pins (DESIGN.md "Seed pins"), written out here so the lock is checked against them
SEED_PINS = {
    "vllm-git": ("331573d20bd47e78327ed8d8b4d2e6d350bbb1ab", "927f52a0085bcecfd2ba679e5abebe1a62623daf", None),
    "b12x-git": ("6255090a03b12c3f7d552102a02fac0b542fb8c9", "0bb58d0dcc10e29e00ff9850c0d719fca1aba5ad", None),
    "sparkcache-git": ("5ec6a9953ad5d39120298bbfc26e95a6fa4b1dc3", "94c236b9dfbf5f70075eb47877fd9caaa5d8c249",
                       "bc238f96e550c7ec27d4081dd1f2e741d404aaf5c8572d89ccc5e76812be4d63"),
}


def test_the_exact_lock_pins_the_seeds_revisions_and_trees() -> None:
    lock = load_lock(REPO / "profiles" / "glm53-exact.lock")
    pins = {pin.name: pin for pin in lock.of_kind("git")}
    assert {name: (p.rev, p.tree, p.source_sha256) for name, p in pins.items()} == SEED_PINS  # type: ignore[union-attr]
    assert all(isinstance(p, GitPin) and p.nar_hash is None for p in pins.values())
    assert pins["vllm-git"].urls == ("https://github.com/FujitsuPolycom/vllm.git",)  # type: ignore[union-attr]


@pytest.mark.parametrize("name", EXACT)
def test_exact_profiles_compose_the_git_sources_over_the_shared_lock(name: str) -> None:
    composition = load_composition(name, REPO / "profiles")
    assert composition.source.name == "vllm-git"
    assert [(role.package, wheel.name, source.name) for role, wheel, source in composition.package_sources] == [
        ("b12x", "b12x", "b12x-git"), ("sparkcache", "sparkcache", "sparkcache-git")]
    assert composition.patch_set.patches == ()
    base = load_profile(name.removesuffix("-exact"), profiles_dir=REPO / "profiles")
    exact = composition.profile
    # The base profiles turn off what their stock image refuses (runtime-capabilities.json:
    # SparkCache 0.1.0a2 raises on GLM-5.3, vLLM 0.33.0 has no adaptive depth) and choose
    # what stock vLLM 0.33.0's engine start takes for GLM-5.3's sparse MLA on sm_121
    # (FLASHINFER_MLA_SPARSE_SM120 and the 2304-token block it settles); the exact sources
    # are the seeds' own, stated to provide SparkCache and adaptive depth, and their vLLM
    # fork serves with its B12X MLA path, so only those may differ.
    provided_by_the_seed_sources = {"SPARKCACHE_ENABLED", "SPECULATIVE_ADAPTIVE", "ATTENTION_BACKEND", "KV_BLOCK_SIZE"}
    assert {key: value for key, value in exact.runtime.items() if key not in provided_by_the_seed_sources} == {
        key: value for key, value in base.runtime.items() if key not in provided_by_the_seed_sources}
    assert exact.python == base.python and exact.status == base.status
    expected = tomllib.loads((REPO / "profiles" / name / "expected-capabilities.toml").read_text())
    assert {entry["provided_by"] for entry in expected["expected"]} <= set(SEED_PINS)
    assert all(entry["setting"] in exact.runtime or entry["setting"] == "SPARKCACHE_MODEL_PROFILE"
               for entry in expected["expected"])


@pytest.mark.parametrize("name", EXACT)
def test_lock_check_of_the_exact_profiles_passes_offline(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", name, "--check", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["git"] == ["b12x-git", "sparkcache-git", "vllm-git"]
    assert set(EXACT) <= set(summary["profiles"])


def test_fetching_the_exact_sources_offline_names_each_and_how_to_supply_it(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    assert main(["fetch", "glm53-dflash7-exact", "--kind", "git", "--offline", "--cache", str(cache)]) == 2
    message = capsys.readouterr().err
    assert "3 git input(s) missing:" in message
    for name, (rev, tree, _) in SEED_PINS.items():
        assert f"{name}: git commit {rev} (tree {tree}) could not be fetched" in message
        assert f"--git-mirror {name}=URL" in message
    assert "the lock's URLs: not tried (offline)" in message and "--from DIR" in message
    assert not (cache / "git").exists()


def test_building_an_exact_profile_stops_at_fetch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["build", "glm53-mtp5-exact", "--offline", "--cache", str(tmp_path / "cache"), "-o", str(out)])
    assert code == 2
    message = capsys.readouterr().err
    assert "3 git input(s) missing:" in message and "locked input(s) missing" in message
    for name in SEED_PINS:
        assert f"--git-mirror {name}=URL" in message
    assert not out.exists()
