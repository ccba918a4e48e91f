"""A layer blob's decompressed bytes as a readable file object, hashed as they pass: the
one streaming decompression of a layer (verification's scan, which the receipt check's
merged filesystem reads too, and the runtime check's unpack).

A worker thread reads the blob once, hashes it as stored (blob digest, size), detects
its compression from its first bytes and decompresses it: gzip on every core
(``member_inflate``: our layers are 4 MiB members, inflated in parallel and given on in
order), zstd in the worker itself; the reading thread hashes the decompressed bytes as it
takes them (diffID). zlib, zstd and sha256 release the GIL, so the threads overlap like
``gzip -dc | sha256sum`` does, but with inflation (most of the cost) spread over the cores. Decompression gives pieces
of at most ``decompression.PIECE_BYTES`` (one zstd block more) and the queue holds
``QUEUE_CHUNKS`` of them: what a bomb costs in memory is that, not its inflated size.

An error (the blob cannot be read, a corrupt or truncated stream, more decompressed bytes
than the bound) is raised in the reading thread after the last good bytes: ``OSError``
as the read gave it, ``ValueError`` for the stream. After a ``ValueError`` the worker still
reads the rest of the blob, so ``digests()`` names the whole blob as stored; ``close()``
(or leaving the ``with`` block) stops it instead and waits for it to end.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

from ..core.errors import CheckFailed
from .decompression import Decompressor, detect_compression
from .member_inflate import MemberInflater
from .types import BlobRef

READ_CHUNK = 1 << 20
QUEUE_CHUNKS = 8
MAGIC_BYTES = 4  # the longest magic detect_compression reads (zstd's)
_END = object()  # put once by the worker: the stream ended, or failed (``_error``)


@dataclass(frozen=True)
class LayerDigests:
    blob_digest: str
    size: int
    compression: str  # gzip, zstd or none, from the blob's first bytes
    diff_id: str | None  # None unless the stream was read to its end without an error
    uncompressed_size: int  # decompressed bytes the reading thread took

    def refuse_difference(self, ref: BlobRef, where: str, diff_id: str | None) -> None:
        """``CheckFailed`` where these bytes are not the blob ``ref`` names, or do not
        decompress to ``diff_id`` (the config's; None: not compared)."""
        if ref.digest is not None and self.blob_digest != ref.digest:
            raise CheckFailed(f"{ref.role} blob {where} has digest {self.blob_digest}, expected {ref.digest}",
                              check_id="oci.blob-digest")
        if diff_id is not None and self.diff_id != diff_id:
            raise CheckFailed(f"{ref.role} {ref.digest or where}: uncompressed digest (diffID) is {self.diff_id}, "
                              f"the config says {diff_id}", check_id="oci.layer-diff-id")


class LayerStream:
    """``with LayerStream(handle) as stream:`` then ``read(size)`` (a file object for
    ``tarfile`` "r|") or ``chunks()``, then ``digests()``. ``on_bytes`` is called in the
    worker thread with the size of every blob chunk read."""

    def __init__(
        self,
        handle: BinaryIO,
        *,
        max_uncompressed_bytes: int | None = None,
        on_bytes: Callable[[int], None] | None = None,
        segments: dict[str, int] | None = None,
    ) -> None:
        self._handle = handle
        self._bound = max_uncompressed_bytes
        self._on_bytes = on_bytes
        self._segments = segments or {}  # MemberInflater's threads, min_segment, max_segment (tests)
        self._blob_hasher = hashlib.sha256()
        self._diff_hasher = hashlib.sha256()
        self._size = 0
        self._uncompressed_size = 0
        self._plain_total = 0  # decompressed by the worker (the bound's count)
        self._compression = "none"
        self._error: BaseException | None = None
        self._complete = False  # the worker decompressed the whole blob without an error
        self._ended = False
        self._pending = b""
        self._offset = 0
        self._stop = threading.Event()
        self._chunks: queue.Queue[object] = queue.Queue(maxsize=QUEUE_CHUNKS)
        self._worker = threading.Thread(target=self._produce, name="layer-stream", daemon=True)
        self._worker.start()

    def __enter__(self) -> LayerStream:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _produce(self) -> None:
        try:
            chunk = self._head()
            algorithm = detect_compression(chunk) if chunk else "none"
            if algorithm == "gzip":
                self._compression = algorithm
                self._produce_gzip(chunk)
            else:
                self._produce_serially(chunk)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the reading thread
            if self._error is None:  # after a stream error that error stands
                self._fail(exc)

    def _read_on(self, chunk: bytes) -> bytes:
        """Hash a chunk as stored; the next one."""
        self._blob_hasher.update(chunk)
        self._size += len(chunk)
        if self._on_bytes is not None:
            self._on_bytes(len(chunk))
        return self._handle.read(READ_CHUNK)

    def _produce_serially(self, chunk: bytes) -> None:
        failed = False
        decompressor = Decompressor(detect_compression(chunk)) if chunk else None
        if decompressor is not None:
            self._compression = decompressor.algorithm
        while chunk and not self._stop.is_set():
            if not failed:
                assert decompressor is not None
                try:
                    for plain in decompressor.pieces(chunk):
                        if self._stop.is_set():
                            return
                        self._pass_on(plain)
                except ValueError as exc:
                    failed = True  # the rest of the blob is hashed, not decompressed
                    self._fail(exc)
            chunk = self._read_on(chunk)
        if failed or self._stop.is_set():
            return
        if decompressor is not None:
            decompressor.finish()
        self._complete = True
        self._chunks.put(_END)

    def _produce_gzip(self, chunk: bytes) -> None:
        """gzip members are inflated on every core (``member_inflate``) while this
        thread reads and hashes the blob."""
        inflater = MemberInflater(self._pass_on, self._stop, **self._segments)
        try:
            while chunk and not self._stop.is_set():
                inflater.add(chunk)
                chunk = self._read_on(chunk)
        except BaseException:
            inflater.abandon()
            inflater.result()
            raise
        inflater.end()
        error = inflater.result()
        if self._stop.is_set():
            return
        if error is not None:
            self._fail(error)
            return
        self._complete = True
        self._chunks.put(_END)

    def _head(self) -> bytes:
        """The first chunk, with at least the bytes that name its compression (a stream
        may give fewer on one read)."""
        head = self._handle.read(READ_CHUNK)
        while head and len(head) < MAGIC_BYTES and (more := self._handle.read(READ_CHUNK)):
            head += more
        return head

    def _pass_on(self, plain: bytes) -> None:
        self._plain_total += len(plain)
        if self._bound is not None and self._plain_total > self._bound:
            raise ValueError(f"decompresses to more than the bound of {self._bound} bytes")
        self._chunks.put(plain)

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._chunks.put(_END)

    def _next_chunk(self) -> bytes | None:
        """The next decompressed chunk (hashed for the diffID), or None at the end."""
        if self._ended:
            return None
        item = self._chunks.get()
        if item is _END:
            self._ended = True
            return None
        assert isinstance(item, bytes)
        self._diff_hasher.update(item)
        self._uncompressed_size += len(item)
        return item

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def chunks(self) -> Iterator[bytes]:
        """The decompressed bytes as the worker gives them (no copy)."""
        if self._offset < len(self._pending):
            yield self._pending[self._offset:]
        self._pending, self._offset = b"", 0
        while (chunk := self._next_chunk()) is not None:
            yield chunk
        self._raise_error()

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._pending) - self._offset < size:
            chunk = self._next_chunk()
            if chunk is None:
                if self._offset == len(self._pending):
                    self._raise_error()
                break
            # what is left is copied once per chunk, not once per read
            self._pending = self._pending[self._offset:] + chunk
            self._offset = 0
        end = len(self._pending) if size < 0 else min(len(self._pending), self._offset + size)
        out = self._pending[self._offset:end]
        self._offset = end
        return out

    def drain(self) -> None:
        """Read to the end (what follows a tar archive's end-of-archive blocks is hashed
        too, and a truncated stream is noticed)."""
        for _ in self.chunks():
            pass

    def digests(self) -> LayerDigests:
        """The digests of what was read; waits for the worker to finish the blob."""
        while self._next_chunk() is not None:
            pass
        self._worker.join()
        return LayerDigests(
            blob_digest="sha256:" + self._blob_hasher.hexdigest(),
            size=self._size,
            compression=self._compression,
            diff_id="sha256:" + self._diff_hasher.hexdigest() if self._complete else None,
            uncompressed_size=self._uncompressed_size,
        )

    def close(self) -> None:
        """Stop the worker (the rest of the blob is not read) and wait for it to end."""
        self._stop.set()
        while self._worker.is_alive():
            try:
                self._chunks.get(timeout=0.1)  # a worker blocked on a full queue sees the stop
            except queue.Empty:
                pass
        self._worker.join()
        self._ended = True
