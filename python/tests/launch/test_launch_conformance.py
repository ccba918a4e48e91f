"""Which conformance case is the profile's default launch (launch/conformance.py): the one
whose served models the runtime check also constructs on the meta device, once per profile."""

from __future__ import annotations

import dataclasses

import pytest
from fixtures.launch import real_contract

from sparkflake.launch.conformance import conformance_cases
from sparkflake.runtime.check_report import Case


@pytest.mark.parametrize("profile", ["glm53-dflash7", "glm53-mtp5"])
def test_exactly_one_case_is_the_default_launch_and_it_has_the_profiles_own_settings(profile):
    contract = real_contract(profile)
    defaults = {key: str(contract.runtime_defaults[key]) for key in ("DCP", "SPARKCACHE_ENABLED")}
    (default,) = [case for case in conformance_cases(contract) if case.default_launch]
    assert default.name == f"{profile}-dcp{defaults['DCP']}-sparkcache-{'on' if defaults['SPARKCACHE_ENABLED'] == '1' else 'off'}"
    assert default.serve_args is not None, default.refusal
    # another default moves the mark with it
    moved = dataclasses.replace(contract, runtime_defaults={**contract.runtime_defaults, "DCP": "4"})
    assert [case.name for case in conformance_cases(moved) if case.default_launch] == \
        [default.name.replace("-dcp1-", "-dcp4-")]


def test_only_a_case_asked_to_construct_its_models_says_so_in_the_request():
    plain = Case("a", ("/m",), {"X": "1"})
    assert plain.as_record() == {"name": "a", "serve_args": ["/m"], "env": {"X": "1"}}
    assert dataclasses.replace(plain, construct_models=True).as_record() == {**plain.as_record(),
                                                                             "construct_models": True}
