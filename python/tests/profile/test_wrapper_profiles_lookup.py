"""Profiles by name: --profiles-dir, then SPARKFLAKE_PROFILES_DIR, then the nearest profiles/,
and only then (bin/sparkflake) the checkout's own — the order docs/profiles.md documents."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _site_profiles(directory: Path, name: str) -> Path:
    """A profiles/ holding one copy of glm53-dflash7 under another name."""
    profile = directory / "profiles" / name
    profile.mkdir(parents=True)
    text = (REPO / "profiles" / "glm53-dflash7" / "profile.toml").read_text()
    text = text.replace('name = "glm53-dflash7"', f'name = "{name}"', 1)
    (profile / "profile.toml").write_text(text)
    shutil.copy(REPO / "profiles" / "glm53.lock", directory / "profiles" / "glm53.lock")
    return directory / "profiles"


def _wrapper(*argv: str, cwd: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPARKFLAKE_")}
    env.update(environ)
    return subprocess.run([str(REPO / "bin" / "sparkflake"), *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def test_bin_sparkflake_keeps_the_documented_lookup_order(tmp_path: Path) -> None:
    near = _site_profiles(tmp_path / "site", "site-near")
    named = _site_profiles(tmp_path / "named", "site-named")
    flag = _site_profiles(tmp_path / "flag", "site-flag")
    inside = near.parent / "rank0"
    inside.mkdir()
    # the nearest profiles/ above the working directory, not the checkout's
    listed = _wrapper("profile", "list", cwd=inside)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["site-near"]
    # the variable wins over the nearest profiles/, the flag over both
    listed = _wrapper("profile", "list", cwd=inside, SPARKFLAKE_PROFILES_DIR=str(named))
    assert listed.stdout.split() == ["site-named"], listed.stderr
    listed = _wrapper("profile", "list", "--profiles-dir", str(flag), cwd=inside, SPARKFLAKE_PROFILES_DIR=str(named))
    assert listed.stdout.split() == ["site-flag"], listed.stderr
    # nothing applies: the checkout's profiles, from any directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = _wrapper("profile", "list", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert set(listed.stdout.split()) >= {"glm53-dflash7", "glm53-mtp5"}
