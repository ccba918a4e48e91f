"""`sparkflake build PROFILE`: the stages of one build in flow order.

1. ``compose.composition.load_composition`` — the profile, its locks, the role inputs.
2. ``compose.inputs.fetch_inputs`` — every input in the cache and re-hashed (link ``inputs``).
3. ``compose.assembly.assemble`` — the layer trees and both manifests.
4. ``compose.composed_image.build_lower_layers`` — the layers below the top one; those the layer
   cache holds are taken as soon as stage 3 has their trees, before it plans the overlay.
5. ``compose.top_layer.prepare_top`` — labels, the in-image receipt, ``/etc/sparkflake/*``.
6. ``compose.chain_links.verify_composition`` — the verification chain; refuses before
   anything is written to the output.
7. ``compose.composed_image.finish`` — top layer, config, manifest, full receipt;
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..compose.assembly import Assembly, LayerTree, assemble
from ..compose.chain_links import verify_composition
from ..compose.composed_image import (
    DEFAULT_FORMATS,
    BuildResult,
    ImageOptions,
    LowerLayers,
    OutputWriters,
    check_formats,
    finish,
    prepare_top_over_layers,
)
from ..compose.composition import Composition, load_composition
from ..compose.inputs import FetchedInputs, fetch_inputs
from ..compose.tree_cache import TreeCache
from ..core.atomic_write import (
    atomic_directory,
    check_output_parent,
    check_replaceable_output,
    make_run_directory,
    remove_tree,
)
from ..core.blob_cache import BlobCache, default_cache_root
from ..core.directory_lock import using_cache
from ..core.file_hashes import FileHashes
from ..core.interrupts import interrupts_held
from ..core.progress import Progress, report_phase
from ..housekeeping.build_record import BuildRecord, last_build_of, utc_now, write_build_record
from ..housekeeping.free_space import check_free_space, estimate_build_space
from ..oci.blob_store import BlobStore
from ..oci.layer_cache import LayerCache


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
    formats: tuple[str, ...] = DEFAULT_FORMATS


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


class StageClock:
    """Seconds per stage, for the build result's ``timings``."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._since = time.monotonic()

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self.timings[stage] = round(now - self._since, 3)
        self._since = now


def used_by_build(root: Path, fetched: FetchedInputs, assembly: Assembly, result: BuildResult,
                  store: BlobStore) -> BuildRecord:
    """What this build took from the cache at ``root`` (for ``sparkflake cache gc``): input
    blobs, git checkouts, assembled trees, and the layer-store blobs of its image."""

    def names_under(directory: Path, paths: Iterable[Path]) -> tuple[str, ...]:
        return tuple(sorted({path.name for path in paths if path.parent == directory}))

    tree_dirs = list(assembly.cached_trees)  # every tree the tree cache gave this build
    image = result.image
    named = {digest for layer in image.layers for digest in (layer.digest, layer.diff_id)}
    named |= {image.config_digest, image.manifest_digest}
    blobs = {digest for digest in named if store.has(digest)}  # layers, as stored and uncompressed
    return BuildRecord(
        profile=result.profile,
        built_at=utc_now(),
        manifest_digest=image.manifest_digest,
        config_digest=image.config_digest,
        inputs=names_under(BlobCache(root).blob_dir, fetched.paths.values()),
        git_trees=names_under(root / "git" / "trees", fetched.git_trees.values()),
        trees=names_under(root / "trees", [tree.parent for tree in tree_dirs]),
        blobs=tuple(sorted(blobs)),
    )


@dataclass(frozen=True)
class _BuildCaches:
    """Where one build keeps what it fetched, assembled and compressed."""

    root: Path  # inputs, git checkouts, work and scratch trees, file hashes
    store: BlobStore  # layer-store blobs (default CACHE/oci)
    layer_cache: LayerCache | None
    tree_cache: TreeCache | None
    hashes: FileHashes

    @classmethod
    def of(cls, request: BuildRequest) -> _BuildCaches:
        root = request.cache_root or default_cache_root()
        oci_root = request.layer_cache_root or root / "oci"
        return cls(
            root=root,
            store=BlobStore(oci_root),
            layer_cache=LayerCache(oci_root) if request.use_layer_cache else None,
            hashes=FileHashes(root / "compose" / "file-sha256.json"),
            tree_cache=TreeCache(root / "trees") if request.use_tree_cache else None,
        )


@dataclass(frozen=True)
class _Staged:
    """The image written into the staged output, and the trees it was made of."""

    result: BuildResult
    assembly: Assembly


def build_profile(request: BuildRequest, progress: Progress | None = None) -> BuildResult:
    """All stages; nothing is written to the output unless the chain passed."""
    check_formats(request.formats)
    composition = load_composition(request.profile, request.profiles_dir)
    out_dir = request.output_dir or default_output_dir(composition.profile.name)
    check_output_parent(out_dir)  # refused now, not after the fetch and the layers
    check_replaceable_output(out_dir, force=request.force)
    caches = _BuildCaches.of(request)
    clock = StageClock()
    check_free_space(estimate_build_space(composition, caches.root, caches.store.root, out_dir, request.formats,
                                          last_build_of(caches.root, composition.profile.name)))

    # held until the build is recorded: it takes inputs, trees and layers from the cache
    # before its record names them, and a `cache gc --apply` beside it removed them
    with using_cache(caches.root, lambda: report_phase(
            progress, f"waiting for `sparkflake cache gc` to finish with {caches.root}")):
        fetched = fetch_inputs(
            composition, BlobCache(caches.root), from_dirs=request.from_dirs, offline=request.offline,
            progress=progress, hashes=caches.hashes, git_mirrors=request.git_mirrors,
            skip_git=[composition.source.name] if request.source_tree is not None else [],
        )
        clock.lap("fetch_and_verify_inputs")
        work_dir: Path | None = None
        scratch_dir: Path | None = None
        try:  # an interrupt (SIGINT, SIGTERM) removes the run's directories
            # held back until each directory made is named here, for the finally below
            with interrupts_held():
                # work/PROFILE.<host>.pid<N>.<random>: a killed build's directory is removed by the
                # next build (its pid is gone); a concurrent build's, or another host's, is left alone
                work_dir = make_run_directory(caches.root / "work", composition.profile.name)
                scratch_dir = None if request.keep_work else memory_scratch_dir(composition.profile.name)
            for transient in (work_dir, scratch_dir):
                if transient is not None:
                    caches.hashes.never_remember(transient)
                    if caches.layer_cache is not None:
                        caches.layer_cache.never_remember(transient)
            staged = _write_staged_output(request, composition=composition, fetched=fetched, caches=caches,
                                          out_dir=out_dir, work_dir=work_dir, scratch_dir=scratch_dir, clock=clock,
                                          progress=progress)
            result = dataclasses.replace(
                staged.result,
                extra={"timings": clock.timings, "evicted": [str(eviction) for eviction in caches.store.evicted]},
            )
            if not request.keep_work:
                result = dataclasses.replace(result, assembly=None)
            return result
        finally:
            # the cleanup whole: an interrupt that arrives during it is delivered after it
            with interrupts_held():
                caches.hashes.save()
                if work_dir is not None and not request.keep_work:
                    remove_tree(work_dir)
                if scratch_dir is not None:
                    remove_tree(scratch_dir)


def _write_staged_output(
    request: BuildRequest, *, composition: Composition, fetched: FetchedInputs, caches: _BuildCaches,
    out_dir: Path, work_dir: Path, scratch_dir: Path | None, clock: StageClock, progress: Progress | None,
) -> _Staged:
    """Assembly, layers, chain and image, written into the output staged beside
    ``out_dir`` and swapped in only when every stage passed; a refused chain removes the
    staging directory, archive, layout and all."""
    store, layer_cache = caches.store, caches.layer_cache
    with (
        atomic_directory(out_dir, owned_output=True, force=request.force) as staging,
        OutputWriters(staging, request.formats, request.options, store) as outputs,
    ):
        lower = LowerLayers(request.options, store, layer_cache, outputs.add_layer)

        def on_lower_trees(trees: list[LayerTree]) -> None:
            clock.lap("assemble_lower_trees")
            lower.take_cached(trees)

        assembly = assemble(
            composition, fetched, work_dir / "trees", progress=progress, tree_cache=caches.tree_cache,
            hashes=caches.hashes, source_tree=request.source_tree, scratch_dir=scratch_dir,
            on_lower_trees=on_lower_trees,
        )
        clock.lap("assemble_overlay")
        layers = lower.make_the_rest(progress)
        clock.lap("lower_layers")
        prepared = prepare_top_over_layers(composition, assembly, layers, request.options, store)
        chain = verify_composition(composition, fetched, assembly, prepared)
        clock.lap("verify")
        result = finish(composition, fetched, assembly, layers, prepared, chain,
                            options=request.options, store=store, layer_cache=layer_cache)
        clock.lap("top_layer_and_image")
        outputs.write(result)
        # recorded before OUT is swapped in: a record that cannot be written (a full disk)
        # fails the build with OUT as it was, not after OUT holds the new image
        write_build_record(caches.root, used_by_build(caches.root, fetched, assembly, result, store))
        replaced_links = store.shared_blobs(out_dir / "oci")
    # the previous layout's hard links to the store are gone now: their removal
    # changed the blobs' ctime, and nothing else (``BlobStore.confirm_unlinked``)
    store.confirm_unlinked(replaced_links)
    clock.lap("write_outputs")
    return _Staged(result=result, assembly=assembly)
