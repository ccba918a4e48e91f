"""Import a verified archive into a rank's container engine, check the image ID, then tag.

The image ID (the config digest) is compared before the tag is applied, so a tag never
points at an image other than the one the archive was bound to.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from ..errors import CheckFailed, InputError
from ..oci.reader import open_image
from ..oci.verify import verify_image

ENGINES = ("podman", "docker")
IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
_LOADED = re.compile(r"^Loaded image(?:\(s\))?(?: ID)?:\s*(.+)$", re.MULTILINE)


def check_image_id(value: str, where: str = "--image-id") -> str:
    if not IMAGE_ID.match(value):
        raise InputError(f"{where}: expected sha256: followed by 64 lowercase hex digits, got {value!r}")
    return value


@dataclass(frozen=True)
class ImportResult:
    engine: str
    loaded: tuple[str, ...]
    image_id: str
    tag: str | None


def _run(argv: list[str], what: str) -> str:
    try:
        completed = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise InputError(f"{what}: {argv[0]} is not installed") from exc
    if completed.returncode != 0:
        raise CheckFailed(
            f"{what}: {argv[0]} exited {completed.returncode}: {completed.stderr.strip()[-2000:]}",
            check_id="fanout.import",
        )
    return completed.stdout


def image_id_of(engine: str, engine_args: list[str], reference: str) -> str | None:
    completed = subprocess.run(
        [engine, *engine_args, "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0:
        return None
    found = completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else ""
    return found if found.startswith("sha256:") else f"sha256:{found}"


def import_archive(
    engine: str, engine_args: list[str], archive: str, expected_image_id: str, tag: str | None
) -> ImportResult:
    if engine not in ENGINES:
        raise InputError(f"--import: expected one of {ENGINES}, got {engine!r}")
    check_image_id(expected_image_id)
    # The archive's checksum binds it to what the sender sent, not to a safe image: its
    # digests and every layer entry (oci.entry_safety: no '..', absolute or
    # through-symlink paths) are checked before the engine unpacks anything.
    verify_image(open_image(archive))
    output = _run([engine, *engine_args, "load", "-i", archive], f"{engine} load -i {archive}")
    loaded = tuple(name.strip() for match in _LOADED.findall(output) for name in match.split(","))
    if not loaded:
        raise CheckFailed(f"{engine} load -i {archive}: reported no loaded image: {output.strip()!r}")
    found_ids = {reference: image_id_of(engine, engine_args, reference) for reference in loaded}
    if expected_image_id not in found_ids.values():
        raise CheckFailed(
            f"{archive}: {engine} loaded image ID {sorted(set(map(str, found_ids.values())))}, "
            f"expected {expected_image_id}; not tagged",
            check_id="fanout.image-id",
        )
    if tag:
        _run([engine, *engine_args, "tag", expected_image_id, tag], f"{engine} tag {tag}")
    return ImportResult(engine=engine, loaded=loaded, image_id=expected_image_id, tag=tag)
