"""The runtime check's scratch directory (``--scratch``, default ``CACHE/runtime/<profile>``):
which directory it may use, and claiming one.

The check replaces what it keeps there (``root/`` unpacked again, ``mounts/``, ``pycache/``
and ``driver/`` made afresh, its probe's run directories removed), so it works only in a
directory that is sparkflake's scratch: absent or empty (then marked ``SCRATCH_MARKER``), or
holding nothing but the names the check writes and proof that a check wrote them (the
marker; in a scratch of an earlier version, the check's lock file ``.sparkflake-in-use`` or
its unpacked root's record). Anything else is refused before anything in it is touched.
``housekeeping.cache_entries`` takes a cache's ``runtime/<profile>`` for a scratch by the
same decision (``is_scratch``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.atomic_write import generated_name_parts
from ..core.directory_lock import LOCK_NAME
from ..core.errors import InputError
from ..core.own_files import directory_names, is_regular_file
from .rootfs import RECORD_NAME, read_record

SCRATCH_MARKER = ".sparkflake-scratch"
_MARKER_TEXT = b"sparkflake runtime check scratch: everything here is the check's own and is replaced by it\n"
# what the check writes directly in its scratch (rootfs, checkpoint, driver_stand_in,
# probe_runner, bytecode, core.directory_lock)
SCRATCH_NAMES = frozenset({SCRATCH_MARKER, LOCK_NAME, "root", RECORD_NAME, "mounts", "pycache", "pycache.json",
                           "driver", "probe-result.json", "interpreter-facts.out"})
PROBE_RUN_PREFIX = "probe"  # probe_runner's run directories: core.atomic_write.run_directory
# core.atomic_write.write_bytes_atomic's staging of the JSON records it writes there (tempfile's name)
_STAGED_RECORD = re.compile(r"^\.(unpacked-root|pycache)\.json\.[a-z0-9_]{8}\.partial$")


def _written_by_check(name: str) -> bool:
    if name in SCRATCH_NAMES or _STAGED_RECORD.fullmatch(name):
        return True
    run = generated_name_parts(name)
    return run is not None and run["prefix"] == PROBE_RUN_PREFIX and not run["suffix"]


def _proven(directory: Path) -> bool:
    """The marker, or (a scratch of an earlier version) the check's lock file or its
    unpacked root's record."""
    if is_regular_file(directory / SCRATCH_MARKER) or is_regular_file(directory / LOCK_NAME):
        return True
    # in a directory that may be an operator's: read_record reads no FIFO, link or huge
    # file, and a record nested too deeply for the parser proves nothing
    return read_record(directory / RECORD_NAME) is not None


def scratch_problem(directory: Path) -> str | None:
    """None when the check may use ``directory`` (absent, empty, or its scratch); else
    what is wrong with it, naming it."""
    try:
        target = os.readlink(directory)
    except OSError:  # not a symlink (or absent)
        target = None
    if target is not None:
        # the check replaces what is in its scratch: through a symlink (the default
        # CACHE/runtime/<profile> pointing out of the cache) it would unpack into and
        # remove the contents of a directory elsewhere that is no scratch
        return (f"{directory}: is a symlink (to {target}); a runtime check's scratch is a directory it replaces "
                "the contents of, never one it follows a link to; remove the symlink, or give the directory itself "
                "as --scratch")
    names = directory_names(directory, "a runtime check's scratch, a directory it makes (choose another --scratch)")
    if isinstance(names, str):
        return names
    if not names:
        return None
    foreign = [name for name in names if not _written_by_check(name)]
    if not foreign and _proven(directory):
        return None
    hint = ("a runtime check unpacks into and replaces what is in its scratch, so it uses only an absent or "
            "empty directory or its own scratch; choose another --scratch")
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        return f"{directory}: not a runtime check's scratch: holds {shown}, which the check did not write; {hint}"
    return f"{directory}: not a runtime check's scratch (no {SCRATCH_MARKER}); {hint}"


def is_scratch(directory: Path) -> bool:
    """``directory`` is a runtime check's scratch (not merely absent or empty)."""
    return directory.is_dir() and not directory.is_symlink() and scratch_problem(directory) is None \
        and _proven(directory)


def claim_scratch(directory: Path) -> None:
    """Mark ``directory`` (created if absent) as the check's scratch; refused
    (InputError, nothing written) when ``scratch_problem`` says it is not one."""
    problem = scratch_problem(directory)
    if problem is not None:
        raise InputError(problem)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(directory / SCRATCH_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, _MARKER_TEXT)
    finally:
        os.close(fd)
