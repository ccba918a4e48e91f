"""A checkpoint's safetensors index (``launch.served_model._weight_map``): absent, it is
None; an object whose ``weight_map`` maps tensor names to non-empty shard names reads as
``json.loads`` reads it; any other document, bytes that are no JSON, or an index that is
no regular file (a directory, a FIFO, a symlink out of the checkpoint) is an
``InputError`` naming the index, never a traceback or a blocked read."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.served_model import INDEX_FILE, _weight_map

pytestmark = pytest.mark.launch

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=8)
_maps = st.dictionaries(st.text(min_size=1, max_size=20), st.from_regex(r"model-0000[1-9]-of-00009\.safetensors", fullmatch=True),
                        max_size=6)


@given(_maps, st.dictionaries(st.sampled_from(["metadata", "x"]), _json, max_size=2))
def test_an_index_reads_as_json_loads_reads_it(tmp_path_factory, weight_map, others) -> None:
    ckpt = tmp_path_factory.mktemp("ckpt")
    assert _weight_map(str(ckpt)) is None
    (ckpt / INDEX_FILE).write_text(json.dumps({**others, "weight_map": weight_map}), encoding="utf-8")
    assert _weight_map(str(ckpt)) == weight_map


@given(st.one_of(
    _json.map(lambda value: json.dumps(value).encode()),
    _json.map(lambda value: json.dumps({"weight_map": value}).encode()),
    st.dictionaries(st.text(max_size=5), _json, max_size=3).map(lambda value: json.dumps({"weight_map": value}).encode()),
    st.binary(max_size=40),
))
def test_any_other_index_is_refused_naming_it(tmp_path_factory, raw) -> None:
    ckpt = tmp_path_factory.mktemp("ckpt")
    (ckpt / INDEX_FILE).write_bytes(raw)
    try:
        weight_map = _weight_map(str(ckpt))
    except InputError as refused:
        assert str(refused).startswith(f"{ckpt / INDEX_FILE}: ")
        return
    document = json.loads(raw)
    assert weight_map == document["weight_map"]
    assert all(isinstance(shard, str) and shard for shard in weight_map.values())


@given(st.sampled_from(["directory", "fifo", "link-out", "dangling"]))
def test_an_index_that_is_no_regular_file_is_refused_naming_it(tmp_path_factory, kind) -> None:
    box = tmp_path_factory.mktemp("box")
    (box / "outside.json").write_text('{"weight_map": {}}', encoding="utf-8")
    ckpt = box / "ckpt"
    ckpt.mkdir()
    index = ckpt / INDEX_FILE
    if kind == "directory":
        index.mkdir()
    elif kind == "fifo":
        os.mkfifo(index)
    elif kind == "link-out":
        index.symlink_to("../outside.json")
    else:
        index.symlink_to("nowhere.json")
    with pytest.raises(InputError, match=INDEX_FILE.replace(".", r"\.")):
        _weight_map(str(ckpt))
