"""`sparkflake image build` / `inspect` end to end through the CLI entry point."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from sparkflake.cli import main as cli_main


def _spec(tmp_path, **extra):
    tree = tmp_path / "rootfs"
    (tree / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (tree / "usr" / "bin" / "serve").write_bytes(b"#!/bin/sh\nexec true\n")
    (tree / "usr" / "bin" / "serve").chmod(0o755)
    spec = {
        "platform": "linux/arm64",
        "compression": "gzip",
        "layers": [{"tree": "rootfs"}],
        "config": {"Entrypoint": ["/usr/bin/serve"], "Env": ["A=1"], "Labels": {"x": "y"}},
        "tag": "latest",
        **extra,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def test_build_writes_every_output_and_digests_json(tmp_path, capsys):
    spec = _spec(tmp_path)
    out = tmp_path / "out"
    assert (
        cli_main(
            ["image", "build", str(spec), "-o", str(out), "--cache", str(tmp_path / "c"), "--json"]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    digests = json.loads((out / "digests.json").read_text())
    assert printed == digests
    assert sorted(p.name for p in out.iterdir()) == [
        ".sparkflake-output.json",  # the marker: the next `image build -o` may replace it
        "digests.json",
        "docker-archive.tar",
        "oci",
        "oci-archive.tar",
    ]
    assert set(digests) >= {"manifest", "config", "chain_id", "layers", "index"}
    assert set(digests["layers"][0]) >= {"digest", "diff_id", "size"}
    assert digests["chain_id"] == digests["layers"][0]["diff_id"]  # one layer


def test_a_relative_output_directory_is_built_and_named_as_given(tmp_path, capsys, monkeypatch):
    # before: ValueError from Path.relative_to (the staged outputs absolute, OUT's stage not)
    spec = _spec(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["image", "build", "spec.json", "-o", "out", "--cache", "c"]) == 0
    printed = capsys.readouterr().out
    assert "wrote out/oci, out/oci-archive.tar, out/docker-archive.tar, out/digests.json" in printed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".sparkflake-output.json", "digests.json", "docker-archive.tar", "oci", "oci-archive.tar"]
    assert spec.exists()


def test_human_output_and_cache_report(tmp_path, capsys):
    spec = _spec(tmp_path, compression="zstd")
    args = [
        "image",
        "build",
        str(spec),
        "-o",
        str(tmp_path / "out"),
        "--cache",
        str(tmp_path / "c"),
    ]
    assert cli_main(args) == 0
    first = capsys.readouterr().out
    assert "(built)" in first and "manifest  sha256:" in first
    assert cli_main(args) == 0
    assert "(cached)" in capsys.readouterr().out
    assert cli_main(["image", "inspect", str(tmp_path / "out" / "docker-archive.tar")]) == 0
    inspected = capsys.readouterr().out
    assert "format    docker-archive" in inspected and "label     x=y" in inspected


def test_bad_spec_exit_2_without_traceback(tmp_path):
    spec = _spec(tmp_path, surprise=True)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkflake.cli",
            "image",
            "build",
            str(spec),
            "-o",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert "unknown key 'surprise'" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_progress_bar_is_drawn_when_asked(tmp_path, capsys):
    spec = _spec(tmp_path)
    args = [
        "image",
        "build",
        str(spec),
        "-o",
        str(tmp_path / "o"),
        "--no-cache",
        "--progress",
        "--cache",
        str(tmp_path / "c"),
    ]
    assert cli_main(args) == 0
    assert "layer 1/1" in capsys.readouterr().err


_WITH_FILE_SIZE_LIMIT = r"""
import resource, signal, sys
from sparkflake.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.exit(main(sys.argv[2:]))
"""


def test_archive_write_failure_is_one_clear_error(tmp_path):
    """Two layers of 3 MiB of random bytes each: every blob fits under a 5 MiB file-size
    limit, the archive holding both does not. The write fails on the archive writer's
    thread (EFBIG); the build stops with that error naming the archive (in the output's
    staging directory: OUT is swapped in only whole; exit 2, no traceback), and neither
    OUT nor its staging directory is left."""
    import os

    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.bin").write_bytes(os.urandom(3 << 20))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"platform": "linux/arm64", "compression": "gzip",
                                "layers": [{"tree": "one"}, {"tree": "two"}], "tag": "t"}))
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-c", _WITH_FILE_SIZE_LIMIT, str(5 << 20),
         "image", "build", str(spec), "-o", str(out), "--cache", str(tmp_path / "c")],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert re.search(rf"sparkflake: error: {re.escape(str(tmp_path))}/\.out\.[^/]+\.partial/oci-archive\.tar: "
                     "cannot write: File too large", completed.stderr), completed.stderr
    assert completed.stderr.count("cannot write") == 1
    assert "Traceback" not in completed.stderr
    assert not out.exists() and not any(path.name.endswith(".partial") for path in tmp_path.iterdir())
