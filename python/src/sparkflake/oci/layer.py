"""Build one layer blob in a single streaming pass.

The tar stream is produced once (``tar_stream``) and hashed as it is produced (diffID).
In block mode (the default, see ``compression``) it is cut into fixed blocks compressed
by a pool of threads, one per core; the compressed blocks are taken back in order,
hashed (blob digest) and written into the blob store. zlib, libdeflate, libzstd and
hashlib release the GIL on large buffers, so reading, hashing and compressing overlap on
every core. At
most ``2 x threads + 2`` blocks are in flight, which caps memory whatever the layer size.
In stream mode (block size 0) one compressor thread sits behind a bounded queue.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import os
import queue
import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..core.counts import ascii_count
from ..core.errors import InputError
from ..core.progress import ProgressCallback
from ..core.records import field_record
from .blob_store import BlobStore
from .compression import (
    DEFLATE_WINDOW,
    GZIP_HEADER,
    Compression,
    Compressor,
    deflate_block,
    gzip_member,
    gzip_trailer,
    zstd_block,
)
from .layer_cache import InputFingerprint, LayerCache
from .layer_input import LayerInput
from .layer_tree import ScannedEntry, scan_layer_input
from .tar_stream import EntryKind, iter_tar_chunks

QUEUE_CHUNKS = 8
DEFAULT_SOURCE_DATE_EPOCH = 1
# A layer's digests and sizes, as ``digests.json`` lists each layer; a layer's own record
# (the layer cache's, the receipt's) adds how its blob was compressed.
LAYER_DIGEST_FIELDS = ("digest", "diff_id", "size", "media_type", "uncompressed_size")


@dataclass(frozen=True)
class LayerOptions:
    compression: Compression = Compression("gzip")
    source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH

    def __post_init__(self) -> None:
        if not isinstance(self.source_date_epoch, int) or not 0 <= self.source_date_epoch < 8**11:
            raise InputError(
                f"SOURCE_DATE_EPOCH {self.source_date_epoch!r} must be an integer "
                f"between 0 and {8**11 - 1}"
            )

    def as_record(self) -> dict[str, object]:
        return {
            "compression": self.compression.as_record(),
            "source_date_epoch": self.source_date_epoch,
        }


@dataclass(frozen=True)
class Layer:
    """A built layer: what a manifest descriptor and a config rootfs entry need."""

    digest: str
    diff_id: str
    size: int
    media_type: str
    uncompressed_size: int
    blob_path: Path
    compression: str
    from_cache: bool = False

    def as_record(self) -> dict[str, object]:
        return field_record(self, (*LAYER_DIGEST_FIELDS, "compression"))


def cached_layer(record: dict[str, Any], store: BlobStore) -> Layer | None:
    """The layer a cache record describes, if its blob is in ``store`` and verified
    (``BlobStore.verified``: a bad blob is evicted, and the layer is made again)."""
    blob_path = store.verified(record["digest"], record["size"])
    return None if blob_path is None else _recorded_layer(record, blob_path)


def cached_layers(records: Sequence[dict[str, Any]], store: BlobStore) -> list[Layer | None]:
    """``cached_layer`` of each record, in order; blobs whose verification record went
    stale are hashed again on every core at once (``BlobStore.verified_all``)."""
    paths = store.verified_all([(record["digest"], record["size"]) for record in records])
    return [None if path is None else _recorded_layer(record, path) for record, path in zip(records, paths, strict=True)]


def _recorded_layer(record: dict[str, Any], blob_path: Path) -> Layer:
    return Layer(
        digest=record["digest"],
        diff_id=record["diff_id"],
        size=record["size"],
        media_type=record["media_type"],
        uncompressed_size=record["uncompressed_size"],
        blob_path=blob_path,
        compression=record["compression"],
        from_cache=True,
    )


def record_by_fingerprint(layer_input: LayerInput, options: LayerOptions, cache: LayerCache) -> dict[str, Any] | None:
    """The cache record of an input whose fingerprint is recorded (no scan, no tar, no
    compression; one walk, or none when the tree sources carry their walks), or None:
    ``build_layer`` then does the work. Its blob is not checked yet (``cached_layers``)."""
    return _record_for_fingerprint(cache.input_fingerprint(layer_input, options.as_record()), cache)


def _record_for_fingerprint(fingerprint: InputFingerprint | None, cache: LayerCache) -> dict[str, Any] | None:
    known = None if fingerprint is None else cache.key_for_fingerprint(fingerprint.digest)
    return None if known is None else cache.lookup(known)


def build_layer(
    layer_input: LayerInput,
    options: LayerOptions,
    store: BlobStore,
    cache: LayerCache | None = None,
    progress: ProgressCallback | None = None,
) -> Layer:
    """Build (or fetch from ``cache``) the blob of one layer into ``store``. With a
    cache, an input whose fingerprint is recorded is looked up without a scan."""
    fingerprint = None
    if cache is not None:
        fingerprint = cache.input_fingerprint(layer_input, options.as_record())
        recorded = _record_for_fingerprint(fingerprint, cache)
        layer = None if recorded is None else cached_layer(recorded, store)
        if layer is not None:
            return layer
    entries = scan_layer_input(layer_input)
    key = None
    layer = None
    if cache is not None:
        key = cache.key(entries, options.as_record(), progress)
        cache.save()
        cached = cache.lookup(key)
        layer = None if cached is None else cached_layer(cached, store)
    if layer is None:
        layer = write_layer_blob(entries, options, store, progress)
        if cache is not None and key is not None:
            cache.record(key, layer.as_record())
    if cache is not None and key is not None and fingerprint is not None and fingerprint.settled:
        # recorded only if the input did not change while the key was computed
        if cache.input_fingerprint(layer_input, options.as_record(), fresh=True) == fingerprint:
            cache.remember_fingerprint(fingerprint.digest, key)
    return layer


def write_layer_blob(
    entries: Sequence[ScannedEntry],
    options: LayerOptions,
    store: BlobStore,
    progress: ProgressCallback | None = None,
) -> Layer:
    total = sum(s.entry.size for s in entries if s.entry.kind is EntryKind.FILE)
    tar_entries = [s.entry for s in entries]
    diff_hasher = hashlib.sha256()
    tar_size = 0
    file_bytes_done = 0
    compression = options.compression
    with store.new_blob() as (handle, tmp_path):
        sink: _BlockSink | _CompressingSink
        if compression.block_size:
            sink = _BlockSink(compression, handle)
        else:
            sink = _CompressingSink(compression, handle)
        try:
            for chunk in iter_tar_chunks(tar_entries, options.source_date_epoch):
                diff_hasher.update(chunk)
                tar_size += len(chunk)
                sink.put(chunk)
                if progress is not None and file_bytes_done < total:
                    file_bytes_done = min(total, file_bytes_done + len(chunk))
                    if file_bytes_done < total:  # the final call comes once, below
                        progress(file_bytes_done, total, "layer")
        except BaseException:
            sink.abort()
            raise
        blob_hex, blob_size = sink.finish()
        diff_id = "sha256:" + diff_hasher.hexdigest()
        digest = diff_id if compression.algorithm == "none" else "sha256:" + blob_hex
        handle.flush()
    blob_path = store.commit(tmp_path, digest)
    if progress is not None:
        progress(total, total, "layer")
    return Layer(
        digest=digest,
        diff_id=diff_id,
        size=blob_size,
        media_type=compression.media_type,
        uncompressed_size=tar_size,
        blob_path=blob_path,
        compression=compression.description,
    )


def _blob_write_error(exc: OSError) -> InputError:
    """Writing the blob failed (a full disk): the store's directory, which the store's
    writer names (``BlobStore.new_blob``), and the reason."""
    where = f"{exc.filename}: " if exc.filename else ""
    return InputError(f"{where}cannot write layer blob: {exc.strerror or exc}")


class _CompressingSink:
    """Compress, hash and write chunks on a worker thread behind a bounded queue."""

    _DONE = object()

    def __init__(self, compression: Compression, handle: BinaryIO) -> None:
        self._handle = handle
        self._compressor = Compressor(compression)
        self._hasher = hashlib.sha256()
        self._size = 0
        self._failure: BaseException | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_CHUNKS)  # chunks, then _DONE
        self._thread = threading.Thread(target=self._run, name="layer-compressor", daemon=True)
        self._thread.start()

    def _emit(self, compressed: bytes) -> None:
        if compressed:
            self._hasher.update(compressed)
            self._handle.write(compressed)
            self._size += len(compressed)

    def _run(self) -> None:
        while True:
            chunk = self._queue.get()
            if chunk is self._DONE:
                if self._failure is None:
                    try:
                        self._emit(self._compressor.flush())
                    except BaseException as exc:  # reported by finish()
                        self._failure = exc
                return
            if self._failure is not None:
                continue  # keep draining so the producer never blocks
            try:
                self._emit(self._compressor.compress(chunk))
            except BaseException as exc:
                self._failure = exc

    def put(self, chunk: bytes | bytearray) -> None:
        if self._failure is not None:
            self._raise_failure()
        self._queue.put(chunk)

    def finish(self) -> tuple[str, int]:
        self._queue.put(self._DONE)
        self._thread.join()
        if self._failure is not None:
            self._raise_failure()
        return self._hasher.hexdigest(), self._size

    def abort(self) -> None:
        self._failure = self._failure or InputError("layer build aborted")
        self._queue.put(self._DONE)
        self._thread.join()

    def _raise_failure(self) -> None:
        failure = self._failure
        if isinstance(failure, OSError):
            raise _blob_write_error(failure) from failure
        assert failure is not None
        raise failure


_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_allocator_tuned = False


def _keep_block_buffers_mapped() -> None:
    """Block mode allocates and frees buffers of one to a few MiB all the time. glibc
    serves those with fresh mmap()s or trims them off the heap after each free, so every
    block costs page faults and page zeroing (about 0.5 CPU s per GB here). Raising the
    mmap and trim thresholds once per process lets freed buffers be reused; memory stays
    bounded by the blocks in flight. Other C libraries are left alone."""
    global _allocator_tuned
    if _allocator_tuned:
        return
    _allocator_tuned = True
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, 64 << 20)
    mallopt(_M_TRIM_THRESHOLD, 256 << 20)


MAX_COMPRESSION_THREADS = 9999  # past it a typo, not a machine: the default is taken


def compression_threads() -> int:
    """Threads for block compression; changes speed only, never the bytes."""
    configured = os.environ.get("SPARKFLAKE_COMPRESSION_THREADS", "")
    threads = ascii_count(configured)
    if threads is not None and 0 < threads <= MAX_COMPRESSION_THREADS:
        return threads
    return max(1, len(os.sched_getaffinity(0)))


class _BlockSink:
    """Cut the stream into fixed blocks, compress them in parallel, write them in order."""

    def __init__(self, compression: Compression, handle: BinaryIO) -> None:
        assert compression.block_size and compression.level is not None
        self._compression = compression
        self._block_size = compression.block_size
        self._level = compression.level
        # zlib gzip: one member made of primed raw-deflate blocks (header, CRC, trailer
        # here); libdeflate gzip: each block is a whole member; zstd: each block a frame.
        self._gzip = compression.algorithm == "gzip" and compression.implementation == "zlib"
        self._members = compression.algorithm == "gzip" and compression.implementation == "libdeflate"
        self._handle = handle
        self._hasher = hashlib.sha256()
        self._size = 0
        self._pieces: collections.deque[memoryview] = collections.deque()
        self._buffered = 0
        self._previous_tail = b""
        self._crc = 0
        self._plain_size = 0
        self._blocks = 0
        _keep_block_buffers_mapped()
        threads = compression_threads()
        self._window = 2 * threads + 2
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="layer-block")
        self._pending: collections.deque[Future[bytes | bytearray]] = collections.deque()
        if self._gzip:
            self._emit(GZIP_HEADER)

    def _emit(self, compressed: bytes | bytearray) -> None:
        if compressed:
            self._hasher.update(compressed)
            self._handle.write(compressed)
            self._size += len(compressed)

    def _submit(self, block: bytes, final: bool) -> None:
        future: Future[bytes | bytearray]  # libdeflate's gzip members are bytearrays
        if self._gzip:
            self._crc = zlib.crc32(block, self._crc)
            self._plain_size += len(block)
            future = self._pool.submit(
                deflate_block, block, self._previous_tail, self._level, final
            )
            self._previous_tail = block[-DEFLATE_WINDOW:]
        elif self._members:
            future = self._pool.submit(gzip_member, block, self._level)
        else:
            future = self._pool.submit(zstd_block, block, self._level)
        self._blocks += 1
        self._pending.append(future)
        while len(self._pending) > self._window:
            self._emit(self._pending.popleft().result())

    def put(self, chunk: bytes | bytearray) -> None:
        """Take a chunk the caller will not modify again; blocks are cut with one copy
        (a join of the pieces), or none when a piece is exactly one block."""
        if not chunk:
            return
        self._pieces.append(memoryview(chunk))
        self._buffered += len(chunk)
        size = self._block_size
        while self._buffered >= size:
            self._submit(self._take(size), final=False)

    def _take(self, size: int) -> bytes:
        taken: list[memoryview] = []
        need = size
        pieces = self._pieces
        while need:
            piece = pieces[0]
            if len(piece) <= need:
                taken.append(pieces.popleft())
                need -= len(piece)
            else:
                taken.append(piece[:need])
                pieces[0] = piece[need:]
                need = 0
        self._buffered -= size
        if len(taken) == 1 and isinstance(taken[0].obj, bytes) and len(taken[0].obj) == size:
            return taken[0].obj
        return b"".join(taken)

    def finish(self) -> tuple[str, int]:
        try:
            tail = self._take(self._buffered)
            if self._gzip:
                self._submit(tail, final=True)  # the final deflate block, even if empty
            elif tail or self._blocks == 0:
                self._submit(tail, final=True)
            while self._pending:
                self._emit(self._pending.popleft().result())
            if self._gzip:
                self._emit(gzip_trailer(self._crc, self._plain_size))
        except OSError as exc:
            raise _blob_write_error(exc) from exc
        finally:
            self._pool.shutdown(wait=True)
        return self._hasher.hexdigest(), self._size

    def abort(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)
