"""Forge archives of a commit (``fetch.git_archive.extract_archive``): what ``git archive``
writes unpacks to the commit's own tree (its tree id, against ``git``), any other commit's
archive is refused by its pax comment, and a hostile tarball (``..``, absolute names, a
second top directory, hard links, devices, FIFOs, writes through a symlink, a ``.git``
part) is refused with ``ArchiveRefused`` naming the member, never writing outside the
destination; so is a member that cannot be written (a file where a directory is needed,
a name part over 255 bytes), so that the caller tries the next archive URL."""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from fixtures.git import git, write_files
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.core.tree_digest import git_tree_id
from sparkflake.fetch.git_archive import ArchiveRefused, extract_archive

pytestmark = pytest.mark.fetch

_names = st.text("abcxyz.-_é", min_size=1, max_size=8).filter(
    lambda name: name not in (".", "..") and name.lower() != ".git" and not name.lower().startswith(".git")
)
_payloads = st.binary(max_size=64)
_leaves = st.one_of(
    _payloads,
    st.tuples(st.just("x"), _payloads),
    st.tuples(st.just("l"), st.sampled_from([b"target", b"../up", b"/etc/passwd", b"a/b"])),
)


def _trees(depth: int = 2):
    """A directory: names -> leaf or (when depth allows) a non-empty subdirectory."""
    if depth == 0:
        return st.dictionaries(_names, _leaves, min_size=1, max_size=4)
    return st.dictionaries(_names, st.one_of(_leaves, _trees(depth - 1)), min_size=1, max_size=4)


def _flatten(tree: dict, prefix: str = "") -> dict[str, bytes | tuple[str, bytes]]:
    flat: dict[str, bytes | tuple[str, bytes]] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


@settings(max_examples=12)
@given(_trees(), st.sampled_from(["repo-1/", "x/", "a.b-c/"]))
def test_what_git_archive_writes_unpacks_to_the_commits_tree(tmp_path_factory, tree: dict, prefix: str) -> None:
    root = tmp_path_factory.mktemp("repo")
    work = root / "work"
    git("init", "-q", "-b", "main", str(work))
    files = _flatten(tree)
    write_files(work, files)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "c", cwd=work)
    rev, tree_id = git("rev-parse", "HEAD", cwd=work), git("rev-parse", "HEAD^{tree}", cwd=work)
    archive = root / "a.tar.gz"
    git("archive", "--format=tar.gz", f"--prefix={prefix}", "-o", str(archive), rev, cwd=work)

    assert extract_archive(archive, root / "out", rev) == len(files)
    assert git_tree_id(root / "out") == tree_id
    for path, content in files.items():
        target = root / "out" / path
        if isinstance(content, tuple) and content[0] == "l":
            assert os.readlink(target) == os.fsdecode(content[1])
        else:
            mode = os.lstat(target).st_mode
            assert stat.S_ISREG(mode) and stat.S_IMODE(mode) == (0o755 if isinstance(content, tuple) else 0o644)
            assert target.read_bytes() == (content[1] if isinstance(content, tuple) else content)

    # the same archive is another commit's: refused by git's pax comment, naming both
    other = "0" * 40 if rev != "0" * 40 else "1" * 40
    with pytest.raises(ArchiveRefused, match=f"^an archive of commit {rev}, not {other}$"):
        extract_archive(archive, root / "other", other)


_KINDS = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "char": tarfile.CHRTYPE,
    "block": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}
# plain members below the one top directory (names unique: a repeated name is refused as
# FileExistsError, a case of its own), then now and then one hostile member: another top,
# "..", ".", "", ".git" parts, a hard link, device or FIFO
_parts = st.sampled_from(["d", "e"])
_link_targets = st.sampled_from(["../../victim", "../../outside", "/tmp", "..", ".", "d", "top/d"])
# leaf names: a file and a directory never share a name (that case has a property of its own)
_leaf_kinds = {"file": "f", "symlink": "l", "hardlink": "h", "char": "c", "block": "b", "fifo": "p"}
_hostile_tops = st.sampled_from(["other", "..", ".", "", "/top", "./top", "top"])
_hostile_parts = st.sampled_from(["d", "..", ".", "", ".git", ".GIT"])


@st.composite
def _member(draw, tops, parts, kinds):
    kind = draw(kinds)
    path = [draw(tops), *draw(st.lists(parts, max_size=3))]
    if kind != "dir" and not (kind == "symlink" and draw(st.booleans())):  # a symlink may be a parent
        path.append(_leaf_kinds[kind] + draw(st.sampled_from("12")))
    return "/".join(path), kind, draw(_link_targets)


_plain = _member(st.just("top"), _parts, st.sampled_from(["file", "dir", "symlink"]))
_hostile = _member(_hostile_tops, _hostile_parts, st.sampled_from(sorted(_KINDS)))


@st.composite
def _members(draw):
    members = draw(st.lists(_plain, min_size=1, max_size=5, unique_by=lambda member: member[0]))
    links = [name for name, kind, _link in members if kind == "symlink"]
    if links and draw(st.booleans()):  # something below a symlink: a write through it, unless refused
        below = f"{draw(st.sampled_from(links))}/{draw(st.sampled_from(['f1', 'd', 'd/f2']))}"
        members.append((below, "dir" if below.endswith("/d") else "file", ""))
    if draw(st.booleans()):
        members.insert(draw(st.integers(0, len(members))), draw(_hostile))
    return members


def _tarball(members: list[tuple[str, str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type = _KINDS[kind]
            info.mode = 0o755 if kind == "dir" else 0o644
            if kind in ("symlink", "hardlink"):
                info.linkname = link
            if kind == "file":
                info.size = 3
                tar.addfile(info, io.BytesIO(b"bad"))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under ``root`` but ``skip`` (not followed through symlinks)."""
    seen = {}
    for directory, dirs, files in os.walk(root):
        if Path(directory) == skip or skip in Path(directory).parents:
            continue
        for name in dirs + files:
            path = Path(directory, name)
            if path == skip:
                continue
            mode = os.lstat(path).st_mode
            seen[str(path)] = (mode, path.read_bytes() if stat.S_ISREG(mode) else b"")
    return seen


@given(_members())
def test_a_hostile_archive_is_refused_by_name_and_writes_nothing_outside(tmp_path_factory, members) -> None:
    box = tmp_path_factory.mktemp("box")
    (box / "outside").mkdir()
    (box / "victim").write_bytes(b"keep")
    archive = box / "a.tar.gz"
    archive.write_bytes(_tarball(members))
    destination = box / "dest"
    before = _snapshot(box, destination)

    try:
        written = extract_archive(archive, destination, "r" * 40)
    except ArchiveRefused as refused:
        written = None
        assert refused.reason.startswith(("archive member ", "archive refused: ")), refused.reason
    assert _snapshot(box, destination) == before  # nothing outside the destination changed

    kinds = {kind for _name, kind, _link in members}
    named = [name for name, _kind, _link in members]
    if written is None:
        return
    # accepted: only what git archive writes, one top directory, no escaping part
    assert kinds <= {"file", "dir", "symlink"}
    for name in named:
        parts = [part for part in name.split("/") if part not in ("", ".")]
        assert not name.startswith("/") and ".." not in parts and ".git" not in [p.lower() for p in parts]
    splits = [[p for p in name.split("/") if p not in ("", ".")] for name in named]
    assert len({parts[0] for parts in splits if parts}) <= 1
    assert written == sum(1 for (_name, kind, _link), parts in zip(members, splits, strict=True)
                          if kind in ("file", "symlink") and len(parts) > 1)
    for directory, dirs, files in os.walk(destination):
        for entry in dirs + files:
            mode = os.lstat(Path(directory, entry)).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)
            if stat.S_ISREG(mode):  # a file's real place is inside the destination
                assert Path(os.path.realpath(Path(directory, entry))).is_relative_to(destination.resolve())


@given(st.sampled_from(["../../outside", "/tmp", ".", "..", "d"]), st.sampled_from(["f", "e/f", "e/"]))
def test_a_member_below_a_symlink_is_refused_and_nothing_is_written_through_it(tmp_path_factory, target, below) -> None:
    box = tmp_path_factory.mktemp("box")
    (box / "outside").mkdir()
    archive = box / "a.tar.gz"
    kind = "dir" if below.endswith("/") else "file"
    archive.write_bytes(_tarball([("top/d", "dir", ""), ("top/link", "symlink", target), (f"top/link/{below}", kind, "")]))
    with pytest.raises(ArchiveRefused, match=f"^archive member 'top/link/{below.rstrip('/')}' is written through a symlink$"):
        extract_archive(archive, box / "dest", "r" * 40)
    assert list((box / "outside").iterdir()) == [] and list((box / "dest" / "d").iterdir()) == []


@given(st.sampled_from(["hardlink", "char", "block", "fifo"]), st.sampled_from(["top/", "top/d/", "top/d/e/"]))
def test_each_member_that_is_no_file_directory_or_symlink_is_refused_by_name(tmp_path_factory, kind, prefix) -> None:
    box = tmp_path_factory.mktemp("box")
    archive = box / "a.tar.gz"
    archive.write_bytes(_tarball([("top/ok", "file", ""), (f"{prefix}x", kind, "top/ok")]))
    with pytest.raises(ArchiveRefused, match=f"^archive member '{prefix}x' is not a file, directory or symlink$"):
        extract_archive(archive, box / "dest", "r" * 40)


@given(st.sampled_from(["../x", "top/../x", "top/d/../../x", "/top/x", "other/x"]))
def test_a_member_leaving_its_top_directory_is_refused_by_name(tmp_path_factory, name) -> None:
    box = tmp_path_factory.mktemp("box")
    archive = box / "a.tar.gz"
    archive.write_bytes(_tarball([("top/ok", "file", ""), (name, "file", "")]))
    with pytest.raises(ArchiveRefused, match=rf"^archive member '{name.replace('.', '[.]')}' is outside its top directory 'top'$"):
        extract_archive(archive, box / "dest", "r" * 40)
    assert not (box / "x").exists()


@given(st.binary(max_size=300), st.integers(0, 200))
def test_damaged_bytes_are_refused_as_unreadable(tmp_path_factory, noise: bytes, cut: int) -> None:
    box = tmp_path_factory.mktemp("box")
    good = _tarball([("top/d", "dir", ""), ("top/d/f1", "file", "")])
    archive = box / "a.tar.gz"
    archive.write_bytes(good[: min(cut, len(good) - 1)] + noise)
    try:
        extract_archive(archive, box / "dest", "r" * 40)
    except ArchiveRefused as refused:
        assert refused.reason.startswith(("not a readable .tar.gz archive: ", "archive ")), refused.reason


@example([("top/a", "file", ""), ("top/a/b", "dir", "")])
@example([("top/a", "file", ""), ("top/a/b/c", "file", "")])
@example([("top/" + "a" * 256, "file", "")])
@example([("top/a", "dir", ""), ("top/a", "file", "")])
@given(st.lists(st.tuples(
    st.lists(st.sampled_from(["a", "b", "a" * 255, "a" * 256, "é" * 128]), min_size=1, max_size=3).map(
        lambda parts: "top/" + "/".join(parts)),
    st.sampled_from(["file", "dir", "symlink"]),
    st.just("t"),
), min_size=1, max_size=4))
def test_a_member_that_cannot_be_written_is_refused_by_name(tmp_path_factory, members) -> None:
    """A file where a directory is needed (or the reverse), a name part over 255 bytes:
    ArchiveRefused naming the member (the next archive URL is tried), never an OSError."""
    box = tmp_path_factory.mktemp("box")
    (box / "outside").mkdir()
    archive = box / "a.tar.gz"
    archive.write_bytes(_tarball(members))
    destination = box / "dest"
    try:
        written = extract_archive(archive, destination, "r" * 40)
    except ArchiveRefused as refused:
        named = [name for name, _kind, _link in members if refused.reason.startswith(f"archive member {name!r}")]
        assert named, refused.reason
        if refused.reason.endswith(": a name part longer than 255 bytes"):
            assert any(len(part.encode()) > 255 for part in named[0].split("/"))
    else:
        assert written == sum(1 for _name, kind, _link in members if kind != "dir")
        assert all(len(part.encode()) <= 255 for name, _kind, _link in members for part in name.split("/"))
    assert sorted(os.listdir(box)) == ["a.tar.gz", "dest", "outside"] and not os.listdir(box / "outside")


@pytest.mark.parametrize(("members", "reason"), [
    ([("top/a", "file", ""), ("top/a/b", "dir", "")], "archive member 'top/a/b': Not a directory"),
    ([("top/a", "file", ""), ("top/a/b/c", "file", "")], "archive member 'top/a/b/c': Not a directory"),
    ([("top/a", "dir", ""), ("top/a", "file", "")], "archive member 'top/a': File exists"),
    ([("top/" + "a" * 256, "file", "")], f"archive member {'top/' + 'a' * 256!r}: a name part longer than 255 bytes"),
    ([("top/d/" + "é" * 128, "dir", "")], f"archive member {'top/d/' + 'é' * 128!r}: a name part longer than 255 bytes"),
])
def test_each_unwritable_member_is_refused_with_its_name_and_reason(tmp_path, members, reason) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tarball(members))
    with pytest.raises(ArchiveRefused) as refused:
        extract_archive(archive, tmp_path / "dest", "r" * 40)
    assert refused.value.reason == reason


@pytest.mark.parametrize("fault", [errno.ENOSPC, errno.EIO])
def test_a_full_or_failing_disk_ends_the_fetch_and_is_no_refusal_of_the_archive(tmp_path, monkeypatch, fault) -> None:
    """Another URL's archive would meet the same disk: the error is the machine's, raised as
    the OSError the CLI names (file and reason), not an ArchiveRefused that moves on."""
    import shutil

    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tarball([("top/a", "file", "")]))

    def disk_fault(*_args: object) -> None:  # the write of the member's bytes fails as the kernel says
        raise OSError(fault, os.strerror(fault))

    monkeypatch.setattr(shutil, "copyfileobj", disk_fault)
    with pytest.raises(OSError) as raised:
        extract_archive(archive, tmp_path / "dest", "r" * 40)
    assert raised.value.errno == fault and not isinstance(raised.value, ArchiveRefused)
