"""The one check-result model's report rule (core.check_result): the audit and the runtime
check both turn their checks into an exit status and a list of failures through it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.check_result import (
    ERROR,
    FAIL,
    PASS,
    SKIP,
    CheckResult,
    exit_code_of,
    failed_checks,
)

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

checks = st.lists(st.builds(CheckResult, id=st.text(max_size=5), status=st.sampled_from([PASS, FAIL, ERROR, SKIP]),
                            detail=st.text(max_size=5)), max_size=8)


@given(checks)
def test_an_error_is_exit_2_a_failure_exit_1_and_failures_keep_their_order(results) -> None:
    statuses = [result.status for result in results]
    expected = 2 if ERROR in statuses else 1 if FAIL in statuses else 0
    assert exit_code_of(results) == expected
    assert failed_checks(results) == [result for result in results if result.status not in (PASS, SKIP)]
