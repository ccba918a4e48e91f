"""Where `runtime check` leaves an image's capabilities and how a launch finds them again:
beside the build's digests.json (listed in the output's marker, so the next build may
replace the output: issue 31's drift) and in the cache's store by image ID, which outlives
the output (a roll back after later builds)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fixtures.launch import real_contract

from sparkflake.cli import main
from sparkflake.core.errors import InputError
from sparkflake.launch.image_capabilities import (
    capabilities_of_image,
    record_capabilities,
    store_path,
)
from sparkflake.runtime.capabilities import FILE_NAME

FIXTURE = Path(__file__).resolve().parents[3] / "profiles" / "fixture"


def test_recorded_beside_the_image_and_in_the_store_found_by_digest(tmp_path, capsys):
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0
    digests = json.loads((out / "digests.json").read_text())
    profile_caps = real_contract("glm53-dflash7").capabilities
    mine = dataclasses.replace(profile_caps, config_digest=digests["config"], manifest_digest=digests["manifest"])
    written = record_capabilities(mine, out, cache)
    assert written == [out / FILE_NAME, store_path(cache, digests["config"])]
    beside = capabilities_of_image(digests["config"], manifest_digest=digests["manifest"],
                                   digests_file=out / "digests.json", cache_root=cache, profile_capabilities=profile_caps)
    assert beside == mine and beside.source == str(out / FILE_NAME)
    # another manifest digest under the same image ID is not this image's record
    other = capabilities_of_image(digests["config"], manifest_digest="sha256:" + "1" * 64,
                                  digests_file=out / "digests.json", profile_capabilities=profile_caps)
    assert other is profile_caps
    # the next build may replace the output that now holds the capabilities file
    capsys.readouterr()
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache), "--formats", "oci"]) == 0
    assert not (out / FILE_NAME).exists()
    # and the store still has them: the image can be launched (rolled back to) by its ID
    kept = capabilities_of_image(digests["config"], cache_root=cache, profile_capabilities=profile_caps)
    assert kept == mine and kept.source == str(store_path(cache, digests["config"]))
    unknown = capabilities_of_image("sha256:" + "2" * 64, cache_root=cache, profile_capabilities=profile_caps)
    assert unknown is profile_caps


def test_an_operators_file_at_the_capabilities_name_in_an_output_is_never_replaced(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(FIXTURE), "--offline", "-o", str(out), "--cache", str(cache)]) == 0
    digests = json.loads((out / "digests.json").read_text())
    mine = dataclasses.replace(real_contract("glm53-dflash7").capabilities, config_digest=digests["config"],
                               manifest_digest=digests["manifest"])
    (out / FILE_NAME).write_text("the operator's notes\n")
    with pytest.raises(InputError, match=f"{out / FILE_NAME}: exists and sparkflake did not write it"):
        record_capabilities(mine, out, cache)
    assert (out / FILE_NAME).read_text() == "the operator's notes\n"
    # once it is sparkflake's own, a later check replaces it
    (out / FILE_NAME).unlink()
    record_capabilities(mine, out, cache)
    assert record_capabilities(mine, out, cache)[0] == out / FILE_NAME
