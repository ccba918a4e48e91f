"""The protocol of the per-rank programs the controller starts over SSH (fan-out's
distribute/agent.py, the service's service/agent.py): stdout is one JSON object per line,
the last one the result; a refusal is such a line and its exit code. Kept apart from the
agents so that one does not import the other's stage (the service agent starts in a
fraction of fan-out's import time)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core.canonical_json import canonical_json_bytes
from ..core.errors import SparkflakeError

# The longest line a reader of these programs takes (a longer one is cut, and so no JSON):
# a last line with a result for each file of a plan of thousands fits many times over.
LINE_LIMIT = 16 << 20


def emit(document: dict[str, Any]) -> None:
    sys.stdout.write(canonical_json_bytes(document).decode() + "\n")
    sys.stdout.flush()


def run_protocol(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Run the handler ``argv`` (default: the command line) names; its exit status, or the
    refusal's."""
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except SparkflakeError as exc:
        emit({"status": "failed", "message": str(exc), "check_id": exc.check_id})
        return exc.exit_code
    except OSError as exc:
        emit({"status": "failed", "message": f"{exc.filename or ''}: {exc.strerror or exc}"})
        return 1
