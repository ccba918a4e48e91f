"""The fan-out workflow (workflows/fanout.py): the route a request names, refused before the
site file is read when it names none or two. The routes themselves over four ranks:
tests/distribute/test_fanout*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkflake.core.errors import InputError
from sparkflake.workflows.fanout import DistributionRequest, distribute

REGISTRY_IMAGE = "127.0.0.1:1/repo@sha256:" + "0" * 64


@pytest.mark.parametrize(("request_fields", "message"), [
    ({"from_registry": REGISTRY_IMAGE, "source": "image.tar"},
     "--from-registry replaces ARCHIVE and --sha256 (and has no --verify)"),
    ({"from_registry": REGISTRY_IMAGE, "sha256": "0" * 64},
     "--from-registry replaces ARCHIVE and --sha256 (and has no --verify)"),
    ({"from_registry": REGISTRY_IMAGE, "verify_only": True},
     "--from-registry replaces ARCHIVE and --sha256 (and has no --verify)"),
    ({}, "fanout needs ARCHIVE and --sha256, a layout OUT, or --from-registry"),
    ({"sha256": "0" * 64}, "fanout needs ARCHIVE and --sha256, a layout OUT, or --from-registry"),
])
def test_a_request_naming_no_route_or_two_is_refused_before_the_site_is_read(
    tmp_path: Path, request_fields: dict[str, object], message: str,
) -> None:
    absent_site = tmp_path / "absent-site.toml"  # reading it would be another error
    with pytest.raises(InputError) as raised:
        distribute(DistributionRequest(site=absent_site, evidence_dir=tmp_path / "evidence",
                                       **request_fields))
    assert raised.value.message == message and raised.value.exit_code == 2
    assert not (tmp_path / "evidence").exists()


def test_each_route_reads_the_site_file(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text("not toml [\n")
    for fields in ({"from_registry": REGISTRY_IMAGE}, {"source": "out"}, {"source": "a.tar", "sha256": "0" * 64}):
        with pytest.raises(InputError) as raised:
            distribute(DistributionRequest(site=site, **fields))
        assert str(site) in raised.value.message, fields
