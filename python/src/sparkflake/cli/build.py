"""`sparkflake build PROFILE`: the runtime composition, verified, as an OCI image."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from ..compose.composed_image import DEFAULT_FORMATS, ImageOptions
from ..core.atomic_write import OUTPUT_MARKER
from ..core.errors import InputError
from ..oci.compression import Compression
from ..workflows.build import BuildRequest, build_profile, default_output_dir
from . import _arguments as arguments
from ._output import add_progress_flag, print_json, print_line, progress_for, warn
from ._parsers import add_command
from ._requests import request_from
from .fetch import parse_mirrors


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers, "build", run,
        help="build a profile's image: fetch, assemble, verify, write out/PROFILE/",
        description=(
            "Fetch what is missing from the cache, assemble the OS base, the Python environment, "
            "the vLLM source overlay and its anchored patches, run the verification chain, and "
            "write the OCI layout (an oci-archive and docker-archive only with --formats), receipt.json "
            "and digests.json. "
            "Nothing is written when a check fails."
        ),
    )
    parser.add_argument("profile", metavar="PROFILE", help="profile name (profiles/NAME) or path")
    parser.add_argument("-o", "--output", dest="output_dir", metavar="DIR", type=arguments.path_or_default,
                        help="output directory (default out/PROFILE)")
    parser.add_argument("--cache", dest="cache_root", metavar="DIR", type=arguments.path_or_default,
                        help="cache root for inputs, layers and work trees (default $XDG_CACHE_HOME/sparkflake)")
    parser.add_argument("--layer-cache", dest="layer_cache_root", metavar="DIR", type=arguments.path_or_default,
                        help="blob store and layer cache (default CACHE/oci)")
    parser.add_argument("--no-tree-cache", dest="use_tree_cache", action="store_false",
                        help="assemble the OS base and Python trees again")
    parser.add_argument("--from", dest="from_dirs", action="append", default=[], metavar="DIR",
                        help="import operator-supplied inputs from DIR (matched by sha256); repeatable")
    parser.add_argument("--source-tree", metavar="DIR", type=arguments.path_or_default,
                        help="checkout of a git vllm_source input (bound by its git tree id) instead of fetching it")
    parser.add_argument("--git-mirror", action="append", default=[], metavar="NAME=URL",
                        help="try URL for the git input NAME before the lock's URLs (repeatable)")
    parser.add_argument("--offline", action="store_true", help="no network: inputs come from the cache, inputs/ and --from")
    parser.add_argument("--formats", default=",".join(DEFAULT_FORMATS),
                        help="comma-separated outputs among oci, oci-archive, docker-archive (default oci: the "
                             "layout alone; `sparkflake export OUT --format docker-archive` writes an archive later)")
    parser.add_argument("--compression", choices=("gzip", "zstd", "none"), default="gzip")
    parser.add_argument("--level", type=int, default=None, help="compression level (default: the engine's)")
    parser.add_argument(
        "--gzip-implementation",
        choices=("libdeflate", "zlib"),
        default=None,
        help="gzip implementation (default libdeflate; recorded in the image)",
    )
    parser.add_argument("--no-layer-cache", dest="use_layer_cache", action="store_false",
                        help="re-tar and re-compress every layer")
    parser.add_argument("--repository", default="localhost/sparkflake", help="image repository name in the outputs")
    parser.add_argument("--tag", default=None, type=arguments.image_tag, help="image tag (default: the profile name)")
    parser.add_argument("--profiles-dir", metavar="DIR", type=arguments.profiles_dir, help="where profiles live (default: ./profiles upward)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the assembled work trees (printed; the next build or `cache cleanup` removes them)")
    parser.add_argument("--force", action="store_true",
                        help="replace the output path even if it is not an output sparkflake wrote (its contents are lost)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_progress_flag(parser)


def written_entries(out_dir: Path) -> list[str]:
    """What the build wrote into OUT (its marker lists them), as the closing line names it."""
    return [f"{name}/" if (out_dir / name).is_dir() else name
            for name in sorted(os.listdir(out_dir)) if name != OUTPUT_MARKER]


def run(args: argparse.Namespace) -> int:
    implementation = args.gzip_implementation if args.compression == "gzip" else None
    compression = Compression(args.compression, args.level, implementation=implementation)
    # A profile's image has the fixed epoch ImageOptions carries (1, as nix/image.nix builds
    # it): never the environment's SOURCE_DATE_EPOCH, which `nix develop` and many CI
    # environments set, so that one lock gives one digest wherever the build runs.
    options = ImageOptions(compression=compression, repository=args.repository, tag=args.tag)
    ignored = os.environ.get("SOURCE_DATE_EPOCH", "")
    if ignored not in ("", str(options.source_date_epoch)):
        warn(f"build: SOURCE_DATE_EPOCH={ignored!r} in the environment is not used: a profile's image "
             f"has the fixed epoch {options.source_date_epoch}, so its digests do not depend on the environment")
    for directory in args.from_dirs:
        if not os.path.isdir(directory):
            raise InputError(f"--from {directory}: not a directory")
    request = request_from(
        args, BuildRequest, options=options, from_dirs=tuple(Path(d) for d in args.from_dirs),
        git_mirrors=parse_mirrors(args.git_mirror, None),
        formats=tuple(part.strip() for part in args.formats.split(",") if part.strip()),
    )
    started = time.monotonic()
    result = build_profile(request, progress_for("build", args))
    elapsed = time.monotonic() - started
    image = result.image
    out_dir = request.output_dir or default_output_dir(result.profile)
    record: dict[str, Any] = {
        "profile": result.profile,
        "output": str(out_dir),
        "manifest": image.manifest_digest,
        "config": image.config_digest,
        "image_id": image.config_digest,
        "index": image.index_digest,
        "chain_id": image.chain_id,
        "layers": [
            {"name": name, "digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size, "cached": cached}
            for name, layer, cached in zip(result.layer_names, image.layers, result.layers_from_cache, strict=True)
        ],
        "verification": [link.as_record() for link in result.chain],
        "seconds": round(elapsed, 3),
        "timings": dict(result.extra.get("timings", {})),
    }
    if result.sbom_artifact is not None:
        record["sbom"] = {"file": "sbom.spdx.json", "digest": result.sbom_artifact.blob_digest,
                          "artifact_manifest": result.sbom_artifact.manifest_digest}
    if result.assembly is not None:
        record["work_dir"] = str(result.assembly.work_dir)
    record["evicted"] = list(result.extra.get("evicted", []))
    for line in record["evicted"]:  # a corrupt cache entry was found, removed and made again
        warn(f"sparkflake: {line}")
    if args.json:
        print_json(record)
        return 0
    for link in result.chain:
        print_line(f"verified {link.link}: {link.detail}")
    for name, layer, cached in zip(result.layer_names, image.layers, result.layers_from_cache, strict=True):
        print_line(f"layer {name:<12} {layer.digest}  diffID {layer.diff_id}  {layer.size} bytes{' (cached)' if cached else ''}")
    print_line(f"manifest digest  {image.manifest_digest}")
    print_line(f"config digest    {image.config_digest}  (image ID)")
    print_line(f"index digest     {image.index_digest}")
    print_line(f"chain ID         {image.chain_id}")
    if result.sbom_artifact is not None:
        print_line(f"SBOM             {result.sbom_artifact.blob_digest}  (artifact {result.sbom_artifact.manifest_digest})")
    if result.assembly is not None:  # --keep-work: where the assembled trees stay
        print_line(f"work trees kept  {result.assembly.work_dir}")
    print_line(f"wrote {out_dir}/ ({', '.join(written_entries(out_dir))}) in {elapsed:.1f}s")
    return 0
