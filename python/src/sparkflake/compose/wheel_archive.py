"""What reading a wheel's zip archive may raise when the archive is damaged.

``zipfile`` wraps only some of it in ``BadZipFile``: a damaged deflate stream raises
``zlib.error``, an lzma one ``lzma.LZMAError``, a bzip2 one ``OSError``, a compression
method it lacks ``NotImplementedError``, and an archive cut short ``EOFError``. Each place
that reads a wheel turns these into a refusal that names the wheel.
"""

from __future__ import annotations

import lzma
import zipfile
import zlib

WHEEL_ARCHIVE_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, NotImplementedError, EOFError, OSError)
