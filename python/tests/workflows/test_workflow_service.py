"""The service workflow (workflows/service.py): what the operator names turned into the
service stage's request, every bad value refused before a rank is reached. The service
itself over four ranks: tests/service/test_service_netns.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkflake.core.errors import InputError
from sparkflake.workflows.service import ServiceCommandRequest, service_request, service_status

CONFIG = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "d" * 64


def test_a_builds_digests_name_the_image_and_manifest(tmp_path: Path) -> None:
    digests = tmp_path / "digests.json"
    digests.write_text(json.dumps({"manifest": MANIFEST, "config": CONFIG}))
    request = service_request(ServiceCommandRequest(site="site.toml", digests_file=str(digests), ready_timeout=30,
                                                    replace=True))
    assert (request.site_path, request.image, request.manifest) == ("site.toml", CONFIG, MANIFEST)
    assert request.ready_timeout == 30 and request.replace and request.sign_key is None
    given = service_request(ServiceCommandRequest(site="site.toml", image=CONFIG))
    assert (given.image, given.manifest, given.ready_timeout, given.replace) == (CONFIG, None, None, False)


@pytest.mark.parametrize(("fields", "message"), [
    ({"digests_file": "digests.json", "image": CONFIG}, "--digests replaces --image and --manifest"),
    ({"digests_file": "digests.json", "manifest": MANIFEST}, "--digests replaces --image and --manifest"),
    ({"digests_file": "absent/digests.json"}, "--digests absent/digests.json: no such file"),
    ({"image": "sha256:C"}, "--image 'sha256:C': expected sha256:<64 lowercase hex>"),
    ({"manifest": "latest"}, "--manifest 'latest': expected sha256:<64 lowercase hex>"),
    ({"ready_timeout": 0}, "--ready-timeout 0: expected a positive number of seconds, at most 2592000"),
    ({"ready_timeout": -5}, "--ready-timeout -5: expected a positive number of seconds, at most 2592000"),
    ({"ready_timeout": 30 * 86400 + 1}, "--ready-timeout 2592001: expected a positive number of seconds, at most 2592000"),
    ({"ready_timeout": 10**309},  # overflowed time.monotonic() + it
     "--ready-timeout an integer of 310 digits: expected a positive number of seconds, at most 2592000"),
])
def test_bad_values_are_refused_naming_the_option(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InputError) as raised:
        service_request(ServiceCommandRequest(site="site.toml", **fields))
    assert raised.value.message == message and raised.value.exit_code == 2


def test_a_bad_value_is_refused_before_the_site_is_read(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--image 'x': expected"):
        service_status(ServiceCommandRequest(site=str(tmp_path / "absent.toml"), image="x"))
    with pytest.raises(InputError) as raised:
        service_status(ServiceCommandRequest(site=str(tmp_path / "absent.toml")))
    assert "absent.toml" in raised.value.message
