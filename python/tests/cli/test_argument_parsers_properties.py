"""The parsers of command-line strings: whole numbers (``cli._arguments``), a RANK
(``cli.launch.parse_rank``), ``--git-mirror NAME=URL`` (``cli.fetch.parse_mirrors``),
``--expect sha256:<hex>@KIND`` (``audit.report.parse_expectation``) and an engine's
``SPARKFLAKE_<ENGINE>_ARGS`` (``core.container_engine``). What they accept they give back
as written; anything else is refused with the option named (an argparse type error or an
``InputError``), never another exception."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.audit.report import EXPECT_KINDS, parse_expectation
from sparkflake.cli._arguments import byte_count, count, workers
from sparkflake.cli.fetch import parse_mirrors
from sparkflake.cli.launch import parse_rank
from sparkflake.core.container_engine import engine_args_from_environment
from sparkflake.core.errors import InputError

pytestmark = pytest.mark.cli

HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
_any_text = st.text(max_size=24)


@given(st.integers(0, 10**19 - 1))
def test_whole_numbers_read_back_as_written(number: int) -> None:
    assert count(str(number)) == number
    if number >= 1:
        assert byte_count(str(number)) == number and workers(str(number)) == number
    else:
        for parse in (byte_count, workers):
            with pytest.raises(argparse.ArgumentTypeError, match=r"'0': expected a whole number.*, 1 or more$"):
                parse("0")


@given(_any_text)
def test_a_whole_number_is_ascii_digits_only(text: str) -> None:
    if re.fullmatch(r"[0-9]{1,19}", text):
        assert count(text) == int(text)
        return
    refusal = r"(expected a whole number, 0 or more|holds the control character U\+[0-9A-F]{4,6}; give plain text)$"
    with pytest.raises(argparse.ArgumentTypeError, match=refusal) as refused:
        count(text)
    assert str(refused.value).isprintable()  # what is shown of the text is escaped


@given(st.integers(0, 9999))
def test_a_rank_reads_back_as_written(rank: int) -> None:
    assert parse_rank(str(rank)) == rank


@given(st.one_of(_any_text, st.integers(10_000).map(str), st.integers(0, 999).map(lambda n: f"0{n}"),
                 st.sampled_from(["²", "٣", "+1", "-0", " 1", "1_0", "1.0"])))
def test_a_rank_that_is_not_plain_ascii_decimal_is_refused(text: str) -> None:
    if re.fullmatch(r"0|[1-9][0-9]{0,3}", text):
        return
    with pytest.raises(InputError, match=r"^RANK .*: expected a non-negative decimal integer"):
        parse_rank(text)


_git_urls = st.one_of(
    st.from_regex(r"https://[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5})?(:[1-9][0-9]{0,3})?/[a-z0-9_/-]{1,20}(\.git)?", fullmatch=True),
    st.from_regex(r"file:///[a-z0-9_/-]{1,20}", fullmatch=True),
)
_input_names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)


@given(st.lists(st.tuples(_input_names, _git_urls), max_size=6), st.booleans())
def test_git_mirrors_read_back_in_order_per_input(pairs, names_known) -> None:
    names = sorted({name for name, _ in pairs})
    mirrors = parse_mirrors([f"{name}={url}" for name, url in pairs], names if names_known else None)
    expected: dict[str, tuple[str, ...]] = {}
    for name, url in pairs:
        expected[name] = (*expected.get(name, ()), url)
    assert mirrors == expected


@given(_input_names, _git_urls, st.lists(_input_names, max_size=3))
def test_a_mirror_of_no_input_of_the_lock_is_refused_naming_the_known(name, url, known) -> None:
    if name in known:
        return
    with pytest.raises(InputError, match=r"^--git-mirror .*: expected NAME=URL with NAME a git input of the lock \(") as refused:
        parse_mirrors([f"{name}={url}"], known)
    for other in known:
        assert other in refused.value.message


@given(_input_names, st.one_of(st.from_regex(r"[a-z]+@[a-z]+:[a-z/]+", fullmatch=True),
                               st.sampled_from(["ext::sh -c x", "ftp://h/x", "", "git@github.com:o/r"])))
def test_a_mirror_url_of_no_git_transport_is_refused(name, url) -> None:
    with pytest.raises(InputError, match=r"^--git-mirror "):
        parse_mirrors([f"{name}={url}"], [name])


@given(HEX, st.sampled_from(EXPECT_KINDS))
def test_an_expectation_reads_back_as_written(hex_digits: str, kind: str) -> None:
    assert parse_expectation(f"sha256:{hex_digits}@{kind}") == ("config" if kind == "image-id" else kind, f"sha256:{hex_digits}")


@given(st.one_of(_any_text, HEX.map(lambda h: f"sha256:{h.upper()}@manifest"), HEX.map(lambda h: f"sha256:{h}@blob"),
                 HEX.map(lambda h: f"sha512:{h}@layer"), HEX.map(lambda h: f"sha256:{h[1:]}@config")))
def test_a_bad_expectation_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(InputError, match=r"^(\[digest\.well-formed\] )?--expect "):
        parse_expectation(text)


_words = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10), max_size=5)


@given(_words, st.sampled_from(["podman", "docker", "skopeo"]))
def test_engine_arguments_read_back_as_shell_quoted(words: list[str], engine: str) -> None:
    variable = f"SPARKFLAKE_{engine.upper()}_ARGS"
    assert engine_args_from_environment(engine, {variable: shlex.join(words)}) == tuple(words)
    assert engine_args_from_environment(engine, {}) == ()


@given(_words, st.sampled_from(["'", '"', "\\"]))
def test_engine_arguments_with_an_open_quote_are_refused_naming_the_variable(words, opener) -> None:
    raw = shlex.join(words) + " " + opener
    with pytest.raises(InputError, match=r"^SPARKFLAKE_PODMAN_ARGS: "):
        engine_args_from_environment("podman", {"SPARKFLAKE_PODMAN_ARGS": raw})
