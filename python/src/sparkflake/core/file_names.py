"""Host file names written as the bytes they are on disk. Python hands out names decoded
with its file system encoding; only under UTF-8 (Python's UTF-8 mode) does writing a name
as UTF-8 (a tar header, a file list in a tree) give back those bytes: under an ISO-8859-1
locale "é" (c3 a9 on disk) would be written c3 83 c2 a9, under LC_ALL=C with PYTHONUTF8=0
a valid name is not encodable at all."""

from __future__ import annotations

import sys

from .errors import InputError


def names_are_utf8() -> bool:
    """Whether this process decodes file names as UTF-8."""
    return sys.getfilesystemencoding() == "utf-8"


def require_utf8_names(what: str) -> None:
    """Refuse ``what`` (it writes host file names as UTF-8) unless names decode as UTF-8.
    The CLI restarts itself in UTF-8 mode; a library caller is told to run in it."""
    if not names_are_utf8():
        raise InputError(
            f"{what}: Python's file system encoding is {sys.getfilesystemencoding()}, not UTF-8, so file "
            "names would not be written as their bytes; run Python in UTF-8 mode (PYTHONUTF8=1 or -X utf8)"
        )
