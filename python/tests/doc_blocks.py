"""What the docs tests read out of README.md and docs/*.md: runnable command blocks and
command synopses.

A runnable block is a ``console`` fence right after ``<!-- runnable: FIXTURE -->``. In it,
``$ `` starts a command (a trailing ``\\`` continues it on the next line); the lines after a
command are fragments its output (stdout and stderr) must contain, ``…`` standing for any
text; ``(exit N)`` says it exits N (default 0). Commands are split into words like a shell
would split them, but nothing is expanded and nothing runs through a shell; leading
``NAME=VALUE`` words set the environment.

A synopsis is a line of any other fence that starts with ``sparkflake `` (or
``./bin/sparkflake ``): its options must be options of that command, and together the
synopses of a command must name every option its parser has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```(?P<info>[^`\n]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_RUNNABLE = re.compile(r"<!-- runnable: (?P<fixture>[a-z][a-z0-9-]*) -->\n\Z")
_EXIT = re.compile(r"\(exit (?P<code>[0-9]+)\)\Z")
_OPTION = re.compile(r"(?<![\w.\-/=])(--?[A-Za-z][A-Za-z0-9-]*)")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def shown(path: Path) -> str:
    return str(path.relative_to(REPO))


@dataclass
class Command:
    text: str
    line: int
    expected: list[str] = field(default_factory=list)
    exit_code: int = 0


@dataclass
class RunnableBlock:
    document: str
    line: int
    fixture: str
    commands: list[Command]


@dataclass(frozen=True)
class SynopsisLine:
    document: str
    line: int
    words: tuple[str, ...]


def _fences(path: Path) -> Iterator[tuple[str, int, str, str]]:
    """(info string, first body line number, body, text before the fence) of each fence."""
    text = path.read_text()
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start("body")) + 1
        yield match["info"].strip(), line, match["body"], text[: match.start()]


def runnable_blocks(path: Path) -> list[RunnableBlock]:
    blocks = []
    for info, line, body, before in _fences(path):
        marker = _RUNNABLE.search(before)
        if marker is None:
            continue
        assert info == "console", f"{shown(path)}:{line}: a runnable block is a ```console fence"
        blocks.append(RunnableBlock(shown(path), line, marker["fixture"], _commands(body, line, shown(path))))
    return blocks


def _commands(body: str, first_line: int, document: str) -> list[Command]:
    commands: list[Command] = []
    continuing = False
    for offset, raw in enumerate(body.splitlines()):
        text = raw.rstrip()
        if continuing:
            commands[-1].text += " " + text.removesuffix("\\").strip()
            continuing = text.endswith("\\")
        elif text.startswith("$ "):
            commands.append(Command(text[2:].removesuffix("\\").strip(), first_line + offset))
            continuing = text.endswith("\\")
        elif text.strip():
            assert commands, f"{document}:{first_line + offset}: output before the first command"
            exit_code = _EXIT.fullmatch(text.strip())
            if exit_code:
                commands[-1].exit_code = int(exit_code["code"])
            else:
                commands[-1].expected.append(text.strip())
    return commands


def synopsis_lines(path: Path) -> list[SynopsisLine]:
    found = []
    for _info, line, body, before in _fences(path):
        if _RUNNABLE.search(before):
            continue
        joined: list[tuple[int, str]] = []
        for offset, raw in enumerate(body.splitlines()):
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + raw.strip())
            else:
                joined.append((line + offset, raw.strip()))
        for number, text in joined:
            text = text.split(" #", 1)[0]
            for prefix in ("./bin/sparkflake ", "sparkflake "):
                if text.startswith(prefix):
                    found.append(SynopsisLine(shown(path), number, tuple(text[len(prefix):].split())))
    return found


def options_in(words: tuple[str, ...]) -> set[str]:
    return {match for word in words for match in _OPTION.findall(word)}


def output_has(output: str, fragment: str) -> bool:
    """``fragment`` occurs in ``output``, each ``…`` in it standing for any text on its line."""
    pattern = r"[^\n]*?".join(re.escape(part) for part in fragment.split("…"))
    return re.search(pattern, output) is not None
