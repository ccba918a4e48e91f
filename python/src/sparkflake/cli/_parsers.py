"""The two argparse shapes of every command module: a command that runs its handler, and a
group whose subcommand must be named (``sparkflake image build``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Callable[[argparse.Namespace], int],
    *,
    help: str,  # noqa: A002 - argparse's own keyword
    description: str | None = None,
    **defaults: Any,
) -> argparse.ArgumentParser:
    """``NAME``, run by ``handler(args)`` (``run_handler`` calls it); ``defaults`` are the
    values of options that no argument sets (``form="sri"``)."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler, **defaults)
    return parser


def add_group(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help: str,  # noqa: A002 - argparse's own keyword
    description: str | None = None,
    metavar: str = "COMMAND",
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """``NAME SUBCOMMAND``: the subcommands are added to what this returns, and one of them
    is required (argparse's usage error, exit 2, without it)."""
    parser = subparsers.add_parser(name, help=help, description=description)
    return parser.add_subparsers(dest=f"{name}_command", metavar=metavar, required=True)
