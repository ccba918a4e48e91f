"""`sparkflake hash …`: output equal to Nix and git, --json, exit codes, bad input."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sparkflake.cli import main

NIX = ["nix", "--extra-experimental-features", "nix-command"]
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
NOBODY = 65534


def sparkflake(*argv: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", *argv],
        capture_output=True,
        text=True,
        user=user,
        group=user,
        extra_groups=[] if user is not None else None,
        cwd="/",
    )


def tool(*argv: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        list(argv), check=True, capture_output=True, text=True, cwd=cwd, env=GIT_ENV
    ).stdout.strip()


@pytest.fixture
def sample_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "bin").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "bin" / "run").write_text("#!/bin/sh\necho hi\n")
    (root / "bin" / "run").chmod(0o755)
    (root / "README").write_text("hello\n")
    (root / "dangling").symlink_to("/nonexistent/target")
    (root / "ünïcødé ✓").write_bytes(b"\0\1\2")
    return root


def git_write_tree(root: Path, object_format: str) -> str:
    scratch = tempfile.mkdtemp()
    try:
        git = ["git", f"--git-dir={scratch}/g", f"--work-tree={root}"]
        tool(*git, "init", "-q", f"--object-format={object_format}")
        tool(*git, "add", "-A")
        return tool(*git, "write-tree")
    finally:
        shutil.rmtree(scratch)


def test_hash_path_prints_what_nix_prints(sample_tree: Path, capsys) -> None:
    for flags, nix_flags in (([], []), (["--base16"], ["--base16"]), (["--nix32"], ["--base32"])):
        assert main(["hash", "path", *flags, str(sample_tree)]) == 0
        printed = capsys.readouterr().out.strip()
        assert printed == tool(*NIX, "hash", "path", *nix_flags, str(sample_tree))


def test_hash_path_json(sample_tree: Path, capsys) -> None:
    assert main(["hash", "path", "--json", str(sample_tree)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["nar_hash"] == tool(*NIX, "hash", "path", str(sample_tree))
    assert document["nix32"] == tool(*NIX, "hash", "path", "--base32", str(sample_tree))
    assert document["base16"] == tool(*NIX, "hash", "path", "--base16", str(sample_tree))
    assert document["nar_size"] % 8 == 0 and document["nar_size"] > 0
    assert document["path"] == str(sample_tree)


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
def test_hash_path_git_prints_git_write_tree(sample_tree: Path, object_format: str, capsys) -> None:
    argv = ["hash", "path", "--git", "--object-format", object_format, str(sample_tree)]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == git_write_tree(sample_tree, object_format)
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "git_tree": git_write_tree(sample_tree, object_format),
        "object_format": object_format,
        "path": str(sample_tree),
    }


def test_hash_file_prints_sri_and_base16(sample_tree: Path, capsys) -> None:
    readme = sample_tree / "README"
    assert main(["hash", "file", str(readme)]) == 0
    sri, base16 = capsys.readouterr().out.split()
    assert base16 == tool("sha256sum", str(readme)).split()[0]
    assert sri == tool(*NIX, "hash", "file", str(readme))
    assert main(["hash", "file", "--json", str(readme)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["sha256"] == base16 and document["sri"] == sri and document["size"] == 6


def test_hash_convert_between_all_forms(capsys) -> None:
    sri = "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    nix32 = "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"
    base16 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    cases = [
        ([sri, "--to", "nix32"], nix32),
        ([sri, "--to", "base16"], base16),
        (["sha256:" + nix32, "--to", "sri"], sri),
        (["sha256:" + base16, "--to", "nix32"], nix32),
        ([nix32, "--type", "sha256", "--to", "sri"], sri),
        ([base16, "--type", "sha256", "--to", "base16"], base16),
    ]
    for argv, expected in cases:
        assert main(["hash", "convert", *argv]) == 0
        assert capsys.readouterr().out.strip() == expected
    assert main(["hash", "convert", sri, "--to", "nix32", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "algorithm": "sha256",
        "hash": nix32,
        "sri": sri,
        "base16": base16,
        "nix32": nix32,
    }


# ---------------------------------------------------------------------------------------
# Bad input: exit 2, a message naming the path, never a traceback


def assert_refused(result: subprocess.CompletedProcess[str], *mentions: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("sparkflake: error: ")
    for mention in mentions:
        assert mention in result.stderr, result.stderr


@pytest.mark.parametrize("git", [False, True])
def test_fifo_in_tree_exits_2_naming_it(sample_tree: Path, git: bool) -> None:
    fifo = sample_tree / "bin" / "control"
    os.mkfifo(fifo)
    argv = ["hash", "path", *(["--git"] if git else []), str(sample_tree)]
    assert_refused(sparkflake(*argv), str(fifo), "FIFO")


@pytest.mark.parametrize("git", [False, True])
def test_socket_in_tree_exits_2_naming_it(sample_tree: Path, git: bool) -> None:
    path = sample_tree / "empty" / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        argv = ["hash", "path", *(["--git"] if git else []), str(sample_tree)]
        assert_refused(sparkflake(*argv), str(path), "socket")
    finally:
        server.close()


@pytest.fixture
def world_readable_tree():
    """A tree outside pytest's private tmp dir, so an unprivileged user can walk to it."""
    scratch = Path(tempfile.mkdtemp(prefix="sparkflake-perm-"))
    scratch.chmod(0o755)
    root = scratch / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "ok.py").write_text("print('ok')\n")
    for directory, _, _ in os.walk(scratch):
        os.chmod(directory, 0o755)
    yield root
    for directory, _, _ in os.walk(scratch):
        os.chmod(directory, 0o755)
    shutil.rmtree(scratch)


@pytest.mark.parametrize("git", [False, True])
def test_unreadable_file_exits_2_naming_it(world_readable_tree: Path, git: bool) -> None:
    # Root reads any file, so the command runs as an ordinary user (nobody), for whom
    # mode 000 really means unreadable; the same run on the readable tree succeeds.
    secret = world_readable_tree / "src" / "secret.key"
    secret.write_text("key")
    secret.chmod(0o644)
    argv = ["hash", "path", *(["--git"] if git else []), str(world_readable_tree)]
    readable = sparkflake(*argv, user=NOBODY)
    assert readable.returncode == 0, readable.stderr
    secret.chmod(0o000)
    assert_refused(sparkflake(*argv, user=NOBODY), str(secret), "Permission denied")
    assert_refused(sparkflake("hash", "file", str(secret), user=NOBODY), str(secret))


def test_unreadable_directory_exits_2_naming_it(world_readable_tree: Path) -> None:
    locked = world_readable_tree / "src"
    locked.chmod(0o000)
    assert_refused(sparkflake("hash", "path", str(world_readable_tree), user=NOBODY), str(locked))
    assert_refused(
        sparkflake("hash", "path", "--git", str(world_readable_tree), user=NOBODY), str(locked)
    )


def test_missing_path_and_wrong_kinds_exit_2(sample_tree: Path) -> None:
    missing = sample_tree / "nope"
    assert_refused(sparkflake("hash", "path", str(missing)), str(missing))
    assert_refused(sparkflake("hash", "file", str(missing)), str(missing))
    assert_refused(sparkflake("hash", "file", str(sample_tree)), str(sample_tree), "directory")
    readme = sample_tree / "README"
    assert_refused(sparkflake("hash", "path", "--git", str(readme)), str(readme), "not a directory")
    assert_refused(sparkflake("hash", "path", "/dev/null"), "/dev/null", "character device")
    # a FIFO would block a plain open() forever; a device would never end
    fifo = sample_tree / "pipe"
    os.mkfifo(fifo)
    assert_refused(sparkflake("hash", "file", str(fifo)), str(fifo), "FIFO")
    assert_refused(sparkflake("hash", "file", "/dev/zero"), "/dev/zero", "character device")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["hash", "convert", "sha256:abc", "--to", "sri"], "HASH: a sha256 digest is 64 base16"),
        (["hash", "convert", "abc", "--to", "nix32"], "HASH: no algorithm"),
        (["hash", "convert", "sha256-AAAA", "--to", "nix32"], "expected 44 base64"),
    ],
)
def test_bad_hash_text_exits_2(argv: list[str], says: str) -> None:
    assert_refused(sparkflake(*argv), says)


def test_usage_errors_exit_2() -> None:
    result = sparkflake("hash", "convert", "x", "--to", "hex")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    result = sparkflake("hash", "path", "--git", "--nix32", "/tmp")
    assert result.returncode == 2 and "not allowed with" in result.stderr
