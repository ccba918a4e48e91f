"""`sparkflake receipt verify RECEIPT IMAGE` on a receipt or an image made by someone else:
the receipt is read once by its model (``compose.receipt.read_build_receipt``), every field
verify uses checked with its JSON path, and the manifests the image holds are checked
before they are used. Any mutation of a build's receipt, and any bytes in the image's
manifests, end in exit 0, 1 or 2 with one line, never a traceback (before, five shapes of
receipt and any manifest that was not the expected JSON raised AttributeError, TypeError,
KeyError or JSONDecodeError)."""

from __future__ import annotations

import copy
import json

import pytest
from fixtures.one_layer_image import write_one_layer_image
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparkflake.audit.receipt import ReceiptCheckFailed, verify_receipt
from sparkflake.cli import main
from sparkflake.compose import generated, receipt
from sparkflake.core.errors import CheckFailed, InputError

pytestmark = pytest.mark.audit

LABELS = {"org.sparkflake.profile": "hostile"}
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                      lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
                      max_leaves=4)


def _receipt_of(out, manifests: dict[str, bytes]) -> dict:
    """A full receipt that is right about the image in ``out`` (subject, config, layers,
    labels) and names ``manifests`` as its byproducts."""
    byproducts = [{"name": name, "digest": {"sha256": receipt.sha256_hex(content)}} for name, content in manifests.items()]
    predicate = receipt.provenance_predicate(external_parameters={}, internal_parameters={"labels": LABELS},
                                             resolved_dependencies=[], byproducts=byproducts, builder_version="0")
    in_image = receipt.in_image_statement(lower_diff_ids=[], predicate=predicate)
    digests = json.loads((out / "digests.json").read_text())
    return receipt.full_statement(in_image, image_name="localhost/hostile:1", manifest_digest=digests["manifest"],
                                  config_digest=digests["config"], layers=digests["layers"])


def _image(tmp_path, retained: bytes, overlay: bytes):
    manifests = {receipt.RETAINED_NATIVE: retained, receipt.OVERLAY: overlay}
    files = {generated.RETAINED_NATIVE_PATH.lstrip("/"): retained, generated.OVERLAY_PATH.lstrip("/"): overlay}
    out, _ = write_one_layer_image(tmp_path, files, LABELS)
    return out, _receipt_of(out, manifests)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile-receipt")
    retained = json.dumps({"files": []}).encode()
    overlay = json.dumps({"install_prefix": "/opt", "entries": []}).encode()
    out, full = _image(base, retained, overlay)
    return out, full


def _verify(tmp_path, out, document) -> tuple[int, str]:
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(document))
    try:
        receipt_report = verify_receipt(path, out / "oci")
    except (CheckFailed, InputError) as refusal:
        assert refusal.message, refusal
        return refusal.exit_code, refusal.message
    return 0, str(receipt_report.ok)


def test_a_receipt_right_about_the_image_fails_only_the_link_the_image_lacks(good, tmp_path):
    out, full = good
    (tmp_path / "receipt.json").write_text(json.dumps(full))
    with pytest.raises(ReceiptCheckFailed) as refused:
        verify_receipt(tmp_path / "receipt.json", out / "oci")
    # a one-layer test image: no in-image receipt and not a profile's labels; the rest holds
    statuses = {link.link: link.status for link in refused.value.report.links}
    assert statuses == {"subject": "passed", "config": "passed", "layers": "passed", "labels": "failed",
                        "embedded": "failed", "retained-native": "passed", "overlay": "passed"}, statuses


def _paths(document, prefix=()):
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _paths(value, (*prefix, index))


def _replaced(document, path, value):
    changed = copy.deepcopy(document)
    if not path:
        return value
    holder = changed
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return changed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), value=VALUES)
@example(data=None, value=1).via("a byproduct that is no object")
def test_any_value_anywhere_in_the_receipt_is_read_or_refused_with_its_path(good, tmp_path, data, value):
    out, full = good
    if data is None:
        document = copy.deepcopy(full)
        document["predicate"]["runDetails"]["byproducts"].insert(0, value)
    else:
        path = data.draw(st.sampled_from(list(_paths(full))))
        document = _replaced(full, path, value)
    code, message = _verify(tmp_path, out, document)
    assert code in (0, 1, 2)
    if code == 2:
        assert message.startswith(f"{tmp_path / 'receipt.json'}: "), message


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d["predicate"]["runDetails"]["byproducts"].insert(0, 1), "$.predicate.runDetails.byproducts[0]: expected an object"),
    (lambda d: d["predicate"]["runDetails"].update(byproducts={"a": 1}), "$.predicate.runDetails.byproducts: expected an array"),
    (lambda d: d["predicate"]["runDetails"]["byproducts"][0].update(digest=5), "byproducts[0].digest: expected an object"),
    (lambda d: d["predicate"]["runDetails"]["byproducts"][0].update(digest={}), "byproducts[0].digest.sha256: expected 64"),
    (lambda d: d["subject"][0].update(digest=3), "$.subject[0].digest: expected an object"),
    (lambda d: d.update(subject=[]), "$.subject: expected the image manifest digest"),
    (lambda d: d["predicate"]["buildDefinition"]["internalParameters"].update(labels=[1]), "labels: expected an object"),
])
def test_the_shapes_that_raised_a_traceback_are_refused_with_their_path(good, tmp_path, capsys, change, expected):
    out, full = good
    document = copy.deepcopy(full)
    change(document)
    (tmp_path / "receipt.json").write_text(json.dumps(document))
    assert main(["receipt", "verify", str(tmp_path / "receipt.json"), str(out / "oci")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and expected in err, err


MANIFEST_BYTES = st.one_of(st.binary(max_size=24), VALUES.map(lambda v: json.dumps(v).encode()),
                           st.fixed_dictionaries({"files": VALUES, "entries": VALUES, "install_prefix": VALUES})
                           .map(lambda v: json.dumps(v).encode()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(retained=MANIFEST_BYTES, overlay=MANIFEST_BYTES)
@example(retained=b"not json", overlay=b"[]")
@example(retained=b'{"files": [{"path": "a", "sha256": "0", "size": true}]}', overlay=b'{"entries": [], "install_prefix": 1}')
def test_the_images_own_manifests_fail_their_link_never_a_traceback(tmp_path_factory, retained, overlay):
    base = tmp_path_factory.mktemp("manifests")
    out, full = _image(base, retained, overlay)
    (base / "receipt.json").write_text(json.dumps(full))
    with pytest.raises(ReceiptCheckFailed) as refused:  # the labels link fails at least
        verify_receipt(base / "receipt.json", out / "oci")
    links = {link.link: link for link in refused.value.report.links}
    if links["retained-native"].status == "failed":  # a manifest it could not use: named
        assert links["retained-native"].detail.startswith((generated.RETAINED_NATIVE_PATH, generated.OVERLAY_PATH))
