"""OCI 1.1 artifacts that refer to an image: made, written into a layout's blobs, read back
with every blob checked; a damaged or foreign one refused by name; the referrers fallback
index lists each referrer once."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.digest import sha256_digest
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci.artifact import (
    EMPTY_CONFIG,
    fallback_tag,
    read_referring_artifact,
    referrers_index,
    referring_artifact,
)
from sparkflake.oci.layout import add_artifact_blobs

_HEX = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


def _layout(root: Path) -> Path:
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    return root


@given(blob=st.binary(max_size=500), subject=_HEX, size=st.integers(min_value=1, max_value=10**6),
       annotations=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10), max_size=3))
def test_artifact_round_trip_through_a_layout(blob: bytes, subject: str, size: int, annotations: dict) -> None:
    artifact = referring_artifact(artifact_type="application/spdx+json", blob=blob, title="sbom.spdx.json",
                                  subject_digest=f"sha256:{subject}", subject_size=size, annotations=annotations)
    document = json.loads(artifact.manifest_bytes)
    assert document["subject"] == {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                   "digest": f"sha256:{subject}", "size": size}
    assert document["config"]["digest"] == sha256_digest(EMPTY_CONFIG) and artifact.blob_digest == sha256_digest(blob)
    with tempfile.TemporaryDirectory() as scratch:
        layout = _layout(Path(scratch))
        add_artifact_blobs(layout, artifact)
        again = read_referring_artifact(layout, artifact.manifest_digest, f"sha256:{subject}")
    assert again == artifact


def test_damaged_or_foreign_artifacts_are_refused(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    subject = f"sha256:{'a' * 64}"
    artifact = referring_artifact(artifact_type="application/spdx+json", blob=b"{}", title="t",
                                  subject_digest=subject, subject_size=9)
    add_artifact_blobs(layout, artifact)
    with pytest.raises(CheckFailed) as refused:
        read_referring_artifact(layout, artifact.manifest_digest, f"sha256:{'b' * 64}")
    assert refused.value.check_id == "artifact.subject"
    blob = layout / "blobs" / "sha256" / artifact.blob_digest.removeprefix("sha256:")
    blob.write_bytes(b"{ }")
    with pytest.raises(CheckFailed) as refused:
        read_referring_artifact(layout, artifact.manifest_digest, subject)
    assert refused.value.check_id == "layout.blob-digest" and str(blob) in refused.value.message
    with pytest.raises(InputError, match="cannot read"):
        read_referring_artifact(layout, f"sha256:{'c' * 64}", subject)


@given(st.lists(st.sampled_from([f"sha256:{c * 64}" for c in "abc"]), max_size=8))
def test_fallback_index_lists_each_referrer_once(digests: list[str]) -> None:
    index = json.loads(referrers_index([{"digest": digest, "artifactType": "x"} for digest in digests]))
    assert [entry["digest"] for entry in index["manifests"]] == list(dict.fromkeys(digests))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"


def test_fallback_tag_schema() -> None:
    assert fallback_tag(f"sha256:{'0' * 64}") == f"sha256-{'0' * 64}"
    with pytest.raises(InputError):
        fallback_tag("sha512:00")
