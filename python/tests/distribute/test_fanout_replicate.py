"""``sparkflake replicate``: a checkpoint directory from rank 0 to the other three ranks over
the chain, per-file manifest, reuse of correct files, wrong files moved aside."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.netns_ranks import NetnsRanks
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.distribute.manifest import (
    RECORD_NAME,
    FileEntry,
    build_manifest,
    manifest_bytes,
    manifest_from_document,
    safe_relative,
)


def make_checkpoint(root: Path) -> None:
    generator = random.Random(7)
    (root / "tokenizer").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "glm", "layers": 3}))
    (root / "model-00001-of-00002.safetensors").write_bytes(generator.randbytes(3 << 20))
    (root / "model-00002-of-00002.safetensors").write_bytes(generator.randbytes(1 << 20))
    (root / "tokenizer" / "tokenizer.json").write_text("{}" * 1000)
    (root / "EMPTY").write_bytes(b"")


def replicate(site: Path, model: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "replicate", str(model), "--site", str(site), "--json"],
        capture_output=True, text=True, timeout=300,
    )


def test_replicate_copies_verifies_and_reuses(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    model = tmp_path / "glm53-ckpt"
    make_checkpoint(model)
    expected = {entry.path: entry for entry in build_manifest(model)}
    site = netns_ranks.write_site(tmp_path / "site.toml")

    first = replicate(site, model)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["complete"] and len(report["manifest"]["files"]) == 5
    copies = {index: netns_ranks.data_dir(index) / "models" / "glm53-ckpt" for index in (1, 2, 3)}
    for index, copy in copies.items():
        record = report["ranks"][index]
        assert record["files_copied"] == 5 and record["files_reused"] == 0
        for path, entry in expected.items():
            assert hashlib.sha256((copy / path).read_bytes()).hexdigest() == entry.sha256
        assert json.loads((copy / RECORD_NAME).read_text()) == report["manifest"]

    # rank 1 loses a file, rank 3 holds a wrong one: only those travel; rank 2 reuses all.
    (copies[1] / "config.json").unlink()
    shard = copies[3] / "model-00002-of-00002.safetensors"
    wrong = bytes(b ^ 1 for b in shard.read_bytes()[:10]) + shard.read_bytes()[10:]
    shard.write_bytes(wrong)
    second = replicate(site, model)
    assert second.returncode == 0, second.stderr
    ranks = json.loads(second.stdout)["ranks"]
    assert [r["files_copied"] for r in ranks[1:]] == [1, 0, 1]
    assert [r["files_reused"] for r in ranks[1:]] == [4, 5, 4]
    assert ranks[3]["bytes_copied"] == expected["model-00002-of-00002.safetensors"].size
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == expected["model-00002-of-00002.safetensors"].sha256
    aside = list(copies[3].glob("model-00002-of-00002.safetensors.mismatch-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == wrong


def test_replicate_refuses_bad_input(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    site = netns_ranks.write_site(tmp_path / "site.toml")
    missing = replicate(site, tmp_path / "absent")
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    relative = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "replicate", "relative/dir", "--site", str(site)],
        capture_output=True, text=True,
    )
    assert relative.returncode == 2 and "absolute" in relative.stderr


@given(st.lists(st.tuples(st.from_regex(r"\A[a-z0-9_.-]{1,8}(/[a-z0-9_-]{1,8}){0,2}\Z", fullmatch=True),
                          st.integers(0, 1 << 40), st.binary(max_size=4)), max_size=8, unique_by=lambda t: t[0]))
def test_manifest_round_trip(items: list[tuple[str, int, bytes]]) -> None:
    entries = [FileEntry(path, size, hashlib.sha256(seed).hexdigest()) for path, size, seed in items
               if safe_relative(path)]
    assert manifest_from_document(json.loads(manifest_bytes(entries))) == entries


@given(st.text(max_size=40))
def test_safe_relative_never_allows_escape(path: str) -> None:
    if safe_relative(path):
        assert not path.startswith("/") and ".." not in path.split("/") and "\x00" not in path


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"files": [{"path": "../x", "size": 1, "sha256": "0" * 64}]}, "without '..'"),
        ({"files": [{"path": "a", "size": -1, "sha256": "0" * 64}]}, "non-negative"),
        ({"files": [{"path": "a", "size": 1, "sha256": "ABC"}]}, "64 lowercase hex"),
        ({"files": [{"path": "a", "size": 1, "sha256": "0" * 64}] * 2}, "duplicate"),
        ({"files": [{"path": "a", "size": 1}]}, "exactly path, size, sha256"),
        ([], "expected an object"),
    ],
)
def test_manifest_refusals(document: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        manifest_from_document(document)
