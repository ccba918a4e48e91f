"""`audit --expect-file FILE`: every digest and layer field of the file is checked where it
stands, and a bad one is bad input (exit 2) naming the file and its JSON path. Before, a
value was made into an ``--expect`` text: ``"manifest": true`` was reported as the operator's
``--expect 'True@manifest'``, and a malformed layer digest as a layer that differs (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake import audit
from sparkflake.cli import main
from sparkflake.core.errors import InputError

DIGEST = "sha256:" + "1" * 64
GOOD = {"manifest": DIGEST, "config": DIGEST, "chain_id": DIGEST, "index": DIGEST,
        "layers": [{"digest": DIGEST, "diff_id": DIGEST, "size": 142}]}
FORM = 'expected a string "sha256:" and 64 lowercase hex digits'


def _refusal(tmp_path: Path, document: object) -> InputError:
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as refused:
        audit.expectations_from(expect_file=str(path))
    assert refused.value.check_id == "document.parse"
    return refused.value


def _with(place: tuple[str | int, ...], value: object) -> dict:
    document = json.loads(json.dumps(GOOD))
    *parents, last = place
    node = document
    for step in parents:
        node = node[step]
    node[last] = value
    return document


@pytest.mark.parametrize(("place", "value", "problem"), [
    (("manifest",), True, f"{FORM}, got boolean true"),
    (("config",), 1, f"{FORM}, got integer 1"),
    (("chain_id",), None, f"{FORM}, got null"),
    (("index",), ["sha256:" + "1" * 64], f"{FORM}, got an array"),
    (("manifest",), "sha256:" + "A" * 64, '''expected "sha256:" and 64 lowercase hex digits, got "sha256:''' + "A" * 64 + '"'),
    (("layers", 0, "digest"), "x", 'expected "sha256:" and 64 lowercase hex digits, got "x"'),
    (("layers", 0, "diff_id"), {"sha256": "1"}, f"{FORM}, got a table"),
    (("layers", 0, "size"), "142", 'expected a non-negative integer, got "142"'),
    (("layers", 0, "size"), -1, "expected a non-negative integer, got integer -1"),
    (("layers", 0, "size"), 1.5, "expected a non-negative integer, got float 1.5"),
])
def test_a_bad_field_is_refused_naming_the_file_and_its_json_path(tmp_path, place, value, problem):
    json_path = "$" + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in place)
    refused = _refusal(tmp_path, _with(place, value))
    assert refused.message == f"{tmp_path / 'expected.json'}: {json_path}: {problem}"


def test_a_good_file_gives_its_digests_and_layers(tmp_path):
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(GOOD))
    expectations = audit.expectations_from(expect_file=str(path))
    assert set(expectations.digests) == {("manifest", DIGEST), ("config", DIGEST), ("chain-id", DIGEST)}
    assert expectations.index_if_present == DIGEST and expectations.expected_layers == GOOD["layers"]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=80) | st.sampled_from([DIGEST, "sha256:" + "f" * 64]),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_PLACES = [("manifest",), ("config",), ("chain_id",), ("index",), ("layers",), ("layers", 0),
           ("layers", 0, "digest"), ("layers", 0, "diff_id"), ("layers", 0, "size")]


@settings(max_examples=300, deadline=None)
@given(place=st.sampled_from(_PLACES), value=_JSON)
def test_any_value_anywhere_is_taken_or_refused_with_its_path(tmp_path_factory, place, value):
    """Whatever a field holds, the file is either taken or refused as bad input naming the
    file and the JSON path of the field, of what holds it, or of a part of it; never another
    exception."""
    directory = tmp_path_factory.mktemp("expect")
    path = directory / "expected.json"
    path.write_text(json.dumps(_with(place, value)))
    try:
        audit.expectations_from(expect_file=str(path))
    except InputError as refused:
        assert refused.check_id == "document.parse"
        assert refused.message.startswith(f"{path}: $"), refused.message
        shown = refused.message.removeprefix(f"{path}: ").partition(":")[0]
        changed = "$" + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in place)
        assert changed.startswith(shown) or shown.startswith(changed), refused.message  # the field, or in it


def test_a_malformed_layer_digest_is_bad_input_not_a_mismatch(tmp_path, capsys):
    spec_dir = tmp_path / "spec"
    (spec_dir / "tree").mkdir(parents=True)
    (spec_dir / "tree" / "hello").write_text("hi\n")
    (spec_dir / "spec.json").write_text(json.dumps({"layers": [{"tree": "tree"}]}))
    out = tmp_path / "out"
    assert main(["image", "build", str(spec_dir / "spec.json"), "-o", str(out), "--cache", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    digests = json.loads((out / "digests.json").read_text())
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps(digests))
    assert main(["audit", f"oci:{out / 'oci'}", "--expect-file", str(expected)]) == 0
    capsys.readouterr()
    digests["layers"][0]["digest"] = "x"
    expected.write_text(json.dumps(digests))
    assert main(["audit", f"oci:{out / 'oci'}", "--expect-file", str(expected)]) == 2
    err = capsys.readouterr().err
    assert f"{expected}: $.layers[0].digest: expected" in err and "Traceback" not in err
    digests["layers"][0]["digest"] = "sha256:" + "0" * 64  # well formed, another layer: a mismatch
    expected.write_text(json.dumps(digests))
    assert main(["audit", f"oci:{out / 'oci'}", "--expect-file", str(expected)]) == 1
