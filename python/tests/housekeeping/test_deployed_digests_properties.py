"""What cache gc keeps as deployed (``housekeeping.cache_gc.deployed_from_json``): the
sha256 digests a ``digests.json`` or deployment record names under ``manifest``,
``config``, ``manifest_digest`` or ``config_digest``, across all the files given; a
document naming none, one that is no JSON object, or a path that is no regular file is an
``InputError`` naming the file, never a traceback or a blocked read."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.housekeeping.cache_gc import deployed_from_json

pytestmark = pytest.mark.housekeeping

_KEYS = ("manifest", "config", "manifest_digest", "config_digest")
_digests = st.binary(max_size=4).map(lambda data: "sha256:" + hashlib.sha256(data).hexdigest())
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=6)
_records = st.dictionaries(st.sampled_from([*_KEYS, "layers", "tag"]), _digests | _json, max_size=5)


@given(st.lists(_records, min_size=1, max_size=4))
def test_the_named_digests_of_every_file_are_kept(tmp_path_factory, records) -> None:
    root = tmp_path_factory.mktemp("records")
    paths = []
    for number, record in enumerate(records):
        paths.append(root / f"{number}.json")
        paths[-1].write_text(json.dumps(record), encoding="utf-8")
    named = [{value for key, value in record.items() if key in _KEYS and isinstance(value, str)
              and value.startswith("sha256:")} for record in records]
    if not all(named):
        first = named.index(set())
        with pytest.raises(InputError, match=f"^{paths[first]}: names no image: expected "):
            deployed_from_json(paths)
        return
    assert deployed_from_json(paths) == set().union(*named)


@given(st.one_of(_json.filter(lambda value: not isinstance(value, dict)).map(lambda value: json.dumps(value).encode()),
                 st.binary(max_size=30).filter(lambda raw: not raw.strip().startswith(b"{"))),
       st.sampled_from(["file", "fifo", "directory", "dangling"]))
def test_anything_else_is_refused_naming_the_file(tmp_path_factory, raw, kind) -> None:
    path = tmp_path_factory.mktemp("records") / "digests.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to("nowhere.json")
    else:
        path.write_bytes(raw)
    with pytest.raises(InputError, match=f"^{path}: "):
        deployed_from_json([path])
