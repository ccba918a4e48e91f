"""`sparkflake build` gives the lock's digests whatever the environment of the build
process: "one lock, the same digest every time" on any machine, not only on one whose
environment happens to match the one the expected digests were recorded in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkflake.cli import main

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"
EXPECTED = json.loads((FIXTURE / "expected-digests.json").read_text(encoding="utf-8"))


def _digests(out: Path) -> tuple[str, str, list[str]]:
    written = json.loads((out / "digests.json").read_text(encoding="utf-8"))
    return written["manifest"], written["config"], [layer["diff_id"] for layer in written["layers"]]


@pytest.mark.parametrize("value", ["1700000000", "315532800", "not a number"])
def test_the_environments_source_date_epoch_does_not_change_a_profiles_image(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `nix develop` exports SOURCE_DATE_EPOCH=315532800 and many CI systems set one: the
    # build took it as the image's epoch (config `created`, history, every tar mtime), so
    # the same lock gave other digests there. The profile's image has the fixed epoch 1.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    out = tmp_path / "out"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(tmp_path / "cache")]) == 0
    manifest, config, diff_ids = _digests(out)
    assert (manifest, config) == (EXPECTED["manifest"], EXPECTED["config"])
    assert diff_ids == [layer["diff_id"] for layer in EXPECTED["layers"]]
    # and it says so, rather than ignoring what the operator set without a word
    assert f"SOURCE_DATE_EPOCH={value!r} in the environment is not used" in capsys.readouterr().err


def test_source_date_epoch_of_one_in_the_environment_is_not_remarked_upon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1")  # what nix/image.nix sets: the epoch the image has
    out = tmp_path / "out"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(tmp_path / "cache")]) == 0
    assert _digests(out)[0] == EXPECTED["manifest"]
    assert "SOURCE_DATE_EPOCH" not in capsys.readouterr().err
