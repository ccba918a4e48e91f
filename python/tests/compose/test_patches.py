"""Anchored patch sets: exact application, anchors, atomicity, double application."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.compose.patches import (
    FileReader,
    apply_patch_set,
    load_patch_set,
    parse_unified_diff,
)
from sparkflake.core.errors import CheckFailed, InputError

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

REPO = Path(__file__).resolve().parents[3]


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def make_diff(path: str, old: bytes | None, new: bytes | None) -> bytes:
    old_lines = [] if old is None else old.decode().splitlines(keepends=True)
    new_lines = [] if new is None else new.decode().splitlines(keepends=True)
    lines = list(
        difflib.unified_diff(
            old_lines,
            new_lines,
            fromfile="/dev/null" if old is None else f"a/{path}",
            tofile="/dev/null" if new is None else f"b/{path}",
        )
    )
    out = []
    for line in lines:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out).encode()


def write_set(directory: Path, patches: list[tuple[str, dict[str, tuple[bytes | None, bytes | None]]]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    toml = ["format = 1", ""]
    for number, (name, files) in enumerate(patches):
        diff = b"".join(make_diff(path, old, new) for path, (old, new) in files.items())
        diff_name = f"{number:04d}-{name}.diff"
        (directory / diff_name).write_bytes(diff)
        toml += ["[[patches]]", f'name = "{name}"', f'diff = "{diff_name}"', "files = ["]
        for path, (old, new) in files.items():
            pre = "" if old is None else sha(old)
            post = "" if new is None else sha(new)
            toml.append(f'  {{ path = "{path}", pre = "{pre}", post = "{post}" }},')
        toml += ["]", ""]
    (directory / "patches.toml").write_text("\n".join(toml))
    return directory


ORIGINAL = b"".join(f"line {i}\n".encode() for i in range(1, 40))
CHANGED = ORIGINAL.replace(b"line 5\n", b"line five\n").replace(b"line 30\n", b"line 30\nextra\n")


def test_apply_modify_create_delete(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/mod.py").write_bytes(ORIGINAL)
    (tree / "pkg/gone.py").write_bytes(b"bye\n")
    patch_dir = write_set(
        tmp_path / "set",
        [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED), "pkg/new.py": (None, b"new\n"), "pkg/gone.py": (b"bye\n", None)})],
    )
    patch_set = load_patch_set(patch_dir)
    outcome = apply_patch_set(patch_set, FileReader(tree))
    assert outcome["pkg/mod.py"].content == CHANGED
    assert outcome["pkg/mod.py"].base_sha256 == sha(ORIGINAL)
    assert outcome["pkg/new.py"].content == b"new\n" and outcome["pkg/new.py"].base_sha256 == ""
    assert outcome["pkg/gone.py"].content is None and outcome["pkg/gone.py"].target_sha256 == ""
    # nothing written by apply
    assert (tree / "pkg/mod.py").read_bytes() == ORIGINAL


def test_patch_set_sha_changes_with_any_byte(tmp_path: Path) -> None:
    patch_dir = write_set(tmp_path / "set", [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED)})])
    before = load_patch_set(patch_dir).patch_set_sha256
    diff = next(patch_dir.glob("*.diff"))
    diff.write_bytes(diff.read_bytes() + b"trailing prose\n")
    assert load_patch_set(patch_dir).patch_set_sha256 != before


def test_already_applied_is_detected(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/mod.py").write_bytes(CHANGED)
    patch_set = load_patch_set(write_set(tmp_path / "set", [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED)})]))
    with pytest.raises(CheckFailed) as error:
        apply_patch_set(patch_set, FileReader(tree))
    assert error.value.check_id == "patches.already-applied"
    assert "pkg/mod.py" in str(error.value)


def test_pre_image_mismatch_names_file(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/mod.py").write_bytes(ORIGINAL + b"# local change\n")
    patch_set = load_patch_set(write_set(tmp_path / "set", [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED)})]))
    with pytest.raises(CheckFailed) as error:
        apply_patch_set(patch_set, FileReader(tree))
    assert error.value.check_id == "patches.pre-image"
    assert "pkg/mod.py" in str(error.value) and sha(ORIGINAL) in str(error.value)


def test_hunk_that_no_longer_applies_names_file_and_hunk(tmp_path: Path) -> None:
    """The pre-image anchor matches but the hunk does not (a diff edited by hand): the
    error names the patch, the file, the hunk and the diff line."""
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/mod.py").write_bytes(ORIGINAL)
    patch_dir = write_set(tmp_path / "set", [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED)})])
    diff = next(patch_dir.glob("*.diff"))
    diff.write_bytes(diff.read_bytes().replace(b" line 31\n", b" line 31 moved\n"))
    patch_set = load_patch_set(patch_dir)
    with pytest.raises(CheckFailed) as error:
        apply_patch_set(patch_set, FileReader(tree))
    message = str(error.value)
    assert error.value.check_id == "patches.hunk"
    assert "pkg/mod.py" in message and "hunk 2" in message and diff.name in message


def test_no_fuzz_shifted_context_refused(tmp_path: Path) -> None:
    """A file with one extra line on top: the same hunks would apply with an offset in
    GNU patch; here they are refused (and the pre-image anchor says why first)."""
    shifted = b"# header\n" + ORIGINAL
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/mod.py").write_bytes(shifted)
    patch_dir = write_set(tmp_path / "set", [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED)})])
    toml = (patch_dir / "patches.toml").read_text().replace(sha(ORIGINAL), sha(shifted))
    (patch_dir / "patches.toml").write_text(toml)
    with pytest.raises(CheckFailed) as error:
        apply_patch_set(load_patch_set(patch_dir), FileReader(tree))
    assert error.value.check_id == "patches.hunk"
    assert "hunk 1" in str(error.value) and "no fuzz" in str(error.value)


def test_set_is_all_or_nothing(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/a.py").write_bytes(ORIGINAL)
    (tree / "pkg/b.py").write_bytes(b"unexpected\n")
    patch_set = load_patch_set(
        write_set(
            tmp_path / "set",
            [("first", {"pkg/a.py": (ORIGINAL, CHANGED)}), ("second", {"pkg/b.py": (b"expected\n", b"x\n")})],
        )
    )
    with pytest.raises(CheckFailed) as error:
        apply_patch_set(patch_set, FileReader(tree))
    assert "second" in str(error.value)
    assert (tree / "pkg/a.py").read_bytes() == ORIGINAL


def test_sequential_patches_on_same_file(tmp_path: Path) -> None:
    third = CHANGED.replace(b"line 20\n", b"line twenty\n")
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/a.py").write_bytes(ORIGINAL)
    patch_set = load_patch_set(
        write_set(tmp_path / "set", [("one", {"pkg/a.py": (ORIGINAL, CHANGED)}), ("two", {"pkg/a.py": (CHANGED, third)})])
    )
    outcome = apply_patch_set(patch_set, FileReader(tree))
    assert outcome["pkg/a.py"].content == third
    assert outcome["pkg/a.py"].base_sha256 == sha(ORIGINAL)


def test_manifest_errors_name_the_place(tmp_path: Path) -> None:
    patch_dir = write_set(tmp_path / "set", [("edit", {"pkg/mod.py": (ORIGINAL, CHANGED)})])
    toml = (patch_dir / "patches.toml").read_text()
    (patch_dir / "patches.toml").write_text(toml.replace(sha(ORIGINAL), "ABC"))
    with pytest.raises(InputError, match=r"patches\[0\]\.files\[0\]\.pre"):
        load_patch_set(patch_dir)
    (patch_dir / "patches.toml").write_text(toml.replace("pkg/mod.py", "pkg/other.py"))
    with pytest.raises(InputError, match="differ from the files"):
        load_patch_set(patch_dir)


def test_real_vllm_patch_set_is_well_formed() -> None:
    patch_set = load_patch_set(REPO / "overlays/vllm")
    assert [p.name for p in patch_set.patches] == ["gb10-allreduce-probe-defaults"]
    anchors = patch_set.patches[0].anchors
    assert anchors[0].path == "vllm/envs.py"
    assert anchors[0].pre_sha256 == "a9f665c49da1d8852c19a192f5d5848f0e38f4f56c76b5fafe0c17398945b357"


_line = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12).map(lambda s: s + "\n")


@given(old=st.lists(_line, max_size=30), edits=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["del", "ins", "rep"]), _line), max_size=6))
def test_roundtrip_difflib(tmp_path_factory: pytest.TempPathFactory, old: list[str], edits: list) -> None:
    new = list(old)
    for position, action, text in edits:
        index = position % (len(new) + 1)
        if action == "ins":
            new.insert(index, text)
        elif new and index < len(new):
            if action == "del":
                del new[index]
            else:
                new[index] = text
    old_bytes, new_bytes = "".join(old).encode(), "".join(new).encode()
    if old_bytes == new_bytes:
        return
    base = tmp_path_factory.mktemp("rt")
    tree = base / "tree"
    (tree / "p").mkdir(parents=True)
    (tree / "p/f.txt").write_bytes(old_bytes)
    patch_set = load_patch_set(write_set(base / "set", [("rt", {"p/f.txt": (old_bytes, new_bytes)})]))
    outcome = apply_patch_set(patch_set, FileReader(tree))
    assert outcome["p/f.txt"].content == new_bytes


@given(st.binary(max_size=400))
def test_parser_fuzz_only_input_errors(raw: bytes) -> None:
    try:
        parsed = parse_unified_diff(raw)
    except InputError:
        return
    assert parsed


@given(st.lists(_line, min_size=1, max_size=10), st.lists(_line, min_size=1, max_size=10))
def test_parse_counts_match_header(old: list[str], new: list[str]) -> None:
    diff = make_diff("x/y", "".join(old).encode(), "".join(new).encode())
    if not diff:
        return
    (file_diff,) = parse_unified_diff(diff)
    for hunk in file_diff.hunks:
        assert len(hunk.old_lines) == hunk.old_count
        assert len(hunk.new_lines) == hunk.new_count
