"""A referenced blob as stored, beside its reference: the one comparison every reader and
verifier of an image makes (the size first, then the digest of the bytes).

``StoredBlob`` holds what was found, not a verdict: ``oci.verify`` refuses the first
difference, the audit reports every one in its own words.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.digest import sha256_digest
from ..core.errors import CheckFailed
from .types import BlobRef


@dataclass(frozen=True)
class StoredBlob:
    """``size`` None: the blob is absent; ``digest`` None: not hashed (absent, or its size
    already differs from the reference's, so hashing it would prove nothing more)."""

    ref: BlobRef
    where: str
    size: int | None
    digest: str | None

    @property
    def size_differs(self) -> bool:
        return self.size is not None and self.ref.size is not None and self.size != self.ref.size

    @property
    def digest_differs(self) -> bool:
        return self.digest is not None and self.ref.digest is not None and self.digest != self.ref.digest

    def refuse_difference(self) -> None:
        """The first difference as ``CheckFailed`` (``oci.blob-size``, ``oci.blob-digest``)."""
        if self.size_differs:
            raise CheckFailed(
                f"{self.ref.role} {self.ref.digest or self.ref.name}: {self.where} is {self.size} bytes, "
                f"the descriptor says {self.ref.size}",
                check_id="oci.blob-size",
            )
        if self.digest_differs:
            raise CheckFailed(
                f"{self.ref.role} blob {self.where} has digest {self.digest}, expected {self.ref.digest}",
                check_id="oci.blob-digest",
            )


def stored_document(ref: BlobRef, raw: bytes, where: str) -> StoredBlob:
    """A document (manifest, config) read whole: its bytes are hashed as stored."""
    return StoredBlob(ref, where, len(raw), sha256_digest(raw))
