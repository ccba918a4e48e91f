"""Owners and setuid/setgid/sticky bits of Debian packages never reach the OS base tree:
an unprivileged build (Nix's sandbox refuses setuid/setgid modes) makes the same tree as
root, the manifest lists what the package said, and a tree that cannot be written is
reported as such, never as a damaged package."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import stat
import tempfile
import traceback
from pathlib import Path

import pytest
from fixtures.inputs import RawMember, make_raw_deb, tree_snapshot

from sparkflake.compose.debian_base import DebInput, assemble_base
from sparkflake.core.errors import CheckFailed
from sparkflake.core.tree_digest import nar_hash

REPO = Path(__file__).resolve().parents[3]
FIXTURE_DEB = REPO / "profiles/fixture/inputs/fixture-base_1.0_arm64.deb"
NOBODY = 65534
SPECIAL = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def _fixture_base() -> DebInput:
    return DebInput("fixture-base", "1.0", "arm64", FIXTURE_DEB)


def _in_child(function) -> int:  # noqa: ANN001
    """Run ``function`` in a forked child; its exit status (0 when it returns)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            function()
            code = 0
        except CheckFailed as exc:
            os.write(2, f"{exc}\n".encode())
            code = 3
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_special_bits_and_owners_stay_off_the_tree(tmp_path: Path) -> None:
    manifest = assemble_base([_fixture_base()], tmp_path / "base")
    root = tmp_path / "base"
    for path in ("var/local", "var/mail", "tmp", "usr/bin/passwd", "usr/bin/chage"):
        status = os.lstat(root / path)
        assert status.st_mode & SPECIAL == 0, path
        assert (status.st_uid, status.st_gid) == (os.getuid(), os.getgid()), path
    assert os.lstat(root / "usr/bin/passwd").st_mode & 0o777 == 0o755
    recorded = {entry["path"]: entry for entry in manifest.ownership}
    assert recorded["/var/local"] | {} == {
        "path": "/var/local", "mode": "2775", "uid": 0, "gid": 50, "user": "root", "group": "staff", "package": "fixture-base"
    }
    assert recorded["/usr/bin/passwd"]["mode"] == "4755" and recorded["/usr/bin/passwd"]["gid"] == 0
    assert recorded["/usr/bin/chage"]["group"] == "shadow" and recorded["/usr/bin/chage"]["mode"] == "2755"
    assert recorded["/tmp"]["mode"] == "1777"
    assert "/etc/os-release" not in recorded


def test_unprivileged_build_makes_the_same_tree(tmp_path: Path) -> None:
    # dropping to another user needs root: CI and ./bin/test run as root, and a run that is
    # not fails here rather than passing with this check left out
    assert os.geteuid() == 0, "run the tests as root (./bin/test): this one builds as user nobody"
    assemble_base([_fixture_base()], tmp_path / "as-root" / "base")
    # pytest's base temporary directory is private to root: nobody works in its own.
    unprivileged = Path(tempfile.mkdtemp(prefix="sparkflake-nobody-"))
    try:
        os.chown(unprivileged, NOBODY, NOBODY)
        deb = unprivileged / FIXTURE_DEB.name
        shutil.copyfile(FIXTURE_DEB, deb)

        def build() -> None:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            assemble_base([DebInput("fixture-base", "1.0", "arm64", deb)], unprivileged / "base")

        assert _in_child(build) == 0
        assert os.stat(unprivileged / "base").st_uid == NOBODY
        assert tree_snapshot(unprivileged / "base") == tree_snapshot(tmp_path / "as-root" / "base")
        assert nar_hash(unprivileged / "base") == nar_hash(tmp_path / "as-root" / "base")
    finally:
        shutil.rmtree(unprivileged)


def test_a_tree_that_cannot_be_written_is_not_a_damaged_package(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    deb = make_raw_deb(tmp_path, "big", "1.0", [RawMember("./usr/", kind="dir", mode=0o755),
                                                RawMember("./usr/blob", content=b"x" * 200_000)])

    def build() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        assemble_base([DebInput("big", "1.0", "arm64", deb.path)], tmp_path / "base")

    assert _in_child(build) == 3
    message = capfd.readouterr().err
    assert "[base-tree-write] big (big_1.0_arm64.deb): cannot write " in message
    assert "/usr/blob in the OS base tree: File too large" in message
    assert "damaged" not in message
    assert not (tmp_path / "base").exists()
