"""Same trees and metadata -> byte-identical outputs, whatever the copies' mtimes, umask,
creation order and owners (issue 3 acceptance, first item)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fixtures.oci import TreeVariant, materialize_tree, tree_specs
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.oci import (
    BlobStore,
    Compression,
    ImageSpec,
    LayerCache,
    LayerInput,
    LayerSpec,
    RuntimeConfig,
    TreeSource,
    build_image,
    write_image_outputs,
)


def _all_files(root: Path) -> dict[str, bytes]:
    return {
        os.fspath(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _build(trees: list[Path], out: Path, cache_root: Path, compression: str) -> dict[str, bytes]:
    spec = ImageSpec(
        layers=tuple(
            LayerSpec(LayerInput(sources=(TreeSource(os.fspath(tree), target),)), f"layer {i}")
            for i, (tree, target) in enumerate(zip(trees, ["/", "/opt/app"], strict=False))
        ),
        runtime=RuntimeConfig(entrypoint=("/bin/true",), env=("A=1",), labels={"k": "v"}),
        compression=Compression(compression),
    )
    image = build_image(spec, BlobStore(cache_root), LayerCache(cache_root))
    write_image_outputs(image, out)
    return _all_files(out)


@settings(max_examples=25)
@given(
    first=tree_specs(),
    second=tree_specs(max_leaves=8),
    compression=st.sampled_from(["gzip", "zstd", "none"]),
    seeds=st.tuples(st.integers(0, 2**32), st.integers(0, 2**32)),
    hardlink=st.booleans(),
)
def test_copies_with_different_metadata_give_identical_bytes(
    tmp_path_factory, first, second, compression, seeds, hardlink
):
    work = tmp_path_factory.mktemp("det")
    variants = [
        TreeVariant(seed=seeds[0], reverse_order=False, group_other_bits=0o022, owner=0),
        TreeVariant(seed=seeds[1], reverse_order=True, group_other_bits=0o002, owner=1234),
    ]
    outputs = []
    for n, variant in enumerate(variants):
        trees = []
        for t, spec in enumerate([first, second]):
            root = work / f"copy{n}" / f"tree{t}"
            files = materialize_tree(root, spec, variant)
            if hardlink and files:
                os.link(sorted(files)[0], root / "hardlink-of-first")
            trees.append(root)
        # separate caches: the second build must not be served from the first one's cache
        outputs.append(_build(trees, work / f"out{n}", work / f"cache{n}", compression))
    assert outputs[0].keys() == outputs[1].keys()
    for name in outputs[0]:
        assert outputs[0][name] == outputs[1][name], name
    shutil.rmtree(work)


def test_source_date_epoch_changes_every_mtime(tmp_path):
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_bytes(b"x")
    digests = set()
    for epoch in (1, 1700000000):
        spec = ImageSpec(
            layers=(LayerSpec(LayerInput(sources=(TreeSource(os.fspath(tree)),)), "l"),),
            source_date_epoch=epoch,
        )
        image = build_image(spec, BlobStore(tmp_path / f"c{epoch}"))
        digests.add(image.layers[0].diff_id)
        import tarfile

        with tarfile.open(image.layers[0].blob_path) as tar:
            assert {m.mtime for m in tar.getmembers()} == {epoch}
            assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}
    assert len(digests) == 2
