"""The fan-out and replication workflows (workflows/fanout.py, workflows/replicate.py): the
route a request names, refused before the site file is read when it names none or two, and
each rank's evidence. The routes themselves over four ranks: tests/distribute/test_fanout*.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkflake.core.canonical_json import readable_json_bytes
from sparkflake.core.errors import InputError
from sparkflake.workflows.fanout import DistributionRequest, distribute, with_evidence
from sparkflake.workflows.replicate import ReplicationRequest, replicate_checkpoint

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


def test_each_ranks_evidence_is_written_only_when_asked(tmp_path: Path) -> None:
    report = {"complete": False, "ranks": [{"rank": "spark-0", "status": "ok"},
                                           {"rank": "spark-1", "status": "failed", "error": "hop 0 -> 1 broke"}]}
    assert not with_evidence(report, None).complete and list(tmp_path.iterdir()) == []
    result = with_evidence(report, tmp_path)
    assert result.ranks == report["ranks"] and not result.complete
    assert sorted(path.name for path in tmp_path.iterdir()) == ["spark-0.json", "spark-1.json"]
    assert json.loads((tmp_path / "spark-1.json").read_bytes()) == report["ranks"][1]
    assert (tmp_path / "spark-0.json").read_bytes() == readable_json_bytes(report["ranks"][0])


def test_replication_reads_the_site_file(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text("not toml [\n")
    with pytest.raises(InputError) as raised:
        replicate_checkpoint(ReplicationRequest(site=site, model_dir="/models/glm", evidence_dir=tmp_path / "e"))
    assert str(site) in raised.value.message and not (tmp_path / "e").exists()
