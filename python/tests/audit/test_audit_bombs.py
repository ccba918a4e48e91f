"""Decompression bombs (issue 28, class 2): a 65 KB zstd layer of RLE blocks and a 2 MB
gzip layer each inflate to 2 GiB. The audit reads them in bounded pieces: its peak memory
(the command's ru_maxrss) stays under 256 MB when the whole stream is read (the default
bound) and under twice the bound when a bound of 64 MiB refuses it; the verdict is a
failed check (exit 1), not a crash. Before the pieces were bounded the same audits peaked
at 2.1 GB and 3.1 GB."""

from __future__ import annotations

import tarfile

import pytest
from fixtures.bomb_layers import gzip_bomb, with_layer_blob, zstd_rle_bomb
from fixtures.hostile_layers import hostile_layout
from fixtures.peak_memory import run_measured

pytestmark = pytest.mark.slow

PEAK_BOUND = 256 << 20
_INFLATED = 2 << 30
_MEDIA_TYPES = {"zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
                "gzip": "application/vnd.oci.image.layer.v1.tar+gzip"}


def _bomb(kind: str) -> bytes:
    member = tarfile.TarInfo("bomb")
    member.size = _INFLATED
    head = member.tobuf(tarfile.PAX_FORMAT)
    return zstd_rle_bomb(head, _INFLATED // (128 << 10)) if kind == "zstd" else gzip_bomb(head, _INFLATED >> 20)


def _audit_peak(*args: str) -> tuple[int, str, int]:
    return run_measured("audit", *args, timeout=300)


@pytest.mark.parametrize("kind", ["zstd", "gzip"])
def test_a_bomb_read_whole_stays_in_bounded_memory(tmp_path, kind):
    blob = _bomb(kind)
    assert len(blob) < (3 << 20)
    layout = with_layer_blob(hostile_layout(tmp_path / "image", [[]]), blob, _MEDIA_TYPES[kind])
    status, output, peak = _audit_peak(f"oci:{layout}")
    assert status == 1, output
    assert "FAIL layer.diff-id" in output and "Traceback" not in output
    assert peak <= PEAK_BOUND, f"audit of a {len(blob)}-byte {kind} bomb peaked at {peak >> 20} MiB"


@pytest.mark.parametrize("kind", ["zstd", "gzip"])
def test_a_bomb_over_the_bound_is_refused_in_bounded_memory(tmp_path, kind):
    bound = 64 << 20
    layout = with_layer_blob(hostile_layout(tmp_path / "image", [[]]), _bomb(kind), _MEDIA_TYPES[kind])
    status, output, peak = _audit_peak(f"oci:{layout}", "--max-layer-bytes", str(bound))
    assert status == 1, output
    assert f"more than the bound of {bound} bytes" in output and "Traceback" not in output
    assert peak <= min(2 * bound, PEAK_BOUND), f"refusing a {kind} bomb peaked at {peak >> 20} MiB"


@pytest.mark.parametrize("kind", ["x", "L"])
def test_a_huge_pax_or_long_name_header_is_refused_in_bounded_memory(tmp_path, kind):
    """A 65 KB zstd layer whose first tar member is a PAX (or GNU long-name) header claiming
    1 GiB: the scanner gathered that header whole, and the audit peaked at 2 GB. Go's
    archive/tar refuses such a header past 1 MiB; so does the audit, as a failed check."""
    member = tarfile.TarInfo("huge")
    member.type, member.size = kind.encode(), 1 << 30
    blob = zstd_rle_bomb(member.tobuf(tarfile.USTAR_FORMAT), (1 << 30) // (128 << 10))
    layout = with_layer_blob(hostile_layout(tmp_path / "image", [[]]), blob, _MEDIA_TYPES["zstd"])
    status, output, peak = _audit_peak(f"oci:{layout}")
    assert status == 1, output
    assert peak <= PEAK_BOUND, f"audit of a {kind!r} header bomb peaked at {peak >> 20} MiB"
    assert "FAIL layer.decompress" in output and f"header of {1 << 30} bytes" in output, output
