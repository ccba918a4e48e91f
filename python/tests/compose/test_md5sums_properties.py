"""dpkg's md5sums as ``compose.debian_base.parse_md5sums`` reads them: ``<md5>  <path>\\n``
lines, split at ``\\n`` only. A path holding any other character (``\\r``, ``\\x0b``,
``\\x0c``, ``\\x1c``-``\\x1e``, U+0085, U+2028, U+2029, which ``str.splitlines`` also breaks
at) keeps its md5, so the member it names is checked."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.compose.debian_base import parse_md5sums

pytestmark = pytest.mark.compose

_paths = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x00"), min_size=1, max_size=12).map(
    lambda name: f"usr/share/{name}"
)


@given(st.dictionaries(_paths, st.binary(max_size=10), max_size=5))
def test_md5sums_read_back_for_any_path_without_newline(files: dict[str, bytes]) -> None:
    sums = {path: hashlib.md5(content).hexdigest() for path, content in files.items()}  # noqa: S324 (dpkg's format)
    assert parse_md5sums("".join(f"{digest}  {path}\n" for path, digest in sums.items())) == sums


@pytest.mark.parametrize("breaking", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_a_path_holding_another_line_break_keeps_its_md5(breaking: str) -> None:
    digest = "0123456789abcdef0123456789abcdef"
    text = f"{digest}  usr/share/a{breaking}b\n{digest.upper()}  ./usr/share/c\n"
    assert parse_md5sums(text) == {f"usr/share/a{breaking}b": digest, "usr/share/c": digest.upper()}
