"""Double-quoted values of a runtime.env (``launch.envfile``, the parser's
``_Parser.double_quoted``): what the parser reads is what a POSIX shell (``/bin/sh``)
assigns for the same file, escapes (``\\"`` ``\\\\`` ``\\$`` ``\\```), a backslash before
any other character (kept) and line continuations included; a bare ``$`` or backquote,
or an unterminated quote, is refused naming the file and line."""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.envfile import parse_env_text

pytestmark = pytest.mark.launch

# what a double-quoted value may hold besides its escapes: no control characters but
# tab and newline, no bare '$' '`' '"' '\\'
_plain = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='$`"\\') | st.sampled_from(["\t", "\n"])
_pieces = st.one_of(
    _plain.map(lambda char: (char, char)),
    st.sampled_from('$`"\\').map(lambda char: ("\\" + char, char)),  # the four escapes
    st.sampled_from("anz'~# ").map(lambda char: ("\\" + char, "\\" + char)),  # any other: the backslash stays
    st.just(("\\\n", "")),  # line continuation
)
_quoted = st.lists(_pieces, max_size=12).map(lambda pieces: ('"' + "".join(w for w, _ in pieces) + '"', "".join(v for _, v in pieces)))
_keys = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


@given(st.dictionaries(_keys, _quoted, min_size=1, max_size=6))
def test_double_quoted_values_are_what_a_posix_shell_assigns(assignments) -> None:
    text = "".join(f"{key}={written}\n" for key, (written, _) in assignments.items())
    parsed = {entry.key: entry.value for entry in parse_env_text(text, "runtime.env")}
    assert parsed == {key: value for key, (_, value) in assignments.items()}
    with tempfile.NamedTemporaryFile("w", suffix=".env", encoding="utf-8", delete=False) as handle:
        handle.write(text)
    try:
        shown = " ".join(f'"${key}"' for key in assignments)
        result = subprocess.run(["/bin/sh", "-c", f". {handle.name}; printf '%s\\0' {shown}"],
                                capture_output=True, check=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    finally:
        os.unlink(handle.name)
    assert result.stdout.decode().split("\0")[:-1] == list(parsed.values())


@given(st.lists(_pieces, max_size=6), st.sampled_from(["$", "$HOME", "${X}", "$(id)", "`id`"]), st.lists(_pieces, max_size=6),
       st.integers(0, 3))
def test_an_expansion_inside_double_quotes_is_refused_at_its_line(before, expansion, after, blank_lines) -> None:
    written = '"' + "".join(w for w, _ in before) + expansion + "".join(w for w, _ in after) + '"'
    line = 1 + blank_lines + "".join(w for w, _ in before).count("\n")
    with pytest.raises(InputError, match=rf"^runtime\.env:{line}: .*(expanded by a shell|command substitution)"):
        parse_env_text("\n" * blank_lines + f"KEY={written}\n", "runtime.env")


@given(st.lists(_pieces, max_size=6), st.integers(0, 3))
def test_an_unterminated_double_quote_is_refused_at_the_line_it_opens(pieces, blank_lines) -> None:
    written = '"' + "".join(w for w, _ in pieces)
    with pytest.raises(InputError, match=rf"^runtime\.env:{1 + blank_lines}: unterminated double quote$"):
        parse_env_text("\n" * blank_lines + f"KEY={written}", "runtime.env")
