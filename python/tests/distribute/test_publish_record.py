"""`publish` records the registry's digest in the working directory (or --record), never in
OUT: OUT may be a read-only /nix/store path, and a record left in a build output blocked the
next build into it (issue 31). A record the operator puts into OUT is one the next build may
replace."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
from fixtures.oci import RegistryServer, registry_server  # noqa: F401

from sparkflake.cli import main

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_publish_leaves_out_as_it_was_and_the_next_build_may_replace_a_record_put_there(
    tmp_path: Path, registry_server: RegistryServer, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0
    before = _snapshot(out)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    reference = f"{registry_server.host}/sparkflake/fixture:record"
    assert main(["publish", str(out), reference, "--insecure"]) == 0
    assert "recorded in publish.json" in capsys.readouterr().out
    digests = json.loads((out / "digests.json").read_text())
    assert json.loads((work / "publish.json").read_text())["manifest_digest"] == digests["manifest"]
    assert _snapshot(out) == before
    # an operator who records into OUT on purpose does not block the next build there
    assert main(["publish", str(out), reference, "--insecure", "--record", str(out / "publish.json")]) == 0
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0
    assert not (out / "publish.json").exists()
    # nor does a file sparkflake did not write, which is still refused
    (out / "notes.txt").write_text("the operator's\n")
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 2
    assert "holds entries sparkflake did not write (notes.txt)" in capsys.readouterr().err


def test_a_record_never_replaces_an_operators_file_in_a_build_output(
    tmp_path: Path, registry_server: RegistryServer, capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0
    mine = out / "publish.json"
    mine.write_text("the operator's own notes\n")
    reference = f"{registry_server.host}/sparkflake/fixture-mine:v1"
    assert main(["publish", str(out), reference, "--insecure", "--record", str(mine)]) == 2
    assert f"{mine}: exists and sparkflake did not write it" in capsys.readouterr().err
    assert mine.read_text() == "the operator's own notes\n"
    with pytest.raises(urllib.error.HTTPError):  # refused before anything was pushed
        registry_server.head_manifest("sparkflake/fixture-mine", "v1")
    # a record it wrote there itself is replaced by the next publish
    mine.unlink()
    assert main(["publish", str(out), reference, "--insecure", "--record", str(mine)]) == 0
    assert main(["publish", str(out), reference, "--insecure", "--record", str(mine)]) == 0
