"""Small files read whole, with bounds: a key, a public key, an SBOM, a receipt given on the
command line. Only a regular file is read (a FIFO or a device would block or never end), at
most ``limit`` bytes; every refusal names the file and what was expected."""

from __future__ import annotations

import os
import stat

from .errors import InputError


def read_small_file(path: str | os.PathLike[str], *, limit: int, expected: str) -> bytes:
    shown = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError:
        raise InputError(f"{shown}: is a directory, expected {expected}") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        if stat.S_ISDIR(status.st_mode):
            raise InputError(f"{shown}: is a directory, expected {expected}")
        raise InputError(f"{shown}: not a regular file, expected {expected}")
    with os.fdopen(fd, "rb") as handle:
        if status.st_size > limit:
            raise InputError(f"{shown}: {status.st_size} bytes, expected {expected} of at most {limit} bytes")
        os.set_blocking(fd, True)
        try:
            content = handle.read(limit + 1)
        except OSError as exc:
            raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    if len(content) > limit:
        raise InputError(f"{shown}: more than {limit} bytes, expected {expected}")
    return content
