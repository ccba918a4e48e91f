"""The Python closure for the target, resolved by uv, pinned to exactly one wheel each.

``uv pip compile --format pylock.toml`` gives a PEP 751 lock with every candidate file's
url, size and sha256 for the target platform. From it ``lock.pylock.resolved_pins`` keeps,
per package whose marker holds on the target, the single wheel the target's tag order
prefers. Packages with no fitting wheel are refused: building an sdist would mean running a
build backend for the target, which this pipeline never does.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import InputError
from .target import DEBIAN_BOOKWORM_ARM64, InstallTarget

PYPI_INDEX = "https://pypi.org/simple"

# uv's --exclude-newer also takes a local date (read in the machine's time zone) and, in newer
# releases, a span ("1 week"): both resolve differently elsewhere or tomorrow, so only a UTC
# date or time is taken, and uv is given the time (uv pip compile --help: "RFC 3339 timestamp")
_CUTOFF = re.compile(r"(\d{4}-\d{2}-\d{2})(T\d{2}:\d{2}:\d{2}Z)?")


def resolution_cutoff(text: str) -> str:
    """``--exclude-newer``'s value as the UTC time uv is given: only files the index had
    before it are candidates, so a resolution made again later gives the same pins."""
    match = _CUTOFF.fullmatch(text)
    try:
        if match is None:
            raise ValueError
        moment = datetime.datetime.strptime(text if match.group(2) else f"{text}T00:00:00Z", "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise InputError(
            f"--exclude-newer {text!r}: expected a UTC date YYYY-MM-DD or time YYYY-MM-DDTHH:MM:SSZ "
            "(a local date or a span resolves differently elsewhere or later)"
        ) from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def find_uv() -> str:
    """uv beside the running interpreter (the project venv), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return str(beside)
    found = shutil.which("uv")
    if found is None:
        raise InputError("uv not found (beside the interpreter or on PATH); it resolves the Python lock")
    return found


def compile_pylock(
    requirements: Sequence[str],
    *,
    target: InstallTarget = DEBIAN_BOOKWORM_ARM64,
    index_url: str = PYPI_INDEX,
    exclude_newer: str | None = None,
    uv: str | None = None,
    extra_args: Sequence[str] = (),
) -> str:
    """Run uv for the target and return the pylock.toml text it wrote."""
    with tempfile.TemporaryDirectory(prefix="sparkflake-uv-") as scratch:
        requirements_in = Path(scratch) / "requirements.in"
        requirements_in.write_text("".join(f"{r}\n" for r in requirements), encoding="utf-8")
        output = Path(scratch) / "pylock.toml"
        argv = [
            uv or find_uv(),
            "pip",
            "compile",
            str(requirements_in),
            "--no-config",
            "--python-platform",
            target.uv_python_platform,
            "--python-version",
            target.python_minor,
            "--format",
            "pylock.toml",
            "--default-index",
            index_url,
            "--no-header",
            "--quiet",
            "-o",
            str(output),
        ]
        if exclude_newer:
            argv += ["--exclude-newer", exclude_newer]
        argv += list(extra_args)
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
        result = subprocess.run(argv, capture_output=True, encoding="utf-8", errors="replace", check=False, env=environment, cwd=scratch)
        if result.returncode != 0:
            raise InputError(
                f"uv could not resolve {', '.join(requirements)} for {target.uv_python_platform} "
                f"python {target.python_minor}: {result.stderr.strip()[-2000:]}",
                check_id="python-resolve",
            )
        return output.read_text(encoding="utf-8")
