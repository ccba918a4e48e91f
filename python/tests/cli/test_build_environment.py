"""`sparkflake build` gives the lock's digests whatever the environment of the build
process: "one lock, the same digest every time" on any machine, not only on one whose
environment happens to match the one the expected digests were recorded in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sparkflake.cli import main, utf8_mode_relaunch

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


# A tree with names that are not ASCII, as the OS base has one (ca-certificates'
# "NetLock_Arany_=Class_Gold=_Főtanúsítvány.crt", its /etc/ssl/certs symlink and the
# line of /etc/ca-certificates.conf naming it).
NON_ASCII = "NetLock_Arany_=Class_Gold=_Főtanúsítvány.crt"


def _image_build(tmp_path: Path, name: str, environment: dict[str, str]) -> dict[str, object]:
    tree = tmp_path / "tree"
    if not tree.exists():
        (tree / "données").mkdir(parents=True)
        (tree / "données" / NON_ASCII).write_bytes(b"certificate\n")
        (tree / "link.pem").symlink_to(f"données/{NON_ASCII}")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"platform": "linux/arm64", "layers": [{"tree": "tree"}],
                                "config": {"Entrypoint": ["/bin/true"]}}), encoding="utf-8")
    env = {key: value for key, value in os.environ.items()
           if key not in ("LC_ALL", "LC_CTYPE", "LANG", "PYTHONUTF8", "PYTHONIOENCODING")}
    completed = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "image", "build", str(spec), "-o", str(tmp_path / name),
         "--no-cache", "--cache", str(tmp_path / f"store-{name}")],
        env={**env, **environment}, capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    digests: dict[str, object] = json.loads((tmp_path / name / "digests.json").read_text(encoding="utf-8"))
    return digests


def test_a_locale_without_utf8_gives_the_same_layer(tmp_path: Path) -> None:
    # LC_ALL=C with PYTHONUTF8=0: Python decodes file names as ASCII, so the layer writer
    # refused "Főtanúsítvány" as not UTF-8 (and under an ISO-8859-1 locale stored its
    # bytes twice encoded: another diffID). The CLI now runs itself in UTF-8 mode.
    reference = _image_build(tmp_path, "utf8", {"LC_ALL": "C.UTF-8"})
    ascii_locale = _image_build(tmp_path, "ascii", {"LC_ALL": "C", "PYTHONUTF8": "0"})
    assert ascii_locale["manifest"] == reference["manifest"]
    assert ascii_locale["layers"] == reference["layers"]
    with tarfile.open(tmp_path / "utf8" / "oci-archive.tar") as archive:  # the names are the host's bytes
        [layer_record] = reference["layers"]  # type: ignore[misc]
        stream = archive.extractfile("blobs/sha256/" + layer_record["digest"].removeprefix("sha256:"))
        assert stream is not None
        with tarfile.open(fileobj=stream, mode="r:gz", encoding="utf-8") as layer:
            names = layer.getnames()
            link = layer.getmember("link.pem")
    assert f"données/{NON_ASCII}" in names and link.linkname == f"données/{NON_ASCII}"


def test_the_cli_restarts_itself_in_utf8_mode_only_when_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUTF8", raising=False)
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "iso8859-1")
    assert utf8_mode_relaunch() == [sys.executable, *sys.orig_argv[1:]]
    monkeypatch.setenv("PYTHONUTF8", "1")  # asked for and still not UTF-8 (-E, -X utf8=0): no loop
    assert utf8_mode_relaunch() is None
    monkeypatch.delenv("PYTHONUTF8")
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "utf-8")
    assert utf8_mode_relaunch() is None
