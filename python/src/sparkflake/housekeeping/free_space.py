"""Whether the disks can take a build, decided before it writes anything.

A full disk in the middle of a build gave "No space left on device" with no path; the build
now estimates what it will write, per file system, and refuses (exit 2) naming each place,
what it needs there and what is free. The estimate comes from the lock's sizes and from the
last build record of the profile (``build_record``):

- the cache: the inputs not in it yet (their locked sizes); assembled trees for the inputs
  the last build did not use, ``TREE_FACTOR`` times their size plus the blocks of each
  one's small files; layer-store blobs for the same, ``LAYER_FACTOR`` times (issue 31
  measured a glm53-dflash7 build: 4.2 GB of inputs gave 8.7 GB of assembled trees and a
  4.2 GB layer store);
- the output: the new output is staged beside the old one. By default it is the layout
  alone (``--formats oci``), which needs the image's bytes only where the output is on
  another file system than the layer store (on the same one the layout's blobs are the
  store's: ``oci.blob_store.share_blob``); an archive asked for (``--formats
  oci,docker-archive``: the two archives share one inode) needs them once more. The image
  is its layer blobs (the last build's sizes in the layer store, else ``IMAGE_FACTOR`` times
  the inputs: 4.38 GB from 4.2 GB); the receipt and SBOM are beside them. (``sparkflake
  export`` writes an archive later, from the layout.)

Where the cache and the output are on one file system, their needs add up there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..compose.composition import Composition
from ..core.errors import InputError
from ..lock.pins import GitPin
from .build_record import BuildRecord

TREE_FACTOR = 2.1
TREE_BLOCKS_PER_INPUT = 64 << 10  # the directories and small files (dist-info, docs) each input adds in blocks
LAYER_FACTOR = 1.0
IMAGE_FACTOR = 1.05
OUTPUT_DOCUMENTS = 4 << 20  # receipt.json, sbom.spdx.json, digests.json of a glm53 image: under 4 MiB
HEADROOM = 1.05  # what the estimate leaves out (work trees of the overlay, receipts, indexes)


@dataclass(frozen=True)
class SpaceNeed:
    """Bytes a build will write on the file system of ``where``, by what they are."""

    where: tuple[Path, ...]
    parts: tuple[tuple[str, int], ...]

    @property
    def bytes(self) -> int:
        return int(sum(size for _what, size in self.parts) * HEADROOM)


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (what statvfs can be asked about)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def estimate_build_space(
    composition: Composition,
    cache_root: Path,
    oci_root: Path,
    out_dir: Path,
    formats: Sequence[str],
    last_build: BuildRecord | None,
) -> list[SpaceNeed]:
    pins = [*composition.debs, *composition.wheels, composition.source]
    sized = {pin.sha256: pin.size for pin in pins if not isinstance(pin, GitPin)}  # a git input has no size
    missing = sum(size for sha256, size in sized.items() if not (cache_root / "blobs" / "sha256" / sha256).is_file())
    used_before = set(last_build.inputs) if last_build is not None else set()
    trees_kept = last_build is not None and all((cache_root / "trees" / key).is_dir() for key in last_build.trees)
    new = [size for sha256, size in sized.items() if sha256 not in used_before or not trees_kept]
    new_inputs = sum(new)
    stored = [oci_root / "blobs" / "sha256" / digest.removeprefix("sha256:") for digest in (last_build.blobs if last_build else ())]
    image = sum(path.stat().st_size for path in stored if path.is_file()) if stored else 0
    image = image or int(sum(sized.values()) * IMAGE_FACTOR)
    layout_copied = "oci" in formats and _device(out_dir.parent) != _device(oci_root)
    copies = int(layout_copied) + int(any(name != "oci" for name in formats))
    cache_parts = (("inputs to download", missing), ("assembled trees", int(new_inputs * TREE_FACTOR) + len(new) * TREE_BLOCKS_PER_INPUT))
    needs = [
        (cache_root, cache_parts),
        (oci_root, (("layer store", int(new_inputs * LAYER_FACTOR)),)),
        (out_dir.parent, ((f"the image in {out_dir}", image * copies + OUTPUT_DOCUMENTS),)),
    ]
    by_device: dict[int, SpaceNeed] = {}
    for where, parts in needs:
        device = _device(where)
        if device in by_device:
            merged = by_device[device]
            by_device[device] = SpaceNeed((*merged.where, where), merged.parts + parts)
        else:
            by_device[device] = SpaceNeed((where,), parts)
    return list(by_device.values())


def _device(path: Path) -> int:
    return os.stat(_existing(path)).st_dev


def free_bytes(path: Path) -> int:
    stats = os.statvfs(_existing(path))
    return stats.f_bavail * stats.f_frsize


def check_free_space(needs: Sequence[SpaceNeed], free: Callable[[Path], int] = free_bytes) -> None:
    """Refuse (InputError, exit 2) when a file system has less free than its need."""
    short = []
    for need in needs:
        available = free(need.where[0])
        if need.bytes > available:
            places = " and ".join(str(path) for path in need.where)
            parts = ", ".join(f"{what} {_gib(size)}" for what, size in need.parts if size)
            short.append(f"{places}: needs about {_gib(need.bytes)} ({parts}), {_gib(available)} free")
    if short:
        raise InputError(
            "not enough free disk space for this build (nothing was written):\n  " + "\n  ".join(short)
            + "\n  free space (`sparkflake cache gc --apply`, `sparkflake cache cleanup --apply`) or "
            "choose another --cache / -o"
        )


def _gib(count: int) -> str:
    return f"{count / (1 << 30):.2f} GiB" if count >= 1 << 26 else f"{count / (1 << 20):.1f} MiB"
