"""`audit --sbom FILE` reads whatever the file holds (``audit.supply_chain.sbom_checks``):
every reading is a named check, never a traceback. A hunt found ``packages`` or a package's
``checksums`` that are a number raising TypeError out of the audit."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparkflake.audit.report import AuditReport
from sparkflake.audit.supply_chain import sbom_checks
from sparkflake.compose.sbom import IMAGE_ID, SPDX_VERSION

MANIFEST = "sha256:" + "a" * 64
GOOD = {"spdxVersion": SPDX_VERSION, "packages": [
    {"SPDXID": IMAGE_ID, "checksums": [{"algorithm": "SHA256", "checksumValue": "a" * 64}]},
    {"SPDXID": "SPDXRef-input", "versionInfo": "1", "checksums": [{"algorithm": "SHA256", "checksumValue": "b" * 64}]},
]}
LOCK = {"input": "sha256:" + "b" * 64}
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _checks(tmp_path, document) -> dict[str, str]:
    path = tmp_path / "sbom.spdx.json"
    path.write_text(json.dumps(document))
    report = AuditReport(target="t", source_kind="oci", manifest_digest=MANIFEST)
    sbom_checks(report, str(path), receipt=None, lock_digests=LOCK)
    return {check.id: check.status for check in report.checks}


def test_a_good_sbom_passes_its_checks(tmp_path):
    assert _checks(tmp_path, GOOD) == {"sbom.document": "pass", "sbom.subject": "pass", "sbom.inputs": "pass"}


@pytest.mark.parametrize(("change", "failed"), [
    (lambda d: d.update(packages=1), "sbom.document"),
    (lambda d: d["packages"][0].update(checksums=1), "sbom.subject"),
    (lambda d: d["packages"][1].update(checksums=True), "sbom.inputs"),
])
def test_an_array_that_is_a_number_fails_its_check(tmp_path, change, failed):
    document = copy.deepcopy(GOOD)
    change(document)
    assert _checks(tmp_path, document)[failed] == "fail"


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from([("packages",), ("packages", 0), ("packages", 0, "checksums"), ("packages", 0, "checksums", 0),
                             ("packages", 1, "checksums"), ("packages", 1, "versionInfo"), ("spdxVersion",)]),
       value=VALUES)
@example(path=("packages",), value=1)
def test_any_value_anywhere_gives_named_checks(tmp_path, path, value):
    document = copy.deepcopy(GOOD)
    holder = document
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    checks = _checks(tmp_path, document)
    assert "sbom.document" in checks and set(checks.values()) <= {"pass", "fail", "error", "skip"}
