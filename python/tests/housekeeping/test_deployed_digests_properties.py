"""What cache gc keeps as deployed (``housekeeping.cache_gc.deployed_from_json``): the
sha256 digests a ``digests.json`` or deployment record names under ``manifest``,
``config``, ``manifest_digest`` or ``config_digest``, across all the files given; one of
these keys holding anything but a full digest (or null, as a digests.json without a
manifest writes it) is an ``InputError`` naming the file, the JSON path and what was
expected, never a mistyped digest kept as if deployed; a document naming none, one that is
no JSON object, or a path that is no regular file is an ``InputError`` naming the file,
never a traceback or a blocked read."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from sparkflake.core.digest import is_digest
from sparkflake.core.errors import InputError
from sparkflake.housekeeping.cache_gc import deployed_from_json

pytestmark = pytest.mark.housekeeping

_KEYS = ("manifest", "config", "manifest_digest", "config_digest")
_digests = st.binary(max_size=4).map(lambda data: "sha256:" + hashlib.sha256(data).hexdigest())
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=6)
# text that looks like a digest and is none: cut short, upper case, no prefix, any tail
_near_digests = st.one_of(
    st.text(max_size=70).map(lambda text: "sha256:" + text),
    _digests.map(str.upper),
    _digests.map(lambda digest: digest[:-1]),
    _digests.map(lambda digest: digest.removeprefix("sha256:")),
    _digests.map(lambda digest: digest + "0"),
    _digests.map(lambda digest: "sha512:" + digest[7:]),
)
_records = st.dictionaries(st.sampled_from([*_KEYS, "layers", "tag"]), _digests | _near_digests | _json, max_size=5)


@given(st.lists(_records, min_size=1, max_size=4))
def test_the_named_digests_of_every_file_are_kept(tmp_path_factory, records) -> None:
    root = tmp_path_factory.mktemp("records")
    paths = []
    for number, record in enumerate(records):
        paths.append(root / f"{number}.json")
        paths[-1].write_text(json.dumps(record), encoding="utf-8")
    for path, record in zip(paths, records, strict=True):
        wrong = [key for key in _KEYS if record.get(key) is not None and not is_digest(record[key])]
        if wrong:
            with pytest.raises(InputError) as refused:
                deployed_from_json(paths)
            assert str(refused.value) == (f"{path}: $.{wrong[0]}: expected sha256:<64 lowercase hex digits> or null, "
                                          f"got {record[wrong[0]]!r}")
            return
        if not any(record.get(key) is not None for key in _KEYS):
            with pytest.raises(InputError, match=f"^{re.escape(str(path))}: names no image: expected "):
                deployed_from_json(paths)
            return
    assert deployed_from_json(paths) == {record[key] for record in records for key in _KEYS
                                         if record.get(key) is not None}


@example(value="sha256:", key="manifest", with_good=True)
@example(value="sha256:" + "A" * 64, key="config", with_good=False)
@given(_near_digests, st.sampled_from(_KEYS), st.booleans())
def test_a_mistyped_digest_is_refused_naming_the_file_and_key(tmp_path_factory, value, key, with_good) -> None:
    """Kept silently, a mistyped digest would protect no image and let gc remove the
    deployed one's blobs; ``--keep-image`` refuses the same text."""
    assume(not is_digest(value))
    path = tmp_path_factory.mktemp("r") / "digests.json"
    good = "sha256:" + "0" * 64
    others = [other for other in _KEYS if other != key]
    path.write_text(json.dumps({key: value, **({others[0]: good} if with_good else {})}), encoding="utf-8")
    with pytest.raises(InputError) as refused:
        deployed_from_json([path])
    assert str(refused.value) == f"{path}: $.{key}: expected sha256:<64 lowercase hex digits> or null, got {value!r}"


def test_a_null_digest_is_no_image_named(tmp_path) -> None:
    """A digests.json of an image without a manifest writes ``"manifest": null``."""
    config = "sha256:" + "1" * 64
    path = tmp_path / "digests.json"
    path.write_text(json.dumps({"manifest": None, "index": None, "config": config}), encoding="utf-8")
    assert deployed_from_json([path]) == {config}
    path.write_text(json.dumps({"manifest": None, "config": None}), encoding="utf-8")
    with pytest.raises(InputError, match=f"^{re.escape(str(path))}: names no image: expected "):
        deployed_from_json([path])


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
