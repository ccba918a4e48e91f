"""The `sparkflake` command. The only module that prints.

Each command group lives in its own module under ``sparkflake.cli`` and exposes
``register(subparsers)``; each handler returns an exit code (0 ok, 1 a check failed,
2 bad input or usage). ``SparkflakeError`` raised by a stage becomes its message on
stderr and its exit code; no traceback reaches the operator.
"""

from __future__ import annotations

from . import _signals

_signals.install()  # first: an interrupt while the rest is imported ends quietly

import argparse  # noqa: E402 - after the handlers, on purpose
import importlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

from ..core.file_names import names_are_utf8  # noqa: E402
from ._output import run_command  # noqa: E402

EXIT_BAD_INPUT = 2


def _terminal_width() -> int:
    """shutil.get_terminal_size's columns ($COLUMNS, else stdout's terminal, else 80) less
    the 2 argparse takes off, without importing shutil: argparse imports it for this, and
    with its bz2 and lzma it cost a quick command such as `verify` ~9 ms."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        stdout = sys.__stdout__  # None when Python runs without a standard output
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns if stdout is not None else 0
        except (ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _terminal_width() if width is None else width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # argparse's own parameters
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # usage errors exit 2 with the usage line
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _group_modules() -> list[str]:
    import pkgutil  # only when every group is listed: a quick command's parser skips it

    package = importlib.import_module(__name__)
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_"))


def _is_group_module(name: str) -> bool:
    """Whether ``name`` is a command group's module, found without listing the package."""
    if not name.isidentifier() or name.startswith("_"):
        return False
    package = importlib.import_module(__name__)
    return any(os.path.isfile(os.path.join(folder, f"{name}.py")) for folder in package.__path__)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with ``command`` naming a group module, only that group (importing
    every group pulls in every stage, which costs more than a quick command's work)."""
    parser = _Parser(
        prog="sparkflake",
        description=(
            "Reproducible build, verification, distribution and launch of GLM-5.3 "
            "serving runtimes. Exit codes: 0 success, 1 a check failed, 2 bad input or usage."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    names = [command] if command is not None and _is_group_module(command) else _group_modules()
    for name in names:
        module = importlib.import_module(f"{__name__}.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    if command is not None and names == [command] and command not in subparsers.choices:
        return build_parser()
    return parser


def utf8_mode_relaunch() -> list[str] | None:
    """The command line that runs this process's command again in Python's UTF-8 mode, when
    its file system encoding is another (a non-UTF-8 locale such as en_US.ISO-8859-1, or
    LC_ALL=C with PYTHONUTF8=0): file names are then decoded with that encoding, so a tree's
    non-ASCII names would reach a layer as other bytes (a different digest) or be refused,
    and text written into the trees would differ. None when the encoding is UTF-8 already,
    or PYTHONUTF8=1 is set and still did not give it (-E, -I or -X utf8=0 on the command
    line: no loop; the layer writer then refuses such names)."""
    if names_are_utf8() or os.environ.get("PYTHONUTF8") == "1" or not sys.executable:
        return None
    return [sys.executable, *sys.orig_argv[1:]]


def main(argv: list[str] | None = None) -> int:
    """The console script (no ``argv``: this process's command line, and the process ends
    after it) or an in-process caller's command."""
    process_ends = argv is None
    if process_ends and (relaunch := utf8_mode_relaunch()) is not None:
        os.execve(relaunch[0], relaunch, {**os.environ, "PYTHONUTF8": "1"})
    argv = sys.argv[1:] if argv is None else argv
    return run_command(lambda: build_parser(argv[0] if argv else None).parse_args(argv), process_ends=process_ends)

if __name__ == "__main__":
    sys.exit(main())
