"""A rank's kept deployments (``service.rank_state.commit_rank`` writes, ``kept_pointer``
reads): after any sequence of commits ``current.json`` names the last deployment and
``previous.json`` the last other one before it; a pointer file of another shape, no JSON,
or no regular file is an ``InputError`` naming it, never a traceback or a blocked read."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.service.rank_state import KEPT_SCHEMA, commit_rank, kept_pointer

pytestmark = pytest.mark.service

_deployments = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True)


@given(st.lists(_deployments, min_size=1, max_size=6))
def test_current_and_previous_follow_the_commits(tmp_path_factory, commits) -> None:
    state = tmp_path_factory.mktemp("state")
    previous = None
    for number, deployment in enumerate(commits):
        reply = commit_rank(str(state), deployment)
        if number and commits[number - 1] != deployment:
            previous = commits[number - 1]
        assert reply == {"status": "ok", "current": deployment,
                         "previous": commits[number - 1] if number and commits[number - 1] != deployment else None}
    assert kept_pointer(state / "current.json") == commits[-1]
    assert kept_pointer(state / "previous.json") == previous


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=8)


@given(st.one_of(
    _json.map(lambda value: json.dumps(value).encode()),
    st.builds(lambda schema, deployment: json.dumps({"schema": schema, "deployment": deployment}).encode(),
              st.just(KEPT_SCHEMA) | st.text(max_size=10), _json),
    st.binary(max_size=40),
), st.sampled_from(["file", "fifo", "directory"]))
def test_any_other_pointer_is_refused_naming_it(tmp_path_factory, raw, kind) -> None:
    path = tmp_path_factory.mktemp("state") / "current.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(raw)
    try:
        pointer = kept_pointer(path)
    except InputError as refused:
        assert str(path) in str(refused)
        return
    document = json.loads(raw)
    assert kind == "file" and document["schema"] == KEPT_SCHEMA and pointer == document["deployment"]
    assert isinstance(pointer, str)
