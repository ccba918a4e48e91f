"""`sparkflake build PROFILE`: the stages of one build in flow order.

1. ``compose.composition.load_composition`` — the profile, its locks, the role inputs.
2. ``compose.inputs.fetch_inputs`` — every input in the cache and re-hashed (link ``inputs``).
3. ``compose.assembly.assemble`` — the layer trees and both manifests.
4. ``oci.composed_image.build_lower_layers`` — the layers below the top one; those the layer
   cache holds are taken as soon as stage 3 has their trees, before it plans the overlay.
5. ``compose.top_layer.prepare_top`` — labels, the in-image receipt, ``/etc/sparkflake/*``.
6. ``compose.chain_links.verify_composition`` — the verification chain; refuses before
   anything is written to the output.
7. ``oci.composed_image.finish`` — top layer, config, manifest, full receipt;
   ``write_outputs_into`` fills the staged output directory.

The output is staged beside ``out/PROFILE`` and swapped in only when every stage passed; in
a rebuild the archive and the OCI layout copy the cached lower layers' blobs while the
overlay is planned and the chain runs; a refusal removes the staging directory and leaves
the previous output.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .compose.assembly import LayerTree, assemble
from .compose.chain_links import verify_composition
from .compose.composition import load_composition
from .compose.inputs import fetch_inputs
from .compose.tree_cache import TreeCache
from .core.atomic_write import (
    atomic_directory,
    check_output_parent,
    check_replaceable_output,
    make_run_directory,
    remove_tree,
)
from .core.blob_cache import BlobCache, default_cache_root
from .core.file_hashes import FileHashes
from .core.progress import ProgressCallback
from .oci.archive import CombinedArchiveWriter
from .oci.blob_store import BlobStore
from .oci.composed_image import (
    OUTPUT_FORMATS,
    BuildResult,
    ImageOptions,
    build_lower_layers,
    cached_lower_layers,
    check_formats,
    finish,
    prepare_top_over_layers,
    start_archive,
    start_layout,
    write_outputs_into,
)
from .oci.layer import Layer
from .oci.layer_cache import LayerCache
from .oci.layout import LayoutWriter


@dataclass(frozen=True)
class BuildRequest:
    profile: str
    output_dir: Path | None = None
    cache_root: Path | None = None
    layer_cache_root: Path | None = None  # blob store + layer cache (default CACHE/oci)
    from_dirs: tuple[Path, ...] = ()
    offline: bool = False
    options: ImageOptions = ImageOptions()
    use_layer_cache: bool = True
    use_tree_cache: bool = True
    keep_work: bool = False
    force: bool = False  # replace the output path even if sparkflake did not write it
    profiles_dir: Path | None = None
    source_tree: Path | None = None  # checkout of a git vllm_source
    git_mirrors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # git input -> URLs tried first
    formats: tuple[str, ...] = OUTPUT_FORMATS


MEMORY_SCRATCH = Path("/dev/shm")


def memory_scratch_dir(prefix: str) -> Path | None:
    """A private directory on the memory file system for short-lived scratch trees, or
    None (then the work directory is used) when there is none or it is not writable.
    Directories a killed build left behind (its pid is gone) are removed first."""
    if not MEMORY_SCRATCH.is_dir() or not os.access(MEMORY_SCRATCH, os.W_OK | os.X_OK):
        return None
    try:
        return make_run_directory(MEMORY_SCRATCH, f"sparkflake-{prefix}")
    except OSError:
        return None


def default_output_dir(profile_name: str) -> Path:
    # not "result": that is where `nix build` puts its link, in the same checkout
    return Path("out") / profile_name


def build_profile(request: BuildRequest, progress: ProgressCallback | None = None) -> BuildResult:
    """All stages; nothing is written to the output unless the chain passed."""
    check_formats(request.formats)
    composition = load_composition(request.profile, request.profiles_dir)
    out_dir = request.output_dir or default_output_dir(composition.profile.name)
    check_output_parent(out_dir)  # refused now, not after the fetch and the layers
    check_replaceable_output(out_dir, force=request.force)
    root = request.cache_root or default_cache_root()
    cache = BlobCache(root)
    oci_root = request.layer_cache_root or root / "oci"
    store = BlobStore(oci_root)
    layer_cache = LayerCache(oci_root) if request.use_layer_cache else None
    hashes = FileHashes(root / "compose" / "file-sha256.json")
    tree_cache = TreeCache(root / "trees") if request.use_tree_cache else None
    timings: dict[str, float] = {}
    clock = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[stage] = round(now - clock, 3)
        clock = now

    fetched = fetch_inputs(
        composition, cache, from_dirs=request.from_dirs, offline=request.offline, progress=progress, hashes=hashes,
        git_mirrors=request.git_mirrors,
        skip_git=[composition.source.name] if request.source_tree is not None else [],
    )
    lap("fetch_and_verify_inputs")
    # work/PROFILE.<host>.pid<N>.<random>: a killed build's directory is removed by the next
    # build (its pid is gone); a concurrent build's, or another host's, is left alone
    work_dir = make_run_directory(root / "work", composition.profile.name)
    scratch_dir = None if request.keep_work else memory_scratch_dir(composition.profile.name)
    try:
        # The output is staged beside out_dir and swapped in only when every stage
        # passed. The lower layers are made as soon as their trees exist, before the
        # overlay is planned, and the archive and the OCI layout take each layer's blob
        # as soon as the layer is made (a refused chain removes the staging directory,
        # archive, layout and all).
        with atomic_directory(out_dir, owned_output=True, force=request.force) as staging:
            combined: CombinedArchiveWriter | None = None
            layout: LayoutWriter | None = None

            def on_layer(layer: Layer) -> None:
                for writer in (combined, layout):
                    if writer is not None:
                        writer.add_layer(layer)

            lower: list[Layer] = []
            to_make: list[LayerTree] = []

            def take_cached_lower_layers(trees: list[LayerTree]) -> None:
                # Layers the layer cache already has (a rebuild: all of them) are taken
                # now, so the archive and the layout copies start early; the others are made after the overlay
                # is planned, so a patch that does not apply is refused before any of
                # them is compressed.
                lap("assemble_lower_trees")
                cached = cached_lower_layers(trees, request.options, store, layer_cache)
                lower.extend(cached)
                for layer in cached:
                    on_layer(layer)
                to_make.extend(trees[len(cached) :])

            try:
                combined = start_archive(staging, request.formats, request.options)
                layout = start_layout(staging, request.formats)
                assembly = assemble(
                    composition, fetched, work_dir / "trees", progress=progress, tree_cache=tree_cache, hashes=hashes,
                    source_tree=request.source_tree, scratch_dir=scratch_dir, on_lower_trees=take_cached_lower_layers,
                )
                lap("assemble_overlay")
                lower.extend(build_lower_layers(to_make, request.options, store, layer_cache, progress, on_layer))
                lap("lower_layers")
                prepared = prepare_top_over_layers(composition, assembly, lower, request.options, store)
                chain = verify_composition(composition, fetched, assembly, prepared)
                lap("verify")
                result = finish(composition, fetched, assembly, lower, prepared, chain, request.options, store, layer_cache)
                lap("top_layer_and_image")
                write_outputs_into(staging, result, request.formats, combined, layout)
            except BaseException:
                for writer in (combined, layout):
                    if writer is not None:
                        writer.abort()
                raise
        lap("write_outputs")
        result = dataclasses.replace(
            result, extra={"timings": timings, "evicted": [str(eviction) for eviction in store.evicted]}
        )
        if not request.keep_work:
            result = dataclasses.replace(result, assembly=None)
        return result
    finally:
        hashes.save()
        if not request.keep_work:
            remove_tree(work_dir)
        if scratch_dir is not None:
            remove_tree(scratch_dir)
