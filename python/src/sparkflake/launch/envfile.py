"""runtime.env as data: ``KEY=VALUE`` lines with POSIX quoting, never sourced.

The accepted language is the subset of POSIX shell assignments whose meaning does not
depend on a shell: single quotes (literal), double quotes (``\\"``, ``\\\\``, ``\\$``,
``\\```` and line continuation are the only escapes), backslash escapes outside quotes,
comments, and an optional ``export`` prefix. Everything a shell would *do* rather than
*assign* — parameter expansion, command substitution, arithmetic, tilde expansion, a
second word after the value, operators such as ``;`` ``|`` ``&`` ``<`` ``>`` — is refused
with the line it is on, because silently taking it literally would give a different value
than ``source`` would and silently performing it is what this parser exists to avoid.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from ..core.documents import read_regular_file
from ..core.errors import InputError

_KEY_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_KEY_REST = _KEY_START | frozenset("0123456789")
_BLANK = " \t"
_OPERATORS = frozenset(";&|<>()")
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\')
MAX_ENV_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class EnvAssignment:
    key: str
    value: str
    line: int


def read_env_file(path: str | os.PathLike[str]) -> tuple[EnvAssignment, ...]:
    """Read and parse one env file (a regular file, at most ``MAX_ENV_FILE_BYTES``: a FIFO
    or a device is refused, not waited on); unreadable or malformed input raises InputError."""
    return parse_env_bytes(read_regular_file(path, "an env file", MAX_ENV_FILE_BYTES), os.fspath(path))


def parse_env_bytes(raw: bytes, source: str) -> tuple[EnvAssignment, ...]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{source}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None
    return parse_env_text(text, source)


def parse_env_text(text: str, source: str) -> tuple[EnvAssignment, ...]:
    return tuple(_Parser(text, source).assignments())


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.pos = 0
        self.line = 1

    def fail(self, message: str, line: int | None = None) -> InputError:
        return InputError(f"{self.source}:{self.line if line is None else line}: {message}")

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def advance(self) -> str:
        char = self.text[self.pos]
        self.pos += 1
        if char == "\n":
            self.line += 1
        self._check_char(char)
        return char

    def _check_char(self, char: str) -> None:
        if char == "\r":
            raise self.fail("carriage return found; save the file with LF line endings")
        if char != "\n" and char != "\t" and (ord(char) < 0x20 or ord(char) == 0x7F):
            raise self.fail(f"control character U+{ord(char):04X} is not allowed")

    def skip_blanks(self) -> None:
        while self.peek() and self.peek() in _BLANK:
            self.advance()

    def skip_comment(self) -> None:
        while self.peek() and self.peek() != "\n":
            self.advance()

    def assignments(self) -> Iterator[EnvAssignment]:
        seen: dict[str, int] = {}
        while self.pos < len(self.text):
            self.skip_blanks()
            char = self.peek()
            if char == "":
                break
            if char == "\n":
                self.advance()
                continue
            if char == "#":
                self.skip_comment()
                continue
            assignment = self.assignment()
            if assignment.key in seen:
                raise self.fail(
                    f"{assignment.key} is set twice (first on line {seen[assignment.key]})",
                    assignment.line,
                )
            seen[assignment.key] = assignment.line
            yield assignment

    def read_key(self) -> str:
        start = self.pos
        if self.peek() not in _KEY_START or self.peek() == "":
            found = self.peek()
            raise self.fail(
                f"expected KEY=VALUE, found {found!r}; keys are letters, digits and _"
            )
        while self.peek() and self.peek() in _KEY_REST:
            self.advance()
        return self.text[start : self.pos]

    def assignment(self) -> EnvAssignment:
        line = self.line
        key = self.read_key()
        if key == "export" and self.peek() in (" ", "\t"):
            self.skip_blanks()
            line = self.line
            key = self.read_key()
        if self.peek() != "=":
            found = self.peek()
            what = "end of line" if found in ("", "\n") else repr(found)
            hint = " (no spaces around '=')" if found in (" ", "\t") else ""
            raise self.fail(f"expected '=' after {key}, found {what}{hint}")
        self.advance()
        value = self.read_value(key)
        self.finish_line(key)
        return EnvAssignment(key=key, value=value, line=line)

    def read_value(self, key: str) -> str:
        parts: list[str] = []
        while True:
            char = self.peek()
            if char == "" or char == "\n" or char in _BLANK:
                return "".join(parts)
            if char == "'":
                parts.append(self.single_quoted())
            elif char == '"':
                parts.append(self.double_quoted())
            elif char == "\\":
                self.advance()
                escaped = self.peek()
                if escaped == "":
                    raise self.fail("backslash at end of file")
                self.advance()
                if escaped != "\n":  # backslash-newline is a line continuation
                    parts.append(escaped)
            elif char == "$":
                raise self.fail(
                    f"{key}: '$' would be expanded by a shell and is not expanded here; "
                    "write the value itself, or put a literal '$' in single quotes"
                )
            elif char == "`":
                raise self.fail(f"{key}: command substitution (`...`) is not allowed")
            elif char in _OPERATORS:
                raise self.fail(
                    f"{key}: shell operator {char!r} is not allowed; quote the value if "
                    "the character is meant literally"
                )
            elif char == "~" and (not parts or parts[-1].endswith(":")):
                raise self.fail(
                    f"{key}: '~' would be expanded by a shell; write the absolute path"
                )
            else:
                parts.append(self.advance())

    def single_quoted(self) -> str:
        start_line = self.line
        self.advance()
        chars: list[str] = []
        while True:
            if self.peek() == "":
                raise self.fail("unterminated single quote", start_line)
            char = self.advance()
            if char == "'":
                return "".join(chars)
            chars.append(char)

    def double_quoted(self) -> str:
        start_line = self.line
        self.advance()
        chars: list[str] = []
        while True:
            char = self.peek()
            if char == "":
                raise self.fail("unterminated double quote", start_line)
            if char == '"':
                self.advance()
                return "".join(chars)
            if char == "\\":
                self.advance()
                escaped = self.peek()
                if escaped == "":
                    raise self.fail("unterminated double quote", start_line)
                if escaped == "\n":
                    self.advance()
                elif escaped in _DOUBLE_QUOTE_ESCAPES:
                    chars.append(self.advance())
                else:
                    chars.append("\\")
                continue
            if char == "$":
                raise self.fail(
                    "'$' inside double quotes would be expanded by a shell; escape it as "
                    "\\$ or use single quotes"
                )
            if char == "`":
                raise self.fail("command substitution (`...`) is not allowed")
            chars.append(self.advance())

    def finish_line(self, key: str) -> None:
        self.skip_blanks()
        char = self.peek()
        if char == "" or char == "\n":
            return
        if char == "#":
            self.skip_comment()
            return
        raise self.fail(
            f"{key}: unquoted whitespace ends the value and the rest would run as a "
            "command; quote the whole value"
        )


def render_env_value(value: str) -> str:
    """The shortest quoting of ``value`` that this parser (and a shell) reads back."""
    if value and all(ch.isalnum() or ch in "_-.,/:=+@%^" for ch in value) and value[0] != "~":
        return value
    return "'" + value.replace("'", "'\\''") + "'"
