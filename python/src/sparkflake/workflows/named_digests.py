"""A digest the operator names on the command line (``--image``, ``--manifest``), refused
before anything is read when it is not one, in the same words wherever it is named."""

from __future__ import annotations

from ..core.digest import is_digest
from ..core.errors import InputError


def check_named_digest(option: str, value: str | None) -> None:
    """InputError unless ``value`` (given as ``option``) is absent or ``sha256:<64 hex>``."""
    if value is not None and not is_digest(value):
        raise InputError(f"{option} {value!r}: expected sha256:<64 lowercase hex>")
