"""Digest strings and the digests derived from others (chainID)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ..errors import InputError

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def sha256_digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def digest_hex(digest: str) -> str:
    """The hex part of a ``sha256:<hex>`` digest; anything else is refused."""
    if not _DIGEST.fullmatch(digest):
        raise InputError(f"not a sha256 digest: {digest!r} (expected sha256:<64 lowercase hex>)")
    return digest[len("sha256:") :]


def is_digest(text: object) -> bool:
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def chain_id(diff_ids: Sequence[str]) -> str:
    """ChainID of a layer stack (OCI image spec, config.md): ChainID(L0) = DiffID(L0),
    ChainID(L0..Ln) = sha256(ChainID(L0..Ln-1) + " " + DiffID(Ln))."""
    if not diff_ids:
        raise InputError("chain ID of an empty layer list is undefined")
    current = diff_ids[0]
    for diff_id in diff_ids[1:]:
        current = sha256_digest(f"{current} {diff_id}".encode("ascii"))
    return current
