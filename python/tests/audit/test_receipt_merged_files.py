"""The receipt check's pass over the merged image filesystem (``audit.receipt.merged_files``)
reads every layer through to the end of its compressed stream: a layer cut short is refused
even where the tar stream inside it still reads to its end (``tarfile`` takes a stream that
stops after a member for a tar archive without end-of-archive blocks), and a blob that is
not the one the manifest names (changed after the image was verified) is refused too."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkflake import oci
from sparkflake.audit.receipt import merged_files
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci.compression import Compression
from sparkflake.oci.reader import open_image

FILE_SIZE = (4 << 20) - 512  # with its header, the first 4 MiB block: the last holds only tar's zero blocks


def _layout(tmp_path: Path, compression: Compression, line: bytes = b"alpha\n") -> Path:
    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    (tree / "a.bin").write_bytes(line * (FILE_SIZE // len(line)) + b"\n" * (FILE_SIZE % len(line)))
    layer = oci.LayerSpec(oci.LayerInput(sources=(oci.TreeSource(str(tree)),)), "files")
    image = oci.build_image(oci.ImageSpec(layers=(layer,), compression=compression), oci.BlobStore(tmp_path / "cache"))
    oci.write_image_outputs(image, tmp_path / "out")
    return tmp_path / "out" / "oci"


@pytest.mark.parametrize(("compression", "cut"), [
    (Compression("gzip"), 8),  # the CRC32/ISIZE trailer of the last gzip member
    (Compression("gzip", implementation="zlib", block_size=0), 4),
    (Compression("zstd"), 3),  # the end of the last zstd frame
])
def test_a_truncated_layer_is_refused(tmp_path, compression, cut):
    layout = _layout(tmp_path, compression)
    reader = open_image(layout)
    assert merged_files(reader, ["a.bin"])[0]["a.bin"][1] == FILE_SIZE
    blob = layout / reader.layer_refs[0].name
    blob.write_bytes(blob.read_bytes()[:-cut])
    with pytest.raises(InputError, match=rf"layer sha256:[0-9a-f]{{64}}: .*truncated {compression.algorithm} stream"):
        merged_files(open_image(layout), ["a.bin"])


def test_a_blob_other_than_the_manifest_names_is_refused(tmp_path):
    layout = _layout(tmp_path / "a", Compression("gzip"))
    other = _layout(tmp_path / "b", Compression("gzip"), line=b"omega\n")
    reader = open_image(layout)
    other_reader = open_image(other)
    (layout / reader.layer_refs[0].name).write_bytes((other / other_reader.layer_refs[0].name).read_bytes())
    with pytest.raises(CheckFailed, match=r"blob .* has digest sha256:[0-9a-f]{64}, expected") as refused:
        merged_files(open_image(layout), ["a.bin"])
    assert refused.value.check_id == "oci.blob-digest"
