"""Networked (PyPI, Debian): lock, fetch and assemble a real subset twice; same NAR hash.

The subset: sparkcache, b12x and fastsafetensors with their closure minus torch and the
CUDA libraries it pulls (tens of MB instead of GB), and python3-minimal's Debian closure.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkflake.compose.debian_base import DebInput, assemble_base
from sparkflake.compose.python_env import WheelInput, assemble_python_env
from sparkflake.core.blob_cache import Artifact, BlobCache
from sparkflake.core.tree_digest import nar_hash
from sparkflake.fetch import fetch_all
from sparkflake.lock.pylock import resolved_pins
from sparkflake.lock.resolve_debian import resolve_debian
from sparkflake.lock.resolve_python import compile_pylock, resolution_cutoff
from sparkflake.lock.target import DEBIAN_BOOKWORM_ARM64


def _heavy(name: str) -> bool:
    return name == "torch" or name.startswith(("nvidia-", "triton", "cuda-"))


# The index as it stood then: two resolutions against today's index differ when a release
# lands between them (huggingface-hub 2.5.0 did, on 2026-12-07, during this test).
CUTOFF = resolution_cutoff("2026-12-01")


def _wheels(pylock: dict) -> list:
    return resolved_pins(pylock, "pylock.toml", target=DEBIAN_BOOKWORM_ARM64, sdist_names=())


def _lock_subset(cache: BlobCache) -> tuple[list, list]:
    text = compile_pylock(["sparkcache", "b12x", "fastsafetensors"], exclude_newer=CUTOFF)
    wheels = [w for w in _wheels(tomllib.loads(text)) if not _heavy(w.name)]
    debs = resolve_debian(["python3-minimal"], cache=cache).pins
    return wheels, debs


@pytest.mark.network
@pytest.mark.slow
def test_real_subset_locks_fetches_and_assembles_identically(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    wheels, debs = _lock_subset(cache)
    wheels_again, debs_again = _lock_subset(cache)
    assert wheels == wheels_again and debs == debs_again  # resolution is stable
    names = {w.name for w in wheels}
    assert {"sparkcache", "b12x", "fastsafetensors"} <= names and "torch" not in names
    assert {"python3-minimal", "python3.11-minimal", "libc6"} <= {d["package"] for d in debs}
    wheel_artifacts = [Artifact(w.name, w.filename, w.sha256, w.size, w.urls) for w in wheels]
    deb_artifacts = [Artifact(f"{d['package']}:{d['architecture']}", str(d["filename"]), str(d["sha256"]), int(d["size"]), tuple(d["urls"])) for d in debs]
    report = fetch_all(wheel_artifacts + deb_artifacts, cache)
    assert report.total_bytes == sum(a.size or 0 for a in wheel_artifacts + deb_artifacts)
    wheel_inputs = [WheelInput(w.name, w.version, w.filename, cache.verified_path(a)) for w, a in zip(wheels, wheel_artifacts, strict=True)]
    deb_inputs = [DebInput(str(d["package"]), str(d["version"]), str(d["architecture"]), cache.verified_path(a)) for d, a in zip(debs, deb_artifacts, strict=True)]
    hashes = []
    for run in ("first", "second"):
        assemble_base(deb_inputs, tmp_path / run / "base")
        assemble_python_env(wheel_inputs, tmp_path / run / "python")
        hashes.append((nar_hash(tmp_path / run / "base"), nar_hash(tmp_path / run / "python")))
    assert hashes[0] == hashes[1]
    assert (tmp_path / "first/base/usr/bin/python3.11").is_file()
    assert (tmp_path / "first/python/opt/venv/lib/python3.11/site-packages/sparkcache").is_dir()


@pytest.mark.network
def test_a_cutoff_resolves_from_the_index_as_it_stood_then() -> None:
    # packaging 23.2 was uploaded on 2023-10-01, 24.0 on 2024-03-10 (PyPI's upload-time)
    text = compile_pylock(["packaging"], exclude_newer=resolution_cutoff("2024-01-01"))
    assert [(w.name, w.version) for w in _wheels(tomllib.loads(text))] == [("packaging", "23.2")]
    newer = compile_pylock(["packaging"], exclude_newer=resolution_cutoff("2024-03-11"))
    assert [w.version for w in _wheels(tomllib.loads(newer))] == ["24.0"]


REPO_PROFILES = Path(__file__).resolve().parents[3] / "profiles"


def _glm53_profiles(tmp_path: Path, edit: Callable[[str], str] = lambda text: text) -> Path:
    """Copies of the two glm53 profiles beside no lock (``edit`` applied to each text)."""
    profiles = tmp_path / "profiles"
    for name in ("glm53-dflash7", "glm53-mtp5"):
        (profiles / name).mkdir(parents=True)
        text = (REPO_PROFILES / name / "profile.toml").read_text(encoding="utf-8")
        (profiles / name / "profile.toml").write_text(edit(text), encoding="utf-8")
    return profiles


@pytest.mark.network
@pytest.mark.slow
def test_update_refreshes_one_input_and_keeps_the_rest(tmp_path: Path) -> None:
    from sparkflake.lock.lock_file import load_lock
    from sparkflake.lock.pins import Lock
    from sparkflake.lock.profile_locks import load_profile
    from sparkflake.lock.resolve import update_input

    profiles = _glm53_profiles(tmp_path)
    lock = load_lock(REPO_PROFILES / "glm53.lock")
    # pretend sparkcache and tzdata were locked long ago: drop them, then update each
    aged = Lock(target=lock.target, inputs=tuple(p for p in lock.inputs if p.name not in ("idna",)))
    aged = aged.replace_input(lock.by_name("sparkcache"))
    profile = load_profile(profiles / "glm53-dflash7" / "profile.toml", check_locks=False)
    updated = update_input(profile, aged, ["sparkcache"], cache=BlobCache(tmp_path / "cache"))
    kept = {p.name for p in aged.inputs} - {"sparkcache"}
    assert all(updated.get(name) == aged.get(name) for name in kept)
    assert updated.get("idna") is not None  # a missing dependency comes back
    updated_deb = update_input(profile, aged, ["tzdata:all"], cache=BlobCache(tmp_path / "cache"))
    assert all(updated_deb.get(p.name) == p for p in aged.inputs if p.name != "tzdata:all")


@pytest.mark.network
@pytest.mark.slow
def test_inputs_that_must_move_together_are_updated_in_one_resolution(tmp_path: Path) -> None:
    # nvcc and its crt headers are coupled (the profiles hold both at the CUDA runtime's 13.0):
    # a profile that asks for both at 13.5 cannot move either alone against the other's pin,
    # and moves both with `--update nvidia-cuda-nvcc --update nvidia-cuda-crt`.

    from sparkflake.core.errors import InputError
    from sparkflake.lock.lock_file import load_lock
    from sparkflake.lock.profile_locks import load_profile
    from sparkflake.lock.resolve import update_input

    def to_13_5(text: str) -> str:
        assert '"nvidia-cuda-nvcc==13.0.*"' in text and '"nvidia-cuda-crt==13.0.*"' in text
        text = text.replace('"nvidia-cuda-nvcc==13.0.*"', '"nvidia-cuda-nvcc==13.5.*"')
        return text.replace('"nvidia-cuda-crt==13.0.*"', '"nvidia-cuda-crt==13.5.*"')

    profiles = _glm53_profiles(tmp_path, to_13_5)
    lock = load_lock(REPO_PROFILES / "glm53.lock")
    assert lock.by_name("nvidia-cuda-nvcc").version.startswith("13.0.")
    profile = load_profile(profiles / "glm53-dflash7" / "profile.toml", check_locks=False)
    with pytest.raises(InputError, match="nvidia-cuda-crt"):
        update_input(profile, lock, ["nvidia-cuda-nvcc"], cache=BlobCache(tmp_path / "cache"))
    updated = update_input(profile, lock, ["nvidia-cuda-nvcc", "nvidia-cuda-crt"], cache=BlobCache(tmp_path / "cache"))
    assert updated.by_name("nvidia-cuda-nvcc").version.startswith("13.5.")
    assert updated.by_name("nvidia-cuda-crt").version.startswith("13.5.")
    moved = {"nvidia-cuda-nvcc", "nvidia-cuda-crt"}
    assert all(updated.get(pin.name) == pin for pin in lock.inputs if pin.name not in moved)
