"""The publish workflow (workflows/publish.py): what it refuses before it connects, the
push of a bare layout (no receipt beside it: no SBOM), and its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.oci import RegistryServer, registry_server  # noqa: F401
from fixtures.one_layer_image import write_one_layer_image

from sparkflake.core.errors import InputError
from sparkflake.workflows.publish import PublishRequest, publish


@pytest.mark.parametrize(("target", "out", "message"), [
    ("127.0.0.1:1/repo@sha256:" + "0" * 64, "out", "publish to a tag, not a digest (the digest is the result)"),
    ("127.0.0.1:1/repo:tag", "absent", "absent: neither OUT/oci/index.json nor OUT/index.json exists"),
])
def test_refused_before_any_connection(tmp_path: Path, target: str, out: str, message: str) -> None:
    (tmp_path / "out").mkdir()
    record = tmp_path / "publish.json"
    with pytest.raises(InputError) as raised:
        publish(PublishRequest(out=tmp_path / out, target=target, insecure=True, record_file=record))
    assert raised.value.message.endswith(message) and raised.value.exit_code == 2
    assert not record.exists()


def test_a_bare_layout_is_pushed_and_recorded_without_an_sbom(
    tmp_path: Path, registry_server: RegistryServer,  # noqa: F811
) -> None:
    out, manifest = write_one_layer_image(tmp_path, {"file": b"published\n"})
    layout = out / "oci"
    record = tmp_path / "records" / "publish.json"
    record.parent.mkdir()
    reference = f"{registry_server.host}/sparkflake/bare:one"
    result = publish(PublishRequest(out=layout, target=reference, insecure=True, record_file=record))
    assert result.pushed.manifest_digest == manifest and result.sbom is None
    assert result.pushed.pinned == f"{registry_server.host}/sparkflake/bare@{manifest}"
    assert json.loads(record.read_bytes()) == result.record and "sbom" not in result.record
    again = publish(PublishRequest(out=layout, target=reference, insecure=True, record_file=record))
    assert again.pushed.blobs_pushed == () and set(again.pushed.blobs_present) == set(result.pushed.blobs_pushed)
