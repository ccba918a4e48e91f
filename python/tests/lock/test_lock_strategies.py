"""The shared lock strategies (fixtures.lock_strategies) themselves: every generated record is
valid and survives its dict form."""

from __future__ import annotations

import pytest
from fixtures.lock_strategies import pins, targets
from hypothesis import given

from sparkflake.core.records import record_to_dict
from sparkflake.lock.lock_file import pin_from_dict

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check


@given(pins)
def test_generated_pin_survives_its_dict_form(pin) -> None:
    document = record_to_dict(pin)
    assert document["kind"] == pin.kind
    assert list(document)[:2] == ["kind", "name"]
    rebuilt = pin_from_dict({k: v for k, v in document.items()}, "inputs[0]")
    assert rebuilt == pin


@given(targets)
def test_target_tags_prefer_the_newest_manylinux(target) -> None:
    tags = target.supported_tags()
    assert len(tags) == len(set(tags))
    assert tags[0] == f"{target.python_tag}-{target.python_tag}-{target.manylinux}_{target.wheel_architecture}"
    assert tags[-1].endswith("-none-any")
