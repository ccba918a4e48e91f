"""The capability manifest of the image being launched, found by the image's digest.

A manifest describes one image (its config and manifest digests). It is written beside the
image it describes (``OUT/runtime-capabilities.json``, next to ``OUT/digests.json``) and
into the cache's capability store, ``CACHE/capabilities/<config hex>.json`` — the image
ID is the digest a rank knows of a loaded image, so the store is keyed by it, and each
manifest carries its manifest digest as well. A launch of an earlier image (a roll back
with ``--image OLD`` or ``--digests OLD/digests.json``) takes that image's own manifest:

1. beside ``--digests`` (``OUT/runtime-capabilities.json`` written for this image);
2. the cache's store;
3. the profile's ``runtime-capabilities.json`` when it was written for this image.

When none was written for the image, the profile's stays, and the launch's
``image.capabilities`` check refuses the mismatch (``launch.checks``).
"""

from __future__ import annotations

from pathlib import Path

from ..core.atomic_write import write_bytes_atomic
from ..core.digest import digest_hex
from ..core.output_marker import check_entry_if_output
from ..runtime.capabilities import FILE_NAME, Capabilities, dumps, load

STORE_DIR = "capabilities"


def store_path(cache_root: Path, config_digest: str) -> Path:
    return cache_root / STORE_DIR / f"{digest_hex(config_digest)}.json"


def keep_in_store(cache_root: Path, capabilities: Capabilities) -> Path:
    """Write ``capabilities`` into the cache's store under its image ID; the path."""
    path = store_path(cache_root, capabilities.config_digest)
    write_bytes_atomic(path, dumps(capabilities))
    return path


def record_capabilities(capabilities: Capabilities, out_dir: Path | None, cache_root: Path) -> list[Path]:
    """Where `runtime check` leaves an image's capabilities: ``OUT/runtime-capabilities.json``
    beside its digests (listed in OUT's marker, so the next build may replace OUT) and the
    cache's store; the paths written."""
    written = []
    if out_dir is not None:
        check_entry_if_output(out_dir, FILE_NAME, "check the image from a copy of the output")
        write_bytes_atomic(out_dir / FILE_NAME, dumps(capabilities), listed=True)
        written.append(out_dir / FILE_NAME)
    written.append(keep_in_store(cache_root, capabilities))
    return written


def _written_for(path: Path, image_id: str, manifest_digest: str | None) -> Capabilities | None:
    if not path.is_file():
        return None
    found = load(path)
    if found.config_digest != image_id:
        return None
    if manifest_digest is not None and found.manifest_digest not in (None, manifest_digest):
        return None
    return found


def capabilities_of_image(
    image_id: str,
    *,
    manifest_digest: str | None = None,
    digests_file: Path | None = None,
    cache_root: Path | None = None,
    profile_capabilities: Capabilities | None = None,
) -> Capabilities | None:
    """The manifest written for image ``image_id`` (see the module docstring for the order);
    else ``profile_capabilities`` unchanged."""
    places = []
    if digests_file is not None:
        places.append(digests_file.parent / FILE_NAME)
    if cache_root is not None:
        places.append(store_path(cache_root, image_id))
    for place in places:
        found = _written_for(place, image_id, manifest_digest)
        if found is not None:
            return found
    return profile_capabilities
