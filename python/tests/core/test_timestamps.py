"""The image's times: ``rfc3339`` writes SOURCE_DATE_EPOCH as an OCI `created` time and
``parse_rfc3339`` reads it back (``sparkflake export`` takes an archive's tar mtime from the
manifest's created annotation); anything but that exact form is refused naming where."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.core.timestamps import parse_rfc3339, rfc3339

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

EPOCHS = st.integers(min_value=0, max_value=8**11 - 1)  # what a layer's tar header holds


@given(EPOCHS)
def test_a_written_time_reads_back_as_its_epoch(epoch):
    assert parse_rfc3339(rfc3339(epoch), "here") == epoch


@given(st.one_of(st.text(max_size=24), st.integers(), st.none(),
                 EPOCHS.map(lambda epoch: rfc3339(epoch).replace("Z", "+00:00")),
                 EPOCHS.map(lambda epoch: rfc3339(epoch)[:-1] + ".5Z")))
def test_anything_else_is_refused_naming_where(text):
    try:
        epoch = parse_rfc3339(text, "index.json: annotations")
    except InputError as refusal:
        assert refusal.message.startswith("index.json: annotations: expected a time as YYYY-MM-DDTHH:MM:SSZ")
    else:
        assert rfc3339(epoch) == text  # only what rfc3339 writes is read


def test_known_values():
    assert parse_rfc3339("1970-01-01T00:00:01Z", "x") == 1
    assert parse_rfc3339("2026-12-02T04:25:46Z", "x") == 1796185546
    for refused in ("2026-12-02 04:25:46Z", "1969-12-31T23:59:59Z"):
        with pytest.raises(InputError, match="x: expected a time"):
            parse_rfc3339(refused, "x")
