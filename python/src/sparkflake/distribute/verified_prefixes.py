"""A rank's memory of the layer runs it has checked (``oci.verify.VerifiedPrefixes``): a
delta fan-out's import then reads only the layers it has not seen below the same ones.

One file a run of layers, ``DIR/<prefix key>.json``: the symlinks those layers leave, all
the entry check of a later layer needs. It sits beside the rank's image store and is trusted
as the blobs there are: the same agent writes both, from its own check or from rank 0's
(``admit``: the records of rank 0's check of the source, whose blobs the rank's are, by
sha256); a file that cannot be read as one is passed over (those layers are read again),
and one that cannot be written costs only that.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import canonical_json_bytes
from ..core.errors import InputError
from ..core.own_files import read_own_json

VERIFIED_PREFIXES_NAME = "verified-layer-prefixes"  # beside STORE_NAME in a rank's data directory
SCHEMA = "sparkflake.verified-layer-prefix/v1"
RECORD_LIMIT = 64 << 20  # a Python environment's symlinks: thousands of short paths, a few MiB
# glm53's six runs hold 59 KB each (measured): 256 records are some 40 images' worth, ~15 MB.
# Past it the runs used longest ago go (a use refreshes a record's time), so a rank that
# takes an image a day does not keep every day's runs.
MAX_RECORDS = 256
_KEY = re.compile(r"[0-9a-f]{64}")
_RECORD_NAME = re.compile(r"[0-9a-f]{64}\.json")


class VerifiedPrefixStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def symlinks_after(self, key: str) -> dict[str, str] | None:
        if not _KEY.fullmatch(key):
            return None
        # absent, or not a record of ours (a link, a FIFO, not JSON): those layers are read again
        document = read_own_json(self.directory / f"{key}.json", "a verified layer prefix", RECORD_LIMIT)
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            return None
        symlinks = document.get("symlinks")
        if not isinstance(symlinks, dict) or not all(isinstance(v, str) for v in symlinks.values()):
            return None
        with contextlib.suppress(OSError):  # used now: the last to go
            os.utime(self.directory / f"{key}.json", follow_symlinks=False)
        return symlinks

    def record(self, key: str, symlinks: dict[str, str]) -> None:
        if not _KEY.fullmatch(key):
            return
        with contextlib.suppress(OSError, InputError):  # not remembered: read again next time
            self.directory.mkdir(parents=True, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(self.directory).st_mode):  # a symlink to elsewhere: not ours
                return
            write_bytes_atomic(self.directory / f"{key}.json",
                               canonical_json_bytes({"schema": SCHEMA, "symlinks": symlinks}))
            self._keep_newest(MAX_RECORDS)

    def records_of(self, keys: list[str]) -> dict[str, dict[str, str]]:
        """The records this store holds of ``keys`` (those it lacks are left out)."""
        found = {key: self.symlinks_after(key) for key in keys}
        return {key: symlinks for key, symlinks in found.items() if symlinks is not None}

    def admit(self, records: object, where: str, most: int) -> int:
        """Record ``records`` ({key: symlinks}, as ``records_of`` gives them), at most
        ``most`` (an image's runs: one a layer); refused whole, naming ``where``, unless each
        is a key and a table of path to link target. Returns how many."""
        if not isinstance(records, dict) or len(records) > most:
            raise InputError(f"{where}: expected an object of at most {most} runs of layers")
        for key, symlinks in records.items():
            if not _KEY.fullmatch(key) or not isinstance(symlinks, dict) or not all(
                    isinstance(path, str) and isinstance(target, str) for path, target in symlinks.items()):
                raise InputError(f"{where}: expected a sha256 hex key and an object of path to link target, "
                                 f"got the key {key[:80]!r}")
        for key, symlinks in records.items():
            self.record(key, symlinks)
        return len(records)

    def _keep_newest(self, count: int) -> None:
        """Remove the records used longest ago past ``count``: only regular files named as
        this module names its records, in its own directory."""
        records = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if _RECORD_NAME.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    records.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
        for _, name in sorted(records, reverse=True)[count:]:
            with contextlib.suppress(FileNotFoundError):  # another import removed it first
                os.unlink(self.directory / name)
