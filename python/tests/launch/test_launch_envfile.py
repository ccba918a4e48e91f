"""runtime.env is parsed as data: quoting, comments, refusals with file:line, fuzz."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.envfile import (
    parse_env_bytes,
    parse_env_text,
    read_env_file,
    render_env_value,
)

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check


def parse(text: str):
    return {a.key: a.value for a in parse_env_text(text, "r.env")}


def test_plain_quoted_comments_and_export():
    text = (
        "# comment\n"
        "\n"
        "A=plain\n"
        "  B='single $HOME `x` \\n'  # trailing comment\n"
        'C="double \\"q\\" \\$ \\` \\\\ \\n"\n'
        "export D=exported\n"
        "E=\n"
        "F=a#b\n"
        "G=esc\\ aped\n"
        "H='multi\nline'\n"
        "I=after\n"
    )
    assert parse(text) == {
        "A": "plain",
        "B": "single $HOME `x` \\n",
        "C": 'double "q" $ ` \\ \\n',
        "D": "exported",
        "E": "",
        "F": "a#b",
        "G": "esc aped",
        "H": "multi\nline",
        "I": "after",
    }


def test_line_numbers_are_recorded():
    assignments = parse_env_text("\n# x\nA=1\nB='2\n3'\nC=4\n", "r.env")
    assert [(a.key, a.line) for a in assignments] == [("A", 3), ("B", 4), ("C", 6)]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("A=1\nB=$HOME\n", 2, "'$' would be expanded"),
        ("A=1\n\nB=$(id)\n", 3, "'$' would be expanded"),
        ("B=`id`\n", 1, "command substitution"),
        ('B="a $(id)"\n', 1, "inside double quotes"),
        ('B="a `id`"\n', 1, "command substitution"),
        ("B=a;id\n", 1, "shell operator ';'"),
        ("B=a|id\n", 1, "shell operator '|'"),
        ("B=a&\n", 1, "shell operator '&'"),
        ("B=a b\n", 1, "unquoted whitespace"),
        ("B=~/x\n", 1, "'~' would be expanded"),
        ("B = 1\n", 1, "no spaces around '='"),
        ("1B=1\n", 1, "expected KEY=VALUE"),
        ("A=1\nB='open\nmore\n", 2, "unterminated single quote"),
        ('A="open\n', 1, "unterminated double quote"),
        ("A=1\r\n", 1, "carriage return"),
        ("A=\x01\n", 1, "control character"),
        ("A=1\nA=2\n", 2, "A is set twice (first on line 1)"),
        ("justaword\n", 1, "expected '=' after justaword"),
        ("A=x\\", 1, "backslash at end of file"),
    ],
)
def test_refusals_name_file_and_line(text, line, fragment):
    with pytest.raises(InputError) as caught:
        parse_env_text(text, "r.env")
    assert str(caught.value).startswith(f"r.env:{line}: "), str(caught.value)
    assert fragment in str(caught.value)


def test_non_utf8_names_line():
    with pytest.raises(InputError, match=r"^r.env:2: not UTF-8"):
        parse_env_bytes(b"A=1\nB=\xff\n", "r.env")


def test_unreadable_and_directory(tmp_path):
    with pytest.raises(InputError, match="cannot read an env file"):
        read_env_file(tmp_path / "missing.env")
    with pytest.raises(InputError, match="is a directory"):
        read_env_file(tmp_path)


def test_values_agree_with_a_real_posix_shell(tmp_path):
    """What this parser accepts, /bin/sh assigns identically (checked with env -0)."""
    text = (
        "A=plain\nB='sq $x `y`'\nC=\"dq \\\"in\\\" \\$ \\\\ \\q\"\nD=a\\ b\nE='it'\\''s'\n"
        "F=\"multi\nline\"\nG=x\\\ny\n"
    )
    ours = parse(text)
    env_file = tmp_path / "r.env"
    env_file.write_text(text)
    # The one place a shell reads the file: to prove equivalence on accepted input.
    script = tmp_path / "print.sh"
    script.write_text(
        f". {env_file}\n"
        + "".join(f'printf "%s\\0" "${k}"\n' for k in "ABCDEFG")
    )
    shell = subprocess.run(["/bin/sh", str(script)], capture_output=True, check=True, env={})
    values = shell.stdout.split(b"\0")[:-1]
    assert [v.decode() for v in values] == [ours[k] for k in "ABCDEFG"]


_VALUE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"),
    max_size=40,
)


@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True), _VALUE, max_size=8))
def test_render_round_trip(mapping):
    clean = {k: v for k, v in mapping.items() if k != "export" and not re.search(r"[\x01-\x08\x0b-\x1f\x7f]", v)}
    text = "".join(f"{k}={render_env_value(v)}\n" for k, v in clean.items())
    assert parse(text) == clean


_HOSTILE = st.lists(
    st.sampled_from(
        ["A=", "B='", '"', "$(touch /tmp/sparkflake-pwned)", "`touch /tmp/sparkflake-pwned`", ";",
         "\n", " ", "#", "\\", "export ", "=", "x", "é", "\u202e", "${A}", "~", "|", "'", "\t"]
    ),
    max_size=30,
).map("".join)


def _no_process(*args, **kwargs):
    raise AssertionError("the env-file parser started a process")


@given(st.one_of(st.binary(max_size=300), _HOSTILE.map(str.encode), st.text(max_size=200).map(str.encode)))
def test_fuzz_never_traceback_never_executes(raw):
    patches = {
        (subprocess, "Popen"): _no_process,
        (os, "system"): _no_process,
        (os, "execv"): _no_process,
        (os, "fork"): _no_process,
    }
    saved = {key: getattr(*key) for key in patches}
    try:
        for (module, name), replacement in patches.items():
            setattr(module, name, replacement)
        try:
            assignments = parse_env_bytes(raw, "fuzz.env")
        except InputError as exc:
            assert re.match(r"fuzz\.env:\d+: ", str(exc)), str(exc)
            line = int(str(exc).split(":")[1])
            assert 1 <= line <= raw.count(b"\n") + 1
        else:
            for assignment in assignments:
                assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", assignment.key)
                assert "$(" not in assignment.value or "'" in raw.decode("utf-8", "replace")
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)
    assert not os.path.exists("/tmp/sparkflake-pwned")
