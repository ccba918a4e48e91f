"""profiles/<name>/runtime.env.example is generated, parses, and resolves as written."""

from __future__ import annotations

import re

import pytest
from fixtures.launch import PROFILES, real_contract

from sparkflake.launch.envfile import parse_env_text
from sparkflake.launch.example import render_example
from sparkflake.launch.resolution import resolve
from sparkflake.profile.settings_catalog import CATALOG, REQUIRED_SITE_KEYS


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
def test_example_is_current_and_resolves(profile):
    contract = real_contract(profile)
    path = PROFILES / profile / "runtime.env.example"
    text = path.read_text()
    assert text == render_example(contract), f"{path} is stale: regenerate with sparkflake.launch.example"
    assignments = parse_env_text(text, str(path))
    assert set(REQUIRED_SITE_KEYS) <= {a.key for a in assignments}
    as_written = resolve(assignments, contract, 0, str(path))
    # every tunable is documented, and uncommenting all of them changes nothing
    documented = set(re.findall(r"^#([A-Z][A-Z0-9_]*)=", text, re.M)) | {a.key for a in assignments}
    expected = set(CATALOG) - ({"DRAFT_MODEL_PATH"} if profile == "glm53-mtp5" else set())
    assert documented == expected
    uncommented = re.sub(r"^#([A-Z][A-Z0-9_]*=)", r"\1", text, flags=re.M)
    uncommented = "\n".join(line for line in uncommented.splitlines() if not re.match(r"^[A-Z_]+=$", line))
    everything = resolve(parse_env_text(uncommented, str(path)), contract, 0, str(path))
    assert everything.values == as_written.values


def test_operator_guide_documents_every_setting_and_check():
    guide = (PROFILES.parent / "docs" / "operator-guide.md").read_text()
    for key in CATALOG:
        assert f"`{key}`" in guide, key
    for check_id in ("image.id", "image.labels", "container.name-free", "checkpoint.target", "checkpoint.draft",
                     "cache-root.dedicated", "cache-root.local", "cache-root.state", "ports.free",
                     "fabric.rdma-devices", "fabric.hca", "fabric.interface", "nccl.library"):
        assert f"`{check_id}`" in guide, check_id
