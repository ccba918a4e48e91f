"""Files sparkflake writes into an operator's directory carry the sha256 of their body in
their first line (``core.generated_files``): whatever the body, the marked text is
recognised as unchanged, and any edit, or a file without the line, is not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.core.generated_files import (
    check_replaceable_file,
    marked_text,
    unchanged_since_written,
)

pytestmark = pytest.mark.nix_sandbox


@given(body=st.text(), comment=st.sampled_from(["#", "//"]))
def test_a_marked_text_is_unchanged_since_written(body, comment):
    assert unchanged_since_written(marked_text(body, comment).encode())


@given(body=st.text(), edit=st.text(min_size=1), at=st.integers(min_value=0))
def test_any_edit_of_the_body_is_seen(body, edit, at):
    marked = marked_text(body)
    header, body_start = marked.split("\n", 1)[0], len(marked.split("\n", 1)[0]) + 1
    position = body_start + at % (len(marked) - body_start + 1)
    edited = marked[:position] + edit + marked[position:]
    assert not unchanged_since_written(edited.encode())
    assert not unchanged_since_written(body.encode())  # without the line: the operator's
    assert header.startswith("# sparkflake-generated sha256:")


def test_replaceable_only_when_absent_unchanged_or_forced(tmp_path):
    path = tmp_path / "runtime.env"
    check_replaceable_file(path)
    path.write_text(marked_text("A=1\n"))
    check_replaceable_file(path)
    path.write_text(marked_text("A=1\n") + "B=2\n")
    with pytest.raises(InputError, match="runtime.env: exists and is not a file sparkflake wrote"):
        check_replaceable_file(path)
    check_replaceable_file(path, force=True)
