"""Digests of files and trees.

File digests are streamed (fixed-size reads, one pass). Three families live here:

- plain file digests (`sha256_file`, `file_hash`);
- hash text forms as Nix prints them — SRI (``sha256-<base64>``), base16, and nix32
  (Nix's base-32 alphabet, least significant 5-bit group printed last) — with one strict
  parser (`parse_hash`) and converters (`Hash.format`, `convert_hash`);
- digest strings, the ``sha256:<64 lowercase hex>`` form of OCI documents and layers, and
  the chainID derived from diffIDs.

Tree digests (NAR, git object ids) are `tree_digest`'s; they read files through the
helpers here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeGuard

from .documents import file_kind
from .errors import InputError

READ_CHUNK = 1 << 20

# Files up to this size are read with one read(); larger ones in READ_CHUNK pieces into
# one reused buffer. Framing and content go to the hasher as separate pieces: joining
# them would copy every file's bytes once more. Files are read, not mapped: a file
# truncated while mapped kills the process with SIGBUS instead of raising an error.
SMALL_FILE = 64 << 10

HASH_SIZES: dict[str, int] = {"md5": 16, "sha1": 20, "sha256": 32, "sha512": 64}
HashForm = Literal["sri", "base16", "nix32", "base64"]
HASH_FORMS: tuple[str, ...] = ("sri", "base16", "nix32", "base64")

NIX32_ALPHABET = "0123456789abcdfghijklmnpqrsvwxyz"  # no e, o, u, t (Nix's choice)
_NIX32_VALUES = {char: value for value, char in enumerate(NIX32_ALPHABET)}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_SHOWN_INPUT = 80


# ---------------------------------------------------------------------------------------
# Plain file digests


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Lowercase hex sha256 of a file's bytes, streamed."""
    return file_hash(path, "sha256").base16


def file_hash(path: str | os.PathLike[str] | bytes, algorithm: str = "sha256") -> Hash:
    """Digest of a file's bytes (flat, not NAR), streamed in `READ_CHUNK` pieces."""
    return file_digest(path, algorithm).file_hash


@dataclass(frozen=True)
class FileDigest:
    """Flat digest of a file and the number of bytes that were hashed."""

    file_hash: Hash
    size: int


def file_digest(
    path: str | os.PathLike[str] | bytes,
    algorithm: str = "sha256",
    *,
    progress: Callable[[int], None] | None = None,
) -> FileDigest:
    """Digest and size of a regular file's bytes in one streamed pass. A symlink is
    followed; anything but a regular file (a FIFO would block, a device never ends) is
    refused with its path. ``progress`` is told the bytes hashed so far after each read."""
    hasher = new_hasher(algorithm)
    encoded = os.fsencode(path)
    try:
        fd = os.open(encoded, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise unreadable(encoded, exc) from exc
    buffer = memoryview(bytearray(READ_CHUNK))
    size = 0
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{os.fsdecode(encoded)}: is a directory, expected a file")
        if not stat.S_ISREG(mode):
            raise unsupported_file(encoded, mode)
        while count := readv_into(fd, buffer, encoded):
            hasher.update(buffer[:count])
            size += count
            if progress is not None:
                progress(size)
    finally:
        os.close(fd)
    return FileDigest(Hash(algorithm, hasher.digest()), size)


# ---------------------------------------------------------------------------------------
# Hash values and their text forms


def nix32_encode(raw: bytes) -> str:
    """Nix's base-32 form: the digest read as a little-endian number, most significant
    5-bit group first (so the last character holds the lowest bits of byte 0)."""
    length = (len(raw) * 8 - 1) // 5 + 1 if raw else 0
    number = int.from_bytes(raw, "little")
    return "".join(NIX32_ALPHABET[(number >> (5 * n)) & 31] for n in range(length - 1, -1, -1))


def nix32_length(size: int) -> int:
    return (size * 8 - 1) // 5 + 1


def nix32_decode(text: str, size: int, *, what: str = "hash") -> bytes:
    """Inverse of `nix32_encode` for a digest of ``size`` bytes; refuses stray characters
    and values whose high bits overflow the digest (Nix refuses those too)."""
    if len(text) != nix32_length(size):
        raise InputError(
            f"{what}: expected {nix32_length(size)} nix32 characters, got {len(text)}: "
            f"{_shown(text)}"
        )
    number = 0
    for position, char in enumerate(text):
        digit = _NIX32_VALUES.get(char)
        if digit is None:
            raise InputError(
                f"{what}: character {char!r} at position {position} is not in the nix32 "
                f"alphabet {NIX32_ALPHABET!r}: {_shown(text)}"
            )
        number = (number << 5) | digit
    if number >> (size * 8):
        raise InputError(f"{what}: nix32 value overflows a {size}-byte digest: {_shown(text)}")
    return number.to_bytes(size, "little")


@dataclass(frozen=True)
class Hash:
    """A digest with its algorithm; prints itself in every form Nix uses."""

    algorithm: str
    digest: bytes

    def __post_init__(self) -> None:
        size = HASH_SIZES.get(self.algorithm)
        if size is None:
            raise InputError(f"unknown hash algorithm {self.algorithm!r}; known: {_known()}")
        if len(self.digest) != size:
            raise InputError(
                f"{self.algorithm} digest must be {size} bytes, got {len(self.digest)}"
            )

    @property
    def base16(self) -> str:
        return self.digest.hex()

    @property
    def nix32(self) -> str:
        return nix32_encode(self.digest)

    @property
    def base64(self) -> str:
        return base64.b64encode(self.digest).decode("ascii")

    @property
    def sri(self) -> str:
        return f"{self.algorithm}-{self.base64}"

    def format(self, form: str) -> str:
        """``sri`` gives ``sha256-…=``; the others give the bare encoding."""
        if form == "sri":
            return self.sri
        if form == "base16":
            return self.base16
        if form == "nix32":
            return self.nix32
        if form == "base64":
            return self.base64
        raise InputError(f"unknown hash form {form!r}; known: {', '.join(HASH_FORMS)}")

    def prefixed(self, form: str) -> str:
        """``<algorithm>:<encoding>``, the form Nix uses in narinfo and older CLIs."""
        if form == "sri":
            return self.sri
        return f"{self.algorithm}:{self.format(form)}"

    def __str__(self) -> str:
        return self.sri


def parse_hash(
    text: str, algorithm: str | None = None, *, what: str = "hash", algorithm_option: str | None = None
) -> Hash:
    """Parse a hash written in any form Nix accepts.

    Accepted: SRI ``sha256-<base64>``; ``sha256:<base16|nix32|base64>``; or a bare
    base16/nix32/base64 digest when ``algorithm`` is given. The encoding of a bare or
    prefixed digest is told by its length, which never collides within one algorithm.
    When ``algorithm`` is given, a prefix naming another algorithm is refused. ``what``
    names the place in error messages (for example ``inputs[3].narHash``).
    """
    if not isinstance(text, str):
        raise InputError(f"{what}: expected a hash string, got {type(text).__name__}")
    if algorithm is not None and algorithm not in HASH_SIZES:
        raise InputError(f"{what}: unknown hash algorithm {algorithm!r}; known: {_known()}")
    if not text:
        raise InputError(f"{what}: empty hash")
    if text != text.strip():
        raise InputError(f"{what}: leading or trailing whitespace in hash: {_shown(text)}")

    prefix, separator, encoded = _split_algorithm(text)
    if separator:
        if prefix not in HASH_SIZES:
            raise InputError(
                f"{what}: unknown hash algorithm {prefix!r} in {_shown(text)}; known: {_known()}"
            )
        if algorithm is not None and prefix != algorithm:
            raise InputError(f"{what}: expected a {algorithm} hash, got {prefix}: {_shown(text)}")
        if separator == "-":
            return Hash(prefix, _decode_base64(encoded, HASH_SIZES[prefix], what=what))
        return Hash(prefix, _decode_by_length(encoded, prefix, what=what))
    if algorithm is None:
        # ``algorithm_option``: the caller's flag that names it (the CLI's --type)
        named_by = f"it with {algorithm_option} sha256" if algorithm_option else "the algorithm"
        raise InputError(
            f"{what}: no algorithm in {_shown(text)}; write it as SRI (sha256-…) or "
            f"prefixed (sha256:…), or name {named_by}"
        )
    return Hash(algorithm, _decode_by_length(text, algorithm, what=what))


def convert_hash(text: str, to: str, algorithm: str | None = None, *, what: str = "hash") -> str:
    """Re-encode a hash given in any accepted form (see `parse_hash`) into ``to``."""
    if to not in HASH_FORMS:
        raise InputError(f"unknown hash form {to!r}; known: {', '.join(HASH_FORMS)}")
    return parse_hash(text, algorithm, what=what).format(to)


def _split_algorithm(text: str) -> tuple[str, str, str]:
    """Split off ``algo:`` or ``algo-`` (SRI) at the first separator; no digest encoding
    (base16, nix32, standard base64) uses either character."""
    colon = text.find(":")
    dash = text.find("-")
    cut = min((index for index in (colon, dash) if index >= 0), default=-1)
    if cut < 0:
        return "", "", text
    return text[:cut], text[cut], text[cut + 1 :]


def _decode_by_length(encoded: str, algorithm: str, *, what: str) -> bytes:
    size = HASH_SIZES[algorithm]
    if len(encoded) == size * 2:
        if not all(char in _HEX_DIGITS for char in encoded):
            bad = next(char for char in encoded if char not in _HEX_DIGITS)
            raise InputError(
                f"{what}: {algorithm} base16 digest has non-hex character {bad!r}: "
                f"{_shown(encoded)}"
            )
        return bytes.fromhex(encoded)
    if len(encoded) == nix32_length(size):
        return nix32_decode(encoded, size, what=what)
    if len(encoded) == _base64_length(size):
        return _decode_base64(encoded, size, what=what)
    raise InputError(
        f"{what}: a {algorithm} digest is {size * 2} base16, {nix32_length(size)} nix32 or "
        f"{_base64_length(size)} base64 characters; got {len(encoded)}: {_shown(encoded)}"
    )


def _decode_base64(encoded: str, size: int, *, what: str) -> bytes:
    if len(encoded) != _base64_length(size):
        raise InputError(
            f"{what}: expected {_base64_length(size)} base64 characters for a {size}-byte "
            f"digest, got {len(encoded)}: {_shown(encoded)}"
        )
    try:
        raw = base64.b64decode(encoded.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise InputError(f"{what}: malformed base64 digest: {_shown(encoded)}") from exc
    # Refuse non-canonical spellings (stray low bits before '='): two texts, one digest,
    # would break byte-identical round trips of locks.
    if len(raw) != size or base64.b64encode(raw).decode("ascii") != encoded:
        raise InputError(f"{what}: non-canonical base64 digest: {_shown(encoded)}")
    return raw


def _base64_length(size: int) -> int:
    return (size + 2) // 3 * 4


def _known() -> str:
    return ", ".join(HASH_SIZES)


def _shown(text: str) -> str:
    if len(text) > _SHOWN_INPUT:
        return repr(text[:_SHOWN_INPUT] + "…")
    return repr(text)


def new_hasher(algorithm: str) -> hashlib._Hash:
    if algorithm not in HASH_SIZES:
        raise InputError(f"unknown hash algorithm {algorithm!r}; known: {_known()}")
    return hashlib.new(algorithm)


# ---------------------------------------------------------------------------------------
# Reading one file for hashing: never through a symlink, never blocking on a FIFO

OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_regular(path: bytes) -> int:
    try:
        return os.open(path, OPEN_FLAGS)
    except OSError as exc:
        raise unreadable(path, exc) from exc


def read_exactly(fd: int, size: int, path: bytes) -> bytes:
    try:
        content = os.read(fd, size)
        while len(content) < size:
            more = os.read(fd, size - len(content))
            if not more:
                raise changed_while_read(path)
            content += more
    except OSError as exc:
        raise unreadable(path, exc) from exc
    return content


def readv_into(fd: int, view: memoryview, path: bytes) -> int:
    try:
        return os.readv(fd, [view])
    except OSError as exc:
        raise unreadable(path, exc) from exc


def lstat_mode(path: bytes) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError as exc:
        raise unreadable(path, exc) from exc


def unsupported_file(path: bytes, mode: int) -> InputError:
    return InputError(
        f"{os.fsdecode(path)}: is {file_kind(mode)}; only regular files, symlinks and "
        f"directories can be hashed"
    )


def unreadable(path: bytes, exc: OSError) -> InputError:
    reason = exc.strerror or str(exc)
    return InputError(f"{os.fsdecode(path)}: cannot read: {reason}")


def changed_while_read(path: bytes) -> InputError:
    return InputError(f"{os.fsdecode(path)}: file changed size while being read")


# ---------------------------------------------------------------------------------------
# Digest strings (``sha256:<hex>``, the OCI form) and the digests derived from others

# The one digest form: matched whole (``fullmatch``: no trailing newline slips through ``$``).
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")


def sha256_digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def digest_hex(digest: str) -> str:
    """The hex part of a ``sha256:<hex>`` digest; anything else is refused."""
    if not DIGEST_PATTERN.fullmatch(digest):
        raise InputError(f"not a sha256 digest: {digest!r} (expected sha256:<64 lowercase hex>)")
    return digest[len("sha256:") :]


def is_digest(text: object) -> TypeGuard[str]:
    return isinstance(text, str) and DIGEST_PATTERN.fullmatch(text) is not None


# A file's sha256 as locks, receipts and manifests write it: the bare 64 lowercase hex digits.
SHA256_HEX_PATTERN = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(text: object) -> TypeGuard[str]:
    return isinstance(text, str) and SHA256_HEX_PATTERN.fullmatch(text) is not None


# A git object id: 40 hex digits (sha1 object format) or 64 (sha256), matched whole.
GIT_OBJECT_ID_PATTERN = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def chain_id(diff_ids: Sequence[str]) -> str:
    """ChainID of a layer stack (OCI image spec, config.md): ChainID(L0) = DiffID(L0),
    ChainID(L0..Ln) = sha256(ChainID(L0..Ln-1) + " " + DiffID(Ln))."""
    if not diff_ids:
        raise InputError("chain ID of an empty layer list is undefined")
    current = diff_ids[0]
    for diff_id in diff_ids[1:]:
        current = sha256_digest(f"{current} {diff_id}".encode("ascii"))
    return current
