"""Build one layer blob in a single streaming pass.

The tar stream is produced once (``tar_stream``), hashed as it is produced (diffID),
handed through a bounded queue to a compressor thread which compresses it, hashes the
compressed bytes (blob digest) and writes them into the blob store. zlib, libzstd and
hashlib release the GIL on large buffers, so reading+hashing and compressing run on two
cores, and the queue bound (``QUEUE_CHUNKS`` x 1 MiB) caps memory whatever the layer size.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .blob_store import BlobStore
from .compression import Compression, Compressor
from .layer_cache import LayerCache
from .layer_tree import LayerInput, ScannedEntry, scan_layer
from .tar_stream import EntryKind, iter_tar_chunks

QUEUE_CHUNKS = 8
DEFAULT_SOURCE_DATE_EPOCH = 1

ProgressCallback = Callable[[int, int, str], None]


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
        return {
            "digest": self.digest,
            "diff_id": self.diff_id,
            "size": self.size,
            "media_type": self.media_type,
            "uncompressed_size": self.uncompressed_size,
            "compression": self.compression,
        }


def build_layer(
    layer_input: LayerInput,
    options: LayerOptions,
    store: BlobStore,
    cache: LayerCache | None = None,
    progress: ProgressCallback | None = None,
) -> Layer:
    """Build (or fetch from ``cache``) the blob of one layer into ``store``."""
    entries = scan_layer(layer_input)
    key = None
    if cache is not None:
        key = cache.key(entries, options.as_record(), progress)
        cache.save()
        cached = cache.lookup(key)
        if cached is not None and store.has(cached["digest"], cached["size"]):
            return Layer(
                digest=cached["digest"],
                diff_id=cached["diff_id"],
                size=cached["size"],
                media_type=cached["media_type"],
                uncompressed_size=cached["uncompressed_size"],
                blob_path=store.path(cached["digest"]),
                compression=cached["compression"],
                from_cache=True,
            )
    layer = write_layer_blob(entries, options, store, progress)
    if cache is not None and key is not None:
        cache.record(key, layer.as_record())
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
        sink = _CompressingSink(compression, handle)
        try:
            for chunk in iter_tar_chunks(tar_entries, options.source_date_epoch):
                diff_hasher.update(chunk)
                tar_size += len(chunk)
                sink.put(chunk)
                if progress is not None:
                    file_bytes_done = min(total, file_bytes_done + len(chunk))
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


class _CompressingSink:
    """Compress, hash and write chunks on a worker thread behind a bounded queue."""

    _DONE = object()

    def __init__(self, compression: Compression, handle) -> None:
        self._handle = handle
        self._compressor = Compressor(compression)
        self._hasher = hashlib.sha256()
        self._size = 0
        self._failure: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_CHUNKS)
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

    def put(self, chunk: bytes) -> None:
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
            raise InputError(f"cannot write layer blob: {failure.strerror}") from failure
        assert failure is not None
        raise failure
