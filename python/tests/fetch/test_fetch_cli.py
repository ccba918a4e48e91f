"""`sparkflake fetch` and `sparkflake assemble` on the committed fixture profile, offline:
its inputs are operator-supplied (--from), its URLs unreachable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkflake.cli import main
from sparkflake.lock.lock_file import load_lock

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def test_missing_inputs_exit_2_and_name_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch", str(FIXTURE), "--cache", str(tmp_path / "cache")]) == 2
    message = capsys.readouterr().err
    assert "locked input(s) missing" in message
    assert "vllm: vllm-0.1.0-cp38-abi3-manylinux_2_28_aarch64.whl (sha256 " in message
    assert "tried https://fixtures.sparkflake.invalid/vllm-0.1.0-cp38-abi3-manylinux_2_28_aarch64.whl" in message
    assert "--from DIR" in message


def test_from_dir_then_assemble(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = str(tmp_path / "cache")
    assert main(["fetch", str(FIXTURE), "--cache", cache, "--from", str(FIXTURE / "inputs"), "--json"]) == 0
    fetched = json.loads(capsys.readouterr().out)
    assert {o["source"] for o in fetched["inputs"]} == {"import"}
    assert main(["assemble", str(FIXTURE), "--cache", cache, "-o", str(tmp_path / "out"), "--json"]) == 0
    assembled = json.loads(capsys.readouterr().out)
    assert assembled["python"]["distributions"] >= 5 and assembled["base"]["packages"] == 1
    assert (tmp_path / "out/python/opt/venv/pyvenv.cfg").is_file()
    assert (tmp_path / "out/base/etc/ld.so.cache").is_file()
    # an altered cache entry is refused at assembly (exit 1) and evicted
    deb = load_lock(FIXTURE / "fixture.lock").of_kind("deb")[0]
    blob = Path(cache, "blobs", "sha256", deb.sha256)
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes() + b"tampered")
    assert main(["assemble", str(FIXTURE), "--cache", cache, "-o", str(tmp_path / "again")]) == 1
    assert "was altered" in capsys.readouterr().err
    assert not blob.exists() and not (tmp_path / "again").exists()
