"""What the audit reads: a target string opened through ``oci``'s readers (layout,
oci-archive, docker-archive, registry), or an image in a local engine's store saved to a
private docker-archive and read the same way.

The audit adds only where the image came from: the kind and location it names in its
report, the image ID the engine reports, and the cleanup of what it saved.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.container_engine import Engine, image_id, make_engine_scratch, with_scratch
from ..core.errors import CheckFailed, InputError
from ..core.interrupts import interrupts_held
from ..oci.layout import output_layout
from ..oci.reader import ImageReader, open_image


@dataclass
class ImageSource:
    reader: ImageReader
    kind: str  # the reader's format, or the engine (podman, docker) it was saved from
    location: str
    engine_image_id: str | None = None
    cleanup: Callable[[], None] | None = None


def open_target(
    target: str,
    *,
    platform: str | None = None,
    insecure: bool = False,
    engine_args: Sequence[str] = (),
    credentials: tuple[str, str] | None = None,
) -> ImageSource:
    """``oci:DIR[:TAG]``, ``oci-archive:FILE``, ``docker-archive:FILE``, a plain path,
    ``docker://HOST[:PORT]/REPO:TAG|@sha256:…``, ``podman:NAME|ID``, ``docker:NAME|ID``."""
    if target.startswith("docker://"):
        from ..oci.remote_image import open_remote_image

        reader = _opened(lambda: open_remote_image(target, platform=platform, insecure=insecure, credentials=credentials))
        return ImageSource(reader, reader.format, target)
    for engine in ("podman", "docker"):
        if target.startswith(f"{engine}:"):
            return _open_engine_image(engine, target[len(engine) + 1 :], engine_args)
    path, tag = target, None
    if target.startswith("oci:"):
        path = target[4:]
        if not Path(path).is_dir() and ":" in path:
            path, _, tag = path.rpartition(":")
    else:
        for prefix in ("oci-archive:", "docker-archive:"):
            path = path.removeprefix(prefix)
    # a build's OUT names its layout OUT/oci, as for load, export and the runtime check
    reader = _opened(lambda: open_image(output_layout(Path(path)), tag, platform))
    return ImageSource(reader, reader.format, reader.location)


def _opened(open_reader: Callable[[], ImageReader]) -> ImageReader:
    """The reader refuses a manifest whose bytes differ from its reference before parsing
    it; the audit names that ``manifest.digest`` (exit 1)."""
    try:
        return open_reader()
    except CheckFailed as exc:
        if exc.check_id in ("oci.blob-size", "oci.blob-digest"):
            raise CheckFailed(exc.message, check_id="manifest.digest") from None
        raise


def _open_engine_image(name: str, image: str, engine_args: Sequence[str]) -> ImageSource:
    """``ENGINE image inspect`` for the image ID the engine reports, and ``ENGINE save`` to
    a private temporary docker-archive whose bytes the audit re-derives every digest from."""
    binary = shutil.which(name)
    if binary is None:
        raise InputError(f"{name}: not installed (needed to audit {name}:{image})", check_id="image.readable")
    engine = Engine(name, binary, tuple(engine_args))
    reported_id = image_id(engine, image)
    if reported_id is None:
        raise InputError(f"{name}:{image}: not in the local store", check_id="image.readable")
    save = ["save", "--format", "docker-archive"] if name == "podman" else ["save"]
    workdir: Path | None = None
    try:
        with interrupts_held():  # named before an interrupt can land, for the except below
            # podman's own temporary files (TMPDIR) go there too: an interrupted save leaves nothing
            workdir = make_engine_scratch("sparkflake-audit-")
        archive = workdir / "image.tar"
        saved = subprocess.run(engine.command(*save, "-o", str(archive), image), capture_output=True,
                               encoding="utf-8", errors="replace", check=False, env=with_scratch(workdir))
        if saved.returncode != 0:
            raise InputError(f"{name}:{image}: save failed: {saved.stderr.strip()}", check_id="image.readable")
        reader = _opened(lambda: open_image(archive))
    except BaseException:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    saved_in = workdir
    return ImageSource(
        reader, name, f"{name}:{image}", reported_id, cleanup=lambda: shutil.rmtree(saved_in, ignore_errors=True)
    )
