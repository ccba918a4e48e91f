"""Text files sparkflake writes into an operator's directory (``recipe import``'s
``profile.toml`` and ``runtime.env``) carry a first comment line naming the sha256 of the
rest: ``# sparkflake-generated sha256:<hex> ...``. Such a file is replaced by the next run
only while it is still exactly what was written; a file without the line, or edited since
(the operator filled in the site values), is the operator's and is refused unless forced.
"""

from __future__ import annotations

import hashlib
import os

from .documents import read_regular_file
from .errors import InputError

_MARK = "sparkflake-generated sha256:"
_SAYS = "(replaced by the next run unless edited)"
MAX_GENERATED_BYTES = 4 << 20


def marked_text(body: str, comment: str = "#") -> str:
    """``body`` behind the comment line that marks it as written by sparkflake."""
    return f"{comment} {_MARK}{hashlib.sha256(body.encode()).hexdigest()} {_SAYS}\n{body}"


def unchanged_since_written(raw: bytes) -> bool:
    """Whether ``raw`` is a marked text whose body is still what its mark names."""
    first, newline, body = raw.partition(b"\n")
    _, mark, rest = first.partition(_MARK.encode())
    return bool(newline and mark) and rest[:64] == hashlib.sha256(body).hexdigest().encode()


def check_replaceable_file(path: str | os.PathLike[str], *, force: bool = False) -> None:
    """Refuse (InputError) to replace ``path`` unless it is absent, a text sparkflake wrote
    and nobody changed since, or ``force``."""
    if force or not os.path.lexists(path):
        return
    if not unchanged_since_written(read_regular_file(path, "a file sparkflake wrote", MAX_GENERATED_BYTES)):
        raise InputError(f"{os.fspath(path)}: exists and is not a file sparkflake wrote (or it was edited since); "
                         "move it away, choose another -o, or pass --force to replace it")
