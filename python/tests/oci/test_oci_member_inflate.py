"""A multi-member gzip layer inflated on every core (``oci.member_inflate`` through
``LayerStream``) gives the bytes and digests a sequential inflate gives, however the blob
is cut into segments: also where member-header bytes lie inside a member (stored deflate
blocks copy them verbatim), so a segment starts at a false header; a truncated or corrupt
stream is refused after exactly the good bytes before it; the bound holds; no thread is
left behind."""

from __future__ import annotations

import hashlib
import io
import threading
import zlib

import deflate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.oci.layer_stream import LayerStream
from sparkflake.oci.member_inflate import MEMBER_HEAD

pytestmark = pytest.mark.nix_sandbox  # needs Python only

# a block may hold what looks like a member header: at level 0 it is stored verbatim
_BLOCKS = st.lists(
    st.tuples(
        st.lists(st.binary(max_size=300) | st.just(MEMBER_HEAD) | st.just(MEMBER_HEAD + b"\x04\xff"), max_size=8),
        st.sampled_from([0, 1, 6]),
    ),
    min_size=1, max_size=8,
)
_SEGMENTS = st.builds(
    lambda threads, low, extra: {"threads": threads, "min_segment": low, "max_segment": low + extra},
    st.integers(1, 3), st.integers(1, 400), st.integers(0, 400),
)


def _no_stream_threads() -> bool:
    return not any(thread.name in ("layer-stream", "inflate", "inflate-order") for thread in threading.enumerate())


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _members(blocks: list[tuple[list[bytes], int]]) -> tuple[bytes, bytes, list[int]]:
    """The blob, its content, and the blob offsets where a member ends."""
    blob, payload, ends = b"", b"", []
    for parts, level in blocks:
        content = b"".join(parts)
        blob += deflate.gzip_compress(content, level) if level else _stored_member(content)
        payload += content
        ends.append(len(blob))
    return blob, payload, ends


def _stored_member(content: bytes) -> bytes:
    """A gzip member of stored deflate blocks, with our engine's header: its content's
    bytes, member headers included, appear as they are."""
    raw = zlib.compressobj(0, zlib.DEFLATED, -15)
    body = raw.compress(content) + raw.flush()
    trailer = zlib.crc32(content).to_bytes(4, "little") + len(content).to_bytes(4, "little")
    return MEMBER_HEAD + b"\x00\xff" + body + trailer


@given(blocks=_BLOCKS, segments=_SEGMENTS)
def test_segments_give_the_sequential_bytes(blocks, segments):
    blob, payload, _ = _members(blocks)
    with LayerStream(io.BytesIO(blob), segments=segments) as stream:
        out = b"".join(stream.chunks())
        digests = stream.digests()
    assert out == payload
    assert (digests.blob_digest, digests.size, digests.compression) == (_sha256(blob), len(blob), "gzip")
    assert digests.diff_id == _sha256(payload) and digests.uncompressed_size == len(payload)
    assert _no_stream_threads()


@given(blocks=_BLOCKS, segments=_SEGMENTS, data=st.data())
def test_a_cut_inside_a_member_is_refused_and_a_cut_between_members_is_shorter(blocks, segments, data):
    blob, payload, ends = _members(blocks)
    cut = data.draw(st.integers(10, len(blob) - 1))
    with LayerStream(io.BytesIO(blob[:cut]), segments=segments) as stream:
        if cut in ends:
            out = b"".join(stream.chunks())
            assert stream.digests().diff_id == _sha256(out) and payload.startswith(out)
        else:
            with pytest.raises(ValueError, match="truncated|corrupt"):
                stream.drain()
            digests = stream.digests()
            assert digests.diff_id is None and digests.blob_digest == _sha256(blob[:cut])
    assert _no_stream_threads()


@given(blocks=_BLOCKS, segments=_SEGMENTS, data=st.data())
def test_a_corrupt_member_is_refused_after_the_members_before_it(blocks, segments, data):
    blob, payload, ends = _members(blocks)
    member = data.draw(st.integers(0, len(ends) - 1))
    start = ends[member - 1] if member else 0
    broken = bytearray(blob)
    broken[start + 1] ^= 0xFF  # its magic: no gzip member, and no valid deflate stream
    if member == 0:
        return  # then the blob is not gzip at all (read as plain bytes)
    content_before = len(b"".join(b"".join(parts) for parts, _ in blocks[:member]))
    pieces = []
    with LayerStream(io.BytesIO(bytes(broken)), segments=segments) as stream:
        with pytest.raises(ValueError, match="corrupt gzip stream"):
            for piece in stream.chunks():
                pieces.append(piece)
        digests = stream.digests()
    assert b"".join(pieces) == payload[:content_before]
    assert digests.diff_id is None and digests.blob_digest == _sha256(bytes(broken))
    assert _no_stream_threads()


@given(blocks=_BLOCKS, segments=_SEGMENTS, bound=st.integers(0, 3000))
def test_the_bound_holds_across_segments(blocks, segments, bound):
    blob, payload, _ = _members(blocks)
    with LayerStream(io.BytesIO(blob), max_uncompressed_bytes=bound, segments=segments) as stream:
        if len(payload) > bound:
            with pytest.raises(ValueError, match=f"more than the bound of {bound} bytes"):
                stream.drain()
        else:
            stream.drain()
        digests = stream.digests()
    assert digests.uncompressed_size <= bound and digests.blob_digest == _sha256(blob)
    assert _no_stream_threads()
