"""``runtime.env_evidence.find_names`` (which files of an unpacked image name an environment
variable, by GNU grep) against a pure-Python model of what it promises: each name found as
a whole word (bytes of letters, digits and ``_`` around it end there) in a regular file
under opt, usr/lib or usr/local/lib of the image (symlinks not followed), mapped to the
smallest such ``/``-rooted image path; names found nowhere are absent. A file name may hold
a newline (grep's records are read whole: read line by line, such a name raised ValueError,
finding H4, /work/notes/hypothesis-findings-3.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkflake.runtime.env_evidence import SEARCHED, find_names

pytestmark = pytest.mark.runtime


_WORD = re.compile(rb"[A-Za-z0-9_]+")
_env_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True)
_places = st.sampled_from([*SEARCHED, "usr/share", "etc", "opt/a", "usr/lib/x/y", "usr/local/lib/z"])
_file_names = st.from_regex(r"[a-z0-9._ \n-]{1,8}", fullmatch=True).filter(lambda name: name not in (".", ".."))


@st.composite
def _trees(draw):
    names = draw(st.lists(_env_names, min_size=1, max_size=4, unique=True))
    files = {}
    for _ in range(draw(st.integers(0, 6))):
        path = f"{draw(_places)}/{draw(_file_names)}"
        words = draw(st.lists(st.sampled_from(names) | _env_names | st.sampled_from(["x", " ", "\n", "\0", "=", "-"]),
                              max_size=8))
        glue = draw(st.sampled_from(["", " ", "\n", "\0", "_", "a"]))
        files[path] = glue.join(words).encode()
    return names, files


def _model(root: Path, names: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for top in SEARCHED:
        for directory, subdirectories, files in os.walk(root / top):
            subdirectories[:] = [d for d in subdirectories if not (Path(directory) / d).is_symlink()]
            for file_name in files:
                path = Path(directory) / file_name
                if path.is_symlink() or not path.is_file():
                    continue
                words = {match.group().decode() for match in _WORD.finditer(path.read_bytes())}
                shown = "/" + str(path.relative_to(root))
                for name in set(names) & words:
                    found[name] = min(found.get(name, shown), shown)
    return found


@settings(max_examples=30)
@given(_trees(), st.booleans())
def test_names_are_found_where_grep_finds_them_as_words(tmp_path_factory, tree, linked) -> None:
    names, files = tree
    root = tmp_path_factory.mktemp("image")
    for relative, content in files.items():
        path = root / relative
        if path.parent.is_file() or path.is_dir():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    if linked:  # a symlink in the image is not followed: its target is no file of the image
        (root / "outside").mkdir(exist_ok=True)
        (root / "outside/f").write_bytes(" ".join(names).encode())
        (root / "opt").mkdir(exist_ok=True)
        (root / "opt/link").symlink_to(root / "outside/f")
        (root / "opt/dirlink").symlink_to(root / "outside")
    with mock.patch.dict(os.environ, {"LC_ALL": "C"}):
        found = find_names(root, names + names[:1])
    assert found == _model(root, names)
    assert set(found) <= set(names) and all(path.startswith("/") for path in found.values())


@example("a\nb")  # H4: ValueError before
@example("\nNCCL_IB_HCA\n")
@given(st.from_regex(r"[a-z]{0,3}\n[a-z\n]{0,4}", fullmatch=True).filter(lambda name: name.strip("\n") not in ("", ".", "..")))
def test_a_file_name_with_a_newline_is_searched_like_any_other(tmp_path_factory, name) -> None:
    root = tmp_path_factory.mktemp("image")
    (root / "opt").mkdir()
    (root / "opt" / name).write_bytes(b"x NCCL_IB_HCA y\n")
    (root / "opt" / "~").write_bytes(b"NCCL_IB_HCA")  # a record after it (a larger name: not the one shown)
    assert find_names(root, ["NCCL_IB_HCA"]) == {"NCCL_IB_HCA": f"/opt/{name}"}
