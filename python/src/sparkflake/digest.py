"""Digests of files and trees.

File digests are streamed (fixed-size reads, one pass). Three families live here:

- plain file digests (`sha256_file`, `file_hash`);
- hash text forms as Nix prints them — SRI (``sha256-<base64>``), base16, and nix32
  (Nix's base-32 alphabet, least significant 5-bit group printed last) — with one strict
  parser (`parse_hash`) and converters (`Hash.format`, `convert_hash`);
- tree digests: the NAR serialization of a path and its hash (`nar_serialize`,
  `nar_digest`, `nar_hash`), equal to ``nix hash path``; and git object ids
  (`git_blob_id`, `git_tree_id`), equal to what ``git add -A && git write-tree`` stores.

Tree walks read each file once, in `READ_CHUNK` pieces, and feed the hash directly: the
NAR framing and the file bytes go through one hasher in the same pass, nothing is
serialized to a buffer first. Paths are handled as bytes end to end so names that are not
valid UTF-8 hash exactly as the file system holds them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .errors import InputError

READ_CHUNK = 1 << 20

# Files up to this size are read with one read(); larger ones in READ_CHUNK pieces into
# one reused buffer. Framing and content go to the hasher as separate pieces: joining
# them would copy every file's bytes once more. Files are read, not mapped: a file
# truncated while mapped kills the process with SIGBUS instead of raising an error.
_SMALL_FILE = 64 << 10

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
    hasher = _new_hasher(algorithm)
    encoded = os.fsencode(path)
    try:
        fd = os.open(encoded, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(encoded, exc) from exc
    buffer = memoryview(bytearray(READ_CHUNK))
    size = 0
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{os.fsdecode(encoded)}: is a directory, expected a file")
        if not stat.S_ISREG(mode):
            raise _unsupported(encoded, mode)
        while count := _readv(fd, buffer, encoded):
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


def _new_hasher(algorithm: str) -> hashlib._Hash:
    if algorithm not in HASH_SIZES:
        raise InputError(f"unknown hash algorithm {algorithm!r}; known: {_known()}")
    return hashlib.new(algorithm)


# ---------------------------------------------------------------------------------------
# NAR serialization
#
# A NAR is a sequence of strings, each an 8-byte little-endian length, the bytes, and
# zero padding to a multiple of 8. Directory entries come sorted by name bytes (Nix keeps
# them in a std::map<std::string>). Only the owner-execute bit of a file is kept.

NarSink = Callable[[bytes | bytearray | memoryview], object]


def _nar_string(value: bytes) -> bytes:
    return len(value).to_bytes(8, "little") + value + bytes(-len(value) % 8)


_PADDING = bytes(8)
_NAR_MAGIC = _nar_string(b"nix-archive-1")
_NAR_OPEN = _nar_string(b"(")
_NAR_CLOSE = _nar_string(b")")
_NAR_REGULAR = _NAR_OPEN + _nar_string(b"type") + _nar_string(b"regular") + _nar_string(b"contents")
_NAR_EXECUTABLE = (
    _NAR_OPEN
    + _nar_string(b"type")
    + _nar_string(b"regular")
    + _nar_string(b"executable")
    + _nar_string(b"")
    + _nar_string(b"contents")
)
_NAR_SYMLINK = _NAR_OPEN + _nar_string(b"type") + _nar_string(b"symlink") + _nar_string(b"target")
_NAR_DIRECTORY = _NAR_OPEN + _nar_string(b"type") + _nar_string(b"directory")
_NAR_ENTRY_NAME = _nar_string(b"entry") + _NAR_OPEN + _nar_string(b"name")
_NAR_NODE = _nar_string(b"node")
_NAR_ENTRY_END = _NAR_CLOSE + _NAR_CLOSE  # closes the node, then the entry

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_DEPTH = 2000


@dataclass(frozen=True)
class NarDigest:
    """NAR hash of a path and the NAR's length, as ``nix path-info`` reports them."""

    nar_hash: Hash
    nar_size: int


def nar_serialize(path: str | os.PathLike[str] | bytes, sink: NarSink) -> int:
    """Write the NAR serialization of ``path`` to ``sink`` piece by piece; return its size.

    ``sink`` must consume each piece before returning (pieces may be views of a reused
    read buffer). The root is not followed if it is a symlink, as in Nix. Sockets,
    devices and FIFOs are refused with their path.
    """
    walker = _NarWalker(sink)
    walker.dump_root(os.fsencode(path))
    return walker.size


def nar_digest(path: str | os.PathLike[str] | bytes, algorithm: str = "sha256") -> NarDigest:
    """NAR hash and NAR size of ``path`` in one streaming pass."""
    hasher = _new_hasher(algorithm)
    size = nar_serialize(path, hasher.update)
    return NarDigest(Hash(algorithm, hasher.digest()), size)


def nar_hash(path: str | os.PathLike[str] | bytes, algorithm: str = "sha256") -> Hash:
    """What ``nix hash path --type <algorithm> PATH`` prints (as a `Hash`)."""
    return nar_digest(path, algorithm).nar_hash


class _NarWalker:
    def __init__(self, sink: NarSink) -> None:
        self._sink = sink
        self.size = 0
        self._buffer = memoryview(bytearray(READ_CHUNK))

    def _write(self, piece: bytes | bytearray | memoryview) -> None:
        self.size += len(piece)
        self._sink(piece)

    def dump_root(self, path: bytes) -> None:
        try:
            status = os.lstat(path)
        except OSError as exc:
            raise _unreadable(path, exc) from exc
        self._write(_NAR_MAGIC)
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            self._dump_directory(path, 0)
        elif stat.S_ISLNK(mode):
            self._dump_symlink(path)
        elif stat.S_ISREG(mode):
            self._dump_file(path)
        else:
            raise _unsupported(path, mode)

    def _dump_directory(self, path: bytes, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise InputError(f"{os.fsdecode(path)}: directory nesting deeper than {_MAX_DEPTH}")
        entries = _sorted_entries(path)
        self._write(_NAR_DIRECTORY)
        write = self._write
        for entry in entries:
            name = entry.name
            write(_NAR_ENTRY_NAME + _nar_string(name) + _NAR_NODE)
            if entry.is_dir(follow_symlinks=False):
                self._dump_directory(entry.path, depth + 1)
            elif entry.is_symlink():
                self._dump_symlink(entry.path)
            elif entry.is_file(follow_symlinks=False):
                self._dump_file(entry.path)
            else:
                raise _unsupported(entry.path, _lstat_mode(entry.path))
            write(_NAR_CLOSE)
        write(_NAR_CLOSE)

    def _dump_symlink(self, path: bytes) -> None:
        try:
            target = os.readlink(path)
        except OSError as exc:
            raise _unreadable(path, exc) from exc
        self._write(_NAR_SYMLINK + _nar_string(target) + _NAR_CLOSE)

    def _dump_file(self, path: bytes) -> None:
        write = self._write
        fd = _open_regular(path)
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise _unsupported(path, status.st_mode)
            size = status.st_size
            header = _NAR_EXECUTABLE if status.st_mode & stat.S_IXUSR else _NAR_REGULAR
            header += size.to_bytes(8, "little")
            trailer = _PADDING[: -size % 8] + _NAR_CLOSE
            write(header)
            if size <= _SMALL_FILE:
                write(_read_exactly(fd, size, path))
                write(trailer)
                return
            buffer = self._buffer
            remaining = size
            while remaining:
                view = buffer[: min(remaining, READ_CHUNK)]
                count = _readv(fd, view, path)
                if count == 0:
                    raise _changed(path)
                write(view[:count])
                remaining -= count
            write(trailer)
        finally:
            os.close(fd)


def _sorted_entries(path: bytes) -> list[os.DirEntry[bytes]]:
    try:
        with os.scandir(path) as iterator:
            entries = list(iterator)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    entries.sort(key=_entry_name)
    return entries


def _entry_name(entry: os.DirEntry[bytes]) -> bytes:
    return entry.name


def _open_regular(path: bytes) -> int:
    try:
        return os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _read_exactly(fd: int, size: int, path: bytes) -> bytes:
    try:
        content = os.read(fd, size)
        while len(content) < size:
            more = os.read(fd, size - len(content))
            if not more:
                raise _changed(path)
            content += more
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    return content


def _readv(fd: int, view: memoryview, path: bytes) -> int:
    try:
        return os.readv(fd, [view])
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _lstat_mode(path: bytes) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def file_kind(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return f"an unsupported file type (mode {mode:o})"


def _unsupported(path: bytes, mode: int) -> InputError:
    return InputError(
        f"{os.fsdecode(path)}: is {file_kind(mode)}; only regular files, symlinks and "
        f"directories can be hashed"
    )


def _unreadable(path: bytes, exc: OSError) -> InputError:
    reason = exc.strerror or str(exc)
    return InputError(f"{os.fsdecode(path)}: cannot read: {reason}")


def _changed(path: bytes) -> InputError:
    return InputError(f"{os.fsdecode(path)}: file changed size while being read")


# ---------------------------------------------------------------------------------------
# Git object ids
#
# A blob id is H("blob <size>\0" + content); a tree id is H("tree <size>\0" + entries),
# each entry "<mode> <name>\0<raw id>". Modes: 100644, 100755 (owner-execute bit set),
# 120000 (symlink; the blob holds the target), 40000 (tree). Entries sort by name bytes,
# a tree's name compared as if it ended in "/". Directories with nothing to store are
# absent, as git's index cannot hold them. Every file is hashed as-is: no .gitignore, no
# .gitattributes conversion (what `git add --force` with no attributes stores, and what
# a clean checkout of a commit holds).

GitObjectFormat = Literal["sha1", "sha256"]
GIT_OBJECT_FORMATS: tuple[str, ...] = ("sha1", "sha256")

_GIT_HASHERS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256}
_GIT_MODE_FILE = b"100644 "
_GIT_MODE_EXECUTABLE = b"100755 "
_GIT_MODE_SYMLINK = b"120000 "
_GIT_MODE_TREE = b"40000 "


def git_blob_id_of_bytes(content: bytes, object_format: str = "sha1") -> str:
    """Hex object id git gives a blob with these bytes (``git hash-object --stdin``)."""
    hasher = _git_hasher(object_format)()
    hasher.update(b"blob %d\0" % len(content))
    hasher.update(content)
    return hasher.hexdigest()


def git_blob_id(path: str | os.PathLike[str] | bytes, object_format: str = "sha1") -> str:
    """Hex blob id git stores for ``path``: a file's bytes, or a symlink's target."""
    new_hasher = _git_hasher(object_format)
    encoded = os.fsencode(path)
    mode = _lstat_mode(encoded)
    if stat.S_ISLNK(mode):
        return _git_symlink_blob(encoded, new_hasher).hex()
    if stat.S_ISREG(mode):
        return _git_file_blob(encoded, new_hasher, memoryview(bytearray(READ_CHUNK)))[1].hex()
    if stat.S_ISDIR(mode):
        raise InputError(f"{os.fsdecode(encoded)}: is a directory; use the git tree id")
    raise _unsupported(encoded, mode)


def git_tree_id(path: str | os.PathLike[str] | bytes, object_format: str = "sha1") -> str:
    """Hex tree id of a directory as ``git add -A && git write-tree`` would store it.

    ``.git`` entries are excluded at every level. Names git refuses to store (``.GIT``,
    ``git~1``, a symlink named ``.gitmodules``, …) and nested repositories (which git
    records as submodule links, not as their files) are refused with their path.
    """
    new_hasher = _git_hasher(object_format)
    encoded = os.fsencode(path)
    mode = _lstat_mode(encoded)
    if not stat.S_ISDIR(mode):
        raise InputError(f"{os.fsdecode(encoded)}: is not a directory; a git tree id needs one")
    walker = _GitTreeWalker(new_hasher)
    raw = walker.tree(encoded, 0)
    if raw is None:
        raw = _git_object(new_hasher, b"tree", b"")
    return raw.hex()


def _git_hasher(object_format: str) -> Callable[..., hashlib._Hash]:
    new_hasher = _GIT_HASHERS.get(object_format)
    if new_hasher is None:
        raise InputError(
            f"unknown git object format {object_format!r}; known: {', '.join(GIT_OBJECT_FORMATS)}"
        )
    return new_hasher


def _git_object(new_hasher: Callable[..., hashlib._Hash], kind: bytes, body: bytes) -> bytes:
    hasher = new_hasher(kind + b" %d\0" % len(body))
    hasher.update(body)
    return hasher.digest()


def _git_symlink_blob(path: bytes, new_hasher: Callable[..., hashlib._Hash]) -> bytes:
    try:
        target = os.readlink(path)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    return _git_object(new_hasher, b"blob", target)


def _git_file_blob(
    path: bytes, new_hasher: Callable[..., hashlib._Hash], buffer: memoryview
) -> tuple[bytes, bytes]:
    fd = _open_regular(path)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise _unsupported(path, status.st_mode)
        size = status.st_size
        mode = _GIT_MODE_EXECUTABLE if status.st_mode & stat.S_IXUSR else _GIT_MODE_FILE
        hasher = new_hasher(b"blob %d\0" % size)
        if size <= _SMALL_FILE:
            hasher.update(_read_exactly(fd, size, path))
            return mode, hasher.digest()
        remaining = size
        while remaining:
            view = buffer[: min(remaining, READ_CHUNK)]
            count = _readv(fd, view, path)
            if count == 0:
                raise _changed(path)
            hasher.update(view[:count])
            remaining -= count
        return mode, hasher.digest()
    finally:
        os.close(fd)


class _GitTreeWalker:
    def __init__(self, new_hasher: Callable[..., hashlib._Hash]) -> None:
        self._new_hasher = new_hasher
        self._buffer = memoryview(bytearray(READ_CHUNK))

    def tree(self, path: bytes, depth: int) -> bytes | None:
        """Raw tree id of ``path``, or None when git would store nothing for it."""
        if depth > _MAX_DEPTH:
            raise InputError(f"{os.fsdecode(path)}: directory nesting deeper than {_MAX_DEPTH}")
        new_hasher = self._new_hasher
        keyed: list[tuple[bytes, bytes]] = []
        for entry in _sorted_entries(path):
            name = entry.name
            if name == b".git":
                if depth > 0:
                    _refuse_nested_repository(entry)
                continue
            if _git_refuses_name(name):
                raise InputError(
                    f"{os.fsdecode(entry.path)}: git refuses to store a path named "
                    f"{os.fsdecode(name)!r} (it aliases .git)"
                )
            if entry.is_dir(follow_symlinks=False):
                raw = self.tree(entry.path, depth + 1)
                if raw is not None:
                    keyed.append((name + b"/", _GIT_MODE_TREE + name + b"\0" + raw))
            elif entry.is_symlink():
                if _git_refuses_symlink_name(name):
                    raise InputError(
                        f"{os.fsdecode(entry.path)}: git refuses a symlink named "
                        f"{os.fsdecode(name)!r} (it aliases .gitmodules)"
                    )
                raw = _git_symlink_blob(entry.path, new_hasher)
                keyed.append((name, _GIT_MODE_SYMLINK + name + b"\0" + raw))
            elif entry.is_file(follow_symlinks=False):
                mode, raw = _git_file_blob(entry.path, new_hasher, self._buffer)
                keyed.append((name, mode + name + b"\0" + raw))
            else:
                raise _unsupported(entry.path, _lstat_mode(entry.path))
        if not keyed:
            return None
        keyed.sort()
        return _git_object(new_hasher, b"tree", b"".join(record for _, record in keyed))


def _refuse_nested_repository(entry: os.DirEntry[bytes]) -> None:
    """git records a nested repository as a submodule link to its HEAD commit, which is
    not a function of the files; refuse rather than give a different id. A ``.git``
    that is no repository (no HEAD) is skipped by git, and by us."""
    is_repository = entry.is_file(follow_symlinks=False) or os.path.lexists(
        os.path.join(entry.path, b"HEAD")
    )
    if is_repository:
        parent = os.fsdecode(os.path.dirname(entry.path))
        raise InputError(
            f"{parent}: is a nested git repository; git stores it as a submodule link, "
            f"not as files, so its tree id is not a function of the directory"
        )


def _only_ntfs_suffix(rest: bytes, *, backslash: bool) -> bool:
    """NTFS ignores trailing dots and spaces, and ':' starts an alternate data stream."""
    for byte in rest:
        if byte == 0x3A or (backslash and byte == 0x5C):
            return True
        if byte not in (0x20, 0x2E):
            return False
    return True


def _git_refuses_name(name: bytes) -> bool:
    """git's is_ntfs_dotgit (core.protectNTFS is on by default): ".git" in any case, or
    its 8.3 short name "git~1", followed only by dots/spaces or by ':' or '\\'."""
    lowered = name.lower()
    return any(
        lowered.startswith(stem) and _only_ntfs_suffix(lowered[len(stem) :], backslash=True)
        for stem in (b".git", b"git~1")
    )


def _git_refuses_symlink_name(name: bytes) -> bool:
    """git's is_ntfs_dotgitmodules: a symlink may not alias ".gitmodules"."""
    lowered = name.lower()
    if lowered.startswith(b".gitmodules"):
        return _only_ntfs_suffix(lowered[11:], backslash=False)
    if lowered[:7] == b"gitmod~" and lowered[7:8] in (b"1", b"2", b"3", b"4"):
        return _only_ntfs_suffix(lowered[8:], backslash=False)
    return _is_fallback_short_name(lowered, b"gi7eba") and _only_ntfs_suffix(
        lowered[8:], backslash=False
    )


def _is_fallback_short_name(lowered: bytes, prefix: bytes) -> bool:
    """The 8.3 fallback form NTFS derives from a hash: up to 6 characters of ``prefix``,
    '~', a digit 1-9, then digits up to 8 characters in all."""
    if len(lowered) < 8:
        return False
    saw_tilde = False
    index = 0
    while index < 8:
        byte = lowered[index]
        if saw_tilde:
            if not 0x30 <= byte <= 0x39:
                return False
        elif byte == 0x7E:
            index += 1
            if not 0x31 <= lowered[index] <= 0x39:
                return False
            saw_tilde = True
        elif index >= 6 or byte & 0x80 or byte != prefix[index]:
            return False
        index += 1
    return True
