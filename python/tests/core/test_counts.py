"""core.counts: a count read from text is ASCII digits (at most 19), nothing int() or
str.isdigit would also take."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake.core.counts import ascii_count


@given(st.text(max_size=25))
@example("1_0")
@example("+1")
@example(" 1")
@example("١٢")
@example("²")
@example("9" * 20)
def test_a_count_is_ascii_digits_only(text: str) -> None:
    plain = 1 <= len(text) <= 19 and all("0" <= char <= "9" for char in text)
    assert ascii_count(text) == (int(text) if plain else None)


@given(st.integers(min_value=0, max_value=10**19 - 1))
def test_every_count_of_up_to_19_digits_reads_back(count: int) -> None:
    assert ascii_count(str(count)) == count
