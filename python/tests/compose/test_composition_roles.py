"""The kinds of input a composition's roles take, checked when the profile is loaded: the
NCCL input labels the image with its library's sha256, so it is a file that is or holds the
library, never a git or OCI input (which have no such bytes: the build used to end in an
AttributeError traceback deep in the assembly, found by mypy)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.compose.composition import load_composition
from sparkflake.core.errors import InputError
from sparkflake.lock.pins import WheelPin

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"

GIT_INPUT = """
[[inputs]]
kind = "git"
name = "nccl-git"
urls = ["https://git.sparkflake.invalid/nccl.git"]
rev = "0123456789abcdef0123456789abcdef01234567"
tree = "89abcdef0123456789abcdef0123456789abcdef"
"""

OCI_INPUT = """
[[inputs]]
kind = "oci"
name = "nccl-oci"
reference = "registry.sparkflake.invalid/nccl"
manifest_digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
"""


def _fixture_with_nccl(tmp_path: Path, extra_input: str, name: str) -> Path:
    profile = tmp_path / "fixture"
    shutil.copytree(FIXTURE, profile)
    lock = profile / "fixture.lock"
    lock.write_text(lock.read_text() + extra_input)
    toml = profile / "profile.toml"
    text, count = re.subn(r'(?m)^nccl = "nvidia-nccl-cu13"$', f'nccl = "{name}"', toml.read_text())
    assert count == 1
    toml.write_text(text)
    return profile


def test_the_fixture_s_nccl_input_is_its_wheel() -> None:
    composition = load_composition(str(FIXTURE))
    assert isinstance(composition.nccl, WheelPin)
    assert composition.nccl.name == "nvidia-nccl-cu13"


@pytest.mark.parametrize("extra_input, name, kind", [(GIT_INPUT, "nccl-git", "git"), (OCI_INPUT, "nccl-oci", "oci")])
def test_a_git_or_oci_nccl_input_is_refused_naming_the_role(tmp_path: Path, extra_input: str, name: str,
                                                          kind: str) -> None:
    profile = _fixture_with_nccl(tmp_path, extra_input, name)
    with pytest.raises(InputError) as raised:
        load_composition(str(profile))
    assert raised.value.message == (
        f"{profile / 'profile.toml'}: inputs.nccl: {name} is a {kind} input, expected a wheel or a file input"
    )


def test_the_build_refuses_it_with_exit_2_and_no_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = _fixture_with_nccl(tmp_path, GIT_INPUT, "nccl-git")
    status = main(["build", str(profile), "--offline", "-o", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")])
    error = capsys.readouterr().err
    assert status == 2, error
    assert "inputs.nccl: nccl-git is a git input, expected a wheel or a file input" in error
    assert "Traceback" not in error
    assert not (tmp_path / "out").exists()
