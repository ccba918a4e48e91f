"""`sparkflake lock PROFILE --check` offline, on copies of the real glm53 profiles and lock."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.core.errors import CheckFailed
from sparkflake.lock.lock_file import dump_lock, load_lock, write_lock
from sparkflake.lock.profile_locks import load_profile
from sparkflake.lock.resolve import artifacts, check_lock, request_for, sharing_profiles

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

REPO_PROFILES = Path(__file__).resolve().parents[3] / "profiles"


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    target = tmp_path / "profiles"
    for name in ("glm53-dflash7", "glm53-mtp5"):
        (target / name).mkdir(parents=True)
        shutil.copy(REPO_PROFILES / name / "profile.toml", target / name / "profile.toml")
    shutil.copy(REPO_PROFILES / "glm53.lock", target / "glm53.lock")
    return target


def test_committed_lock_is_complete_for_both_profiles(profiles: Path) -> None:
    profile = load_profile(profiles / "glm53-dflash7" / "profile.toml")
    summary = check_lock(profile)
    assert summary["profiles"] == ["glm53-dflash7", "glm53-mtp5"]
    lock = load_lock(profiles / "glm53.lock")
    wheels = {pin.name: pin for pin in lock.of_kind("wheel")}
    assert wheels["vllm"].version == "0.33.0" and wheels["nvidia-nccl-cu13"].version == "2.30.7"
    assert {"torch", "b12x", "sparkcache", "fastsafetensors"} <= set(wheels)
    assert all(any(t.endswith(("aarch64", "-any")) for t in pin.tags) for pin in wheels.values())
    debs = {pin.package: pin for pin in lock.of_kind("deb")}
    assert {"python3.11", "libc6", "libstdc++6", "ca-certificates", "tzdata", "base-files"} <= set(debs)
    assert all(pin.urls[1].startswith("https://snapshot.debian.org/archive/") for pin in debs.values())
    assert len(artifacts(lock)) == len(lock.inputs)
    # the two profiles share every input: one request for both
    assert request_for(sharing_profiles(profile)) == request_for([profile])


def test_check_names_what_is_missing(profiles: Path) -> None:
    lock = load_lock(profiles / "glm53.lock")
    without = type(lock)(target=lock.target, inputs=tuple(p for p in lock.inputs if p.name not in ("sparkcache", "tzdata:all")))
    write_lock(profiles / "glm53.lock", without)
    with pytest.raises(CheckFailed, match=r"(?s)sparkcache.*tzdata"):
        check_lock(load_profile(profiles / "glm53-mtp5" / "profile.toml", check_locks=False))
    assert main(["lock", str(profiles / "glm53-mtp5"), "--check"]) == 1


def test_check_refuses_a_version_outside_the_requirement(profiles: Path) -> None:
    text = (profiles / "glm53.lock").read_text()
    (profiles / "glm53-dflash7" / "profile.toml").write_text(
        (profiles / "glm53-dflash7" / "profile.toml").read_text().replace('"vllm==0.33.0"', '"vllm==0.34.0"')
    )
    with pytest.raises(CheckFailed, match=r"requirement 'vllm==0.34.0': locked vllm 0.33.0 does not satisfy it"):
        check_lock(load_profile(profiles / "glm53-dflash7" / "profile.toml", check_locks=False))
    assert dump_lock(load_lock(profiles / "glm53.lock")) == text


def test_cli_check_ok(profiles: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", str(profiles / "glm53-dflash7"), "--check", "--json"]) == 0
    assert '"valid": true' in capsys.readouterr().out
