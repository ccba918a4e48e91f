"""`sparkflake image build SPEC.json -o OUT` and `sparkflake image inspect PATH`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..core.atomic_write import atomic_directory
from ..oci import (
    BlobStore,
    LayerCache,
    build_image,
    load_spec_file,
    open_image,
    verify_image,
    write_image_outputs,
)
from ..oci.archive import CombinedArchiveWriter
from ..oci.digests_file import digests_record
from ..oci.layer import Layer
from ..oci.layout import LayoutWriter, output_layout
from ._output import Progress, print_json, print_line, warn
from ._parsers import add_command, add_group


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparkflake" / "oci"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_group(
        subparsers, "image",
        help="build and inspect deterministic OCI images",
        description="Deterministic OCI images: the same trees and metadata give the same bytes.",
        metavar="SUBCOMMAND",
    )

    build = add_command(
        commands, "build", run_build,
        help="build an image from SPEC.json",
        description=(
            "Build an image from SPEC.json into OUT: oci/ (OCI layout), oci-archive.tar, "
            "docker-archive.tar and digests.json. OUT is replaced at once when the image is "
            "written, and only if it is absent, empty or an output sparkflake wrote (see --force)."
        ),
    )
    build.add_argument("spec", metavar="SPEC.json")
    build.add_argument("-o", "--output", required=True, metavar="OUT")
    build.add_argument(
        "--cache",
        metavar="DIR",
        help=f"layer cache and blob store (default {default_cache_dir()})",
    )
    build.add_argument("--no-cache", action="store_true", help="rebuild every layer")
    build.add_argument("--force", action="store_true",
                       help="replace OUT even if it is not an output sparkflake wrote (its contents are lost)")
    build.add_argument("--json", action="store_true", help="print digests.json to stdout")
    build.add_argument("--progress", action="store_true", help="progress bars even without a tty")

    inspect = add_command(
        commands, "inspect", run_inspect,
        help="read and verify an OCI layout, oci-archive or docker-archive",
        description=(
            "Read an image in any of the three formats, re-derive every digest from its "
            "bytes and print them by kind. Exit 1 on a digest or size mismatch, 2 if a "
            "blob or document is missing or unreadable."
        ),
    )
    inspect.add_argument("path", metavar="PATH")
    inspect.add_argument("--ref", help="the tag (ref.name) to pick in a multi-image index")
    inspect.add_argument(
        "--no-verify-layers", action="store_true", help="check layer blobs exist, skip hashing"
    )
    inspect.add_argument("--json", action="store_true")
    inspect.add_argument("--progress", action="store_true")


def run_build(args: argparse.Namespace) -> int:
    spec = load_spec_file(args.spec)
    cache_root = Path(args.cache) if args.cache else default_cache_dir()
    store = BlobStore(cache_root)
    cache = None if args.no_cache else LayerCache(cache_root)
    progress = Progress("build", enabled=True if args.progress else None)
    out = Path(args.output)
    # OUT is staged beside itself and swapped in whole, as `sparkflake build -o` does: only
    # an output sparkflake wrote is replaced (refused here, before any layer is made). The
    # combined archive (zstd images get two archives, written at the end) and the layout
    # are written while the layers are made.
    with atomic_directory(out, owned_output=True, force=args.force) as staging:
        combined = None
        if spec.compression.algorithm != "zstd":
            combined = CombinedArchiveWriter(staging / "oci-archive.tar", spec.source_date_epoch)
        layout = LayoutWriter(staging / "oci", store)

        def on_layer(layer: Layer) -> None:
            layout.add_layer(layer)
            if combined is not None:
                combined.add_layer(layer)

        try:
            image = build_image(spec, store, cache, progress, on_layer)
            staged = write_image_outputs(image, staging, combined, layout)
        except BaseException:
            for writer in (combined, layout):
                if writer is not None:
                    writer.abort()
            raise
        replaced_links = store.shared_blobs(out / "oci")
    store.confirm_unlinked(replaced_links)  # the previous layout's links are gone
    # each is a direct child of the stage (named by its path there: the stage may be relative,
    # the staged paths are not)
    outputs = [out / path.name for path in
               (staged.layout, staged.oci_archive, staged.docker_archive, staged.digests_file)]
    record = digests_record(image)
    for eviction in store.evicted:  # a corrupt cache entry was found, removed and made again
        warn(f"sparkflake: {eviction}")
    if args.json:
        print_json(record)
        return 0
    print_line(f"manifest  {image.manifest_digest}")
    print_line(f"index     {image.index_digest}")
    print_line(f"config    {image.config_digest}  (image ID)")
    print_line(f"chain_id  {image.chain_id}")
    for position, layer in enumerate(image.layers):
        origin = "cached" if layer.from_cache else "built"
        print_line(f"layer {position}   {layer.digest}  size {layer.size} ({origin})")
        print_line(f"  diff_id {layer.diff_id}")
    print_line(f"wrote {', '.join(map(str, outputs))}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    reader = open_image(output_layout(Path(args.path)), args.ref)  # a build's OUT: its layout OUT/oci
    progress = Progress("verify", enabled=True if args.progress else None)
    report = verify_image(reader, verify_layers=not args.no_verify_layers, progress=progress)
    record = report.as_record()
    if args.json:
        print_json(record)
        return 0
    print_line(f"format    {report.format}  {report.path}")
    print_line(f"platform  {report.platform}")
    if report.ref_name:
        print_line(f"ref.name  {report.ref_name}")
    for tag in report.repo_tags:
        print_line(f"repo tag  {tag}")
    for kind, digest in record["digests"].items():
        if digest:
            print_line(f"{kind:<9} {digest}")
    for position, layer in enumerate(report.layers):
        print_line(f"layer {position}   {layer.digest}  size {layer.size}  {layer.media_type}")
        print_line(f"  diff_id {layer.diff_id}")
    for key, value in sorted(report.labels.items()):
        print_line(f"label     {key}={value}")
    if not report.layers_verified:
        print_line("layers not hashed (--no-verify-layers)")
    return 0
