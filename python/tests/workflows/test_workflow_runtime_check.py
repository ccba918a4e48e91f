"""The runtime check's workflow (workflows/runtime_check.py): the profile it judges
against, the launch cases and the mounts it hands the check, and what it records only when
the image's code answered. The image's own code on a real image: tests/runtime/test_runtime_real.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.one_layer_image import write_one_layer_image

from sparkflake.core.check_result import SKIP
from sparkflake.core.errors import InputError
from sparkflake.launch.conformance import conformance_cases
from sparkflake.launch.contract import contract_from_profile
from sparkflake.launch.spec import CONTAINER_DRAFT, CONTAINER_TARGET
from sparkflake.lock.profile_locks import load_profile
from sparkflake.runtime.check_report import Case
from sparkflake.runtime.checkpoint import DRAFT, TARGET, WRITABLE
from sparkflake.workflows.runtime_check import (
    RuntimeCheckRequest,
    check_runtime,
    container_mounts,
    profile_name_of,
)


def _image_without_python(root: Path, labels: dict[str, str]) -> Path:
    out, _ = write_one_layer_image(root, {"etc/os-release": b"ID=none\n"}, labels)
    return out


def test_a_missing_output_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(InputError, match=f"{missing}: no such file or directory") as raised:
        check_runtime(RuntimeCheckRequest(out=missing, profile="glm53-dflash7"))
    assert raised.value.exit_code == 2


def test_the_profile_is_the_given_one_else_the_images_label(tmp_path: Path) -> None:
    labelled = _image_without_python(tmp_path / "a", {"org.sparkflake.profile": "glm53-mtp5"})
    assert profile_name_of(labelled, None) == "glm53-mtp5"
    assert profile_name_of(labelled, "glm53-dflash7") == "glm53-dflash7"
    unlabelled = _image_without_python(tmp_path / "b", {})
    with pytest.raises(InputError, match="no org.sparkflake.profile label; pass --profile"):
        profile_name_of(unlabelled, None)


def test_the_draft_is_mounted_only_where_a_case_names_it() -> None:
    contract = contract_from_profile(load_profile("glm53-dflash7", check_locks=False))
    writable = [(contract.container_jit_root, WRITABLE), (contract.container_cache_root, WRITABLE)]
    target_only = [Case("plain", ("--model", CONTAINER_TARGET), {})]
    assert [(m.inside, m.role) for m in container_mounts(contract, target_only)] == [
        (CONTAINER_TARGET, TARGET), *writable]
    with_draft = [*target_only, Case("draft", ("--speculative-config", f'{{"model": "{CONTAINER_DRAFT}"}}'), {})]
    assert [(m.inside, m.role) for m in container_mounts(contract, with_draft)] == [
        (CONTAINER_TARGET, TARGET), (CONTAINER_DRAFT, DRAFT), *writable]


def test_an_image_that_cannot_answer_leaves_nothing_recorded(tmp_path: Path) -> None:
    """Every launch the launcher renders goes to the check, each it refuses is a skipped
    check; with no answer from the image's code (no Python in it) no capability manifest
    is written anywhere: not beside the image, not in the cache, not to --capabilities."""
    out = _image_without_python(tmp_path, {"org.sparkflake.profile": "glm53-dflash7"})
    before = sorted(os.listdir(out))
    request = RuntimeCheckRequest(out=out, capabilities_file=tmp_path / "capabilities.json",
                                  scratch=tmp_path / "scratch", cache_root=tmp_path / "cache")
    result = check_runtime(request)
    cases = list(conformance_cases(contract_from_profile(load_profile("glm53-dflash7", check_locks=False))))
    assert result.launch_specs == sum(case.serve_args is not None for case in cases) > 0
    refused = [check for check in result.report.checks if check.id == "runtime.launch-refused"]
    assert len(refused) == sum(case.serve_args is None for case in cases)
    assert all(check.status == SKIP for check in refused)
    assert [check.id for check in result.report.failures] == ["runtime.interpreter"]
    assert result.report.capabilities is None and result.report.exit_code == 1
    assert sorted(os.listdir(out)) == before
    assert not (tmp_path / "capabilities.json").exists() and not (tmp_path / "cache" / "capabilities").exists()
