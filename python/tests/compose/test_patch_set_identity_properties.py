"""The identity of a patch set (``compose.patches.PatchSet.patch_set_sha256``): the sha256
(against hashlib) of the canonical JSON (sorted keys, compact, UTF-8, as ``json`` writes
it) of the set's names, diff files, diff hashes and anchors; any change to one of them or
to their order changes it, the set's directory and the parsed hunks do not; and a set
loaded from disk by ``load_patch_set`` is identified by its diff bytes (their sha256)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sparkflake.compose.patches import PATCH_SET_FORMAT, FileAnchor, Patch, PatchSet, load_patch_set

pytestmark = pytest.mark.compose

_hex = st.binary(min_size=1, max_size=8).map(lambda data: hashlib.sha256(data).hexdigest())
_anchor = st.builds(FileAnchor, st.from_regex(r"[a-zé_]{1,6}(/[a-z_.]{1,6}){0,2}", fullmatch=True),
                    st.just("") | _hex, st.just("") | _hex)
_patch = st.builds(Patch, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,8}", fullmatch=True), st.text(max_size=10),
                   st.from_regex(r"[0-9]{4}-[a-z]{1,6}\.diff", fullmatch=True), _hex,
                   st.lists(_anchor, min_size=1, max_size=3).map(tuple), st.just(()))
_sets = st.lists(_patch, max_size=3, unique_by=lambda patch: patch.name).map(tuple)


def _reference(patches: tuple[Patch, ...]) -> str:
    document = {"format": PATCH_SET_FORMAT, "patches": [
        {"name": p.name, "diff": p.diff_file, "diff_sha256": p.diff_sha256,
         "files": [{"path": a.path, "pre": a.pre_sha256, "post": a.post_sha256} for a in p.anchors]}
        for p in patches]}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@given(_sets, st.sampled_from(["overlays/vllm", "/elsewhere", "."]), st.text(max_size=10))
def test_the_identity_is_the_sha256_of_the_canonical_json(tmp_path_factory, patches, directory, summary) -> None:
    identity = PatchSet(tmp_path_factory.getbasetemp() / directory, patches).patch_set_sha256
    assert identity == _reference(patches)
    # neither where the set lies nor a summary (no part of what is applied) changes it
    moved = tuple(dataclasses.replace(p, summary=summary) for p in patches)
    assert PatchSet(tmp_path_factory.getbasetemp(), moved).patch_set_sha256 == identity


@given(_sets.filter(bool), st.data())
def test_any_change_to_what_is_applied_changes_the_identity(patches, data) -> None:
    before = PatchSet(None, patches).patch_set_sha256  # type: ignore[arg-type]  # the directory is no part of it
    position = data.draw(st.integers(0, len(patches) - 1))
    patch = patches[position]
    what = data.draw(st.sampled_from(["name", "diff_file", "diff_sha256", "anchor", "order", "drop"]))
    changed = list(patches)
    if what == "name":
        changed[position] = dataclasses.replace(patch, name=patch.name + "x")
    elif what == "diff_file":
        changed[position] = dataclasses.replace(patch, diff_file="x" + patch.diff_file)
    elif what == "diff_sha256":
        changed[position] = dataclasses.replace(patch, diff_sha256=hashlib.sha256(patch.diff_sha256.encode()).hexdigest())
    elif what == "anchor":
        index = data.draw(st.integers(0, len(patch.anchors) - 1))
        anchor = patch.anchors[index]
        field = data.draw(st.sampled_from(["path", "pre_sha256", "post_sha256"]))
        new = dataclasses.replace(anchor, **{field: getattr(anchor, field) + "0"})
        changed[position] = dataclasses.replace(patch, anchors=(*patch.anchors[:index], new, *patch.anchors[index + 1:]))
    elif what == "order":
        assume(len(patches) > 1)
        changed = changed[1:] + changed[:1]
    else:
        del changed[position]
    assert PatchSet(None, tuple(changed)).patch_set_sha256 != before  # type: ignore[arg-type]


_texts = st.lists(st.from_regex(r"[a-z ]{0,12}\n", fullmatch=True), min_size=1, max_size=6).map(lambda lines: "".join(lines).encode())


@given(_texts, _texts)
def test_a_loaded_set_is_identified_by_its_diff_bytes(tmp_path_factory, old, new) -> None:
    import difflib

    assume(old != new)
    root = tmp_path_factory.mktemp("set")
    diff = "".join(difflib.unified_diff(old.decode().splitlines(True), new.decode().splitlines(True),
                                        "a/p/f.txt", "b/p/f.txt")).encode()
    (root / "0001-edit.diff").write_bytes(diff)
    pre, post = hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest()
    (root / "patches.toml").write_text(
        f'format = {PATCH_SET_FORMAT}\n[[patches]]\nname = "edit"\ndiff = "0001-edit.diff"\n'
        f'files = [{{ path = "p/f.txt", pre = "{pre}", post = "{post}" }}]\n', encoding="utf-8")
    patch_set = load_patch_set(root)
    anchors = (FileAnchor("p/f.txt", pre, post),)
    expected = (Patch("edit", "", "0001-edit.diff", hashlib.sha256(diff).hexdigest(), anchors, ()),)
    assert patch_set.patch_set_sha256 == _reference(expected)
