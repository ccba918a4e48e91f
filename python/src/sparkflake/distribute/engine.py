"""Import a verified image into a rank's container engine, check the image ID, then tag.

Two routes: ``import_archive`` loads a whole archive (``podman load`` / ``docker load``);
``import_layout`` copies from the rank's OCI layout into podman's containers-storage with
skopeo, whose containers-storage destination skips every layer the store already has (it
looks the blob up by digest before reading it), so a rebuild that changed one layer reads
one layer. The image ID (the config digest) is compared before the tag is applied, so a
tag never points at an image other than the one the archive or layout was bound to.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.container_engine import Engine, engine_scratch, image_id, with_scratch
from ..core.digest import is_digest
from ..core.errors import CheckFailed, InputError
from ..core.progress import Progress, report_phase
from ..core.silence_bounded import BoundedRun, run_bounded_by_silence
from ..oci.reader import ImageReader, open_image
from ..oci.verify import VerifiedPrefixes, verify_image

ENGINES = ("podman", "docker")
_SKIPPED = re.compile(r"Skipping blob (sha256:[0-9a-f]{64}) \(already present\)")
_LOADED = re.compile(r"^Loaded image(?:\(s\))?(?: ID)?:\s*(.+)$", re.MULTILINE)
# containers/image's copy says this on stderr as it starts each blob, whether it then reads
# the blob or finds it in the store (podman 4.3.1 load, skopeo 1.9.3 copy, here)
_COPYING_BLOB = re.compile(rb"^Copying blob (sha256:[0-9a-f]{64})")


def check_import_request(engine: str | None, image_id: str | None) -> None:
    """``--import ENGINE`` names a known engine and comes with the ``--image-id`` that is
    checked before the tag is applied."""
    if image_id is not None:
        check_image_id(image_id)
    if engine is not None:
        if engine not in ENGINES:
            raise InputError(f"--import: expected one of {ENGINES}, got {engine!r}")
        if image_id is None:
            raise InputError("--import needs --image-id: the image ID is checked before tagging")


def check_image_id(value: str, where: str = "--image-id") -> str:
    if not is_digest(value):
        raise InputError(f"{where}: expected sha256: followed by 64 lowercase hex digits, got {value!r}")
    return value


@dataclass(frozen=True)
class ImportResult:
    engine: str
    loaded: tuple[str, ...]
    image_id: str
    tag: str | None
    reused_layers: tuple[str, ...] = ()  # layers the engine's store already had (not read)
    layers_checked: int | None = None  # layers whose entries this import read (None: not counted)


# A tool copying into containers-storage prints a line as each blob starts and ends; between
# them it reads, inflates and unpacks one blob. Measured here (2 x86_64 cores, vfs, the
# 4.46 GB glm53-dflash7 image): skopeo 1.9.3 --debug copy 190 s in all, at most 41 s between
# two lines (its 2.77 GB layer); podman 4.3.1 load of the same image as an oci-archive, which
# prints a line only as each blob starts, 238 s, at most 87 s (that layer). Silence past the larger of 10 minutes and the largest blob at 10 MB/s is
# a wait without end, as on the store's lock while another podman or skopeo holds it.
SILENCE_FLOOR_SECONDS = 600.0
SLOWEST_BLOB_RATE = 10_000_000  # bytes a second


def silence_limit(largest_blob: int) -> float:
    """How long an import may go without a line before it is ended."""
    return max(SILENCE_FLOOR_SECONDS, largest_blob / SLOWEST_BLOB_RATE)


def _largest_blob(image: ImageReader) -> int:
    sizes = [ref.size if ref.size is not None else image.files.size(ref.name) for ref in image.layer_refs]
    return max((size for size in sizes if size is not None), default=0)


def _run(argv: list[str], what: str, silence_seconds: float, scratch: Path | None = None,
         on_line: Callable[[bytes], None] | None = None) -> BoundedRun:
    """``argv`` bounded by silence; with ``scratch``, podman keeps its temporary files there."""
    try:
        completed = run_bounded_by_silence(argv, silence_seconds, with_scratch(scratch) if scratch else None, on_line)
    except FileNotFoundError as exc:
        raise InputError(f"{what}: {argv[0]} is not installed") from exc
    if completed.silent_for is not None:
        raise CheckFailed(
            f"{what}: {argv[0]} wrote nothing for {completed.silent_for:g}s and was ended: it waits without end, "
            f"most likely on the store's lock (another podman or skopeo using it?); it had said: "
            f"{_last_words(completed)}",
            check_id="fanout.import",
        )
    if completed.returncode != 0:
        raise CheckFailed(
            f"{what}: {argv[0]} exited {completed.returncode}: {completed.stderr.strip()[-2000:]}",
            check_id="fanout.import",
        )
    return completed


def _last_words(run: BoundedRun) -> str:
    """The last line of stdout (which blob it was at) and the end of stderr."""
    stdout_lines = run.stdout.strip().splitlines()
    return " | ".join(part for part in (stdout_lines[-1] if stdout_lines else "", run.stderr.strip()[-1500:]) if part)


def _layer_starts(image: ImageReader, what: str, progress: Progress | None) -> Callable[[bytes], None] | None:
    """A line handler that shows which layer, of how many, the tool has started: a 4.5 GB
    image takes podman minutes, the 2.7 GB layer most of them, with nothing else to show."""
    if progress is None:
        return None
    layers = len(image.layer_refs)
    started = 0

    def on_line(line: bytes) -> None:
        nonlocal started
        match = _COPYING_BLOB.match(line)
        if match is not None:
            started += 1
            progress.phase(f"{what}: layer {min(started, layers)} of {layers} ({match.group(1).decode()[:19]}…)")

    return on_line


def image_id_of(engine: str, engine_args: list[str], reference: str) -> str | None:
    return image_id(Engine(engine, engine, tuple(engine_args)), reference)


def import_archive(
    engine: str, engine_args: list[str], archive: str, expected_image_id: str, tag: str | None,
    progress: Progress | None = None,
) -> ImportResult:
    """``ENGINE load -i ARCHIVE`` (an archive, or for podman a layout directory) once every
    digest and layer entry is checked, then the image ID check, then the tag. ``progress``:
    the bytes checked, then each layer as the engine starts it (docker's client, not on a
    terminal, says nothing until the end)."""
    if engine not in ENGINES:
        raise InputError(f"--import: expected one of {ENGINES}, got {engine!r}")
    check_image_id(expected_image_id)
    # The archive's checksum binds it to what the sender sent, not to a safe image: its
    # digests and every layer entry (oci.entry_safety: no '..', absolute or
    # through-symlink paths) are checked before the engine unpacks anything.
    image = open_image(archive)
    verify_image(image, progress=progress)
    silence = silence_limit(_largest_blob(image))
    what = f"{engine} load"
    report_phase(progress, what)
    with engine_scratch() as scratch:  # what podman unpacks the archive to is removed, however the load ends
        output = _run([engine, *engine_args, "load", "-i", archive], f"{engine} load -i {archive}", silence,
                      scratch, _layer_starts(image, what, progress)).stdout
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
        _run([engine, *engine_args, "tag", expected_image_id, tag], f"{engine} tag {tag}", silence)
    return ImportResult(engine=engine, loaded=loaded, image_id=expected_image_id, tag=tag)


# podman's global options that say where its containers-storage is; skopeo takes the same
# store as a ``[driver@root+runroot]`` specifier (containers-transports(5), containers-storage)
_STORE_OPTIONS = {"--root": "root", "--runroot": "runroot", "--storage-driver": "driver"}


def storage_specifier(engine_args: list[str]) -> str:
    """The ``[driver@root+runroot]`` part of a containers-storage reference for the store
    podman uses with ``engine_args``; empty for podman's default store."""
    found: dict[str, str] = {}
    position = 0
    while position < len(engine_args):
        argument = engine_args[position]
        name, equals, value = argument.partition("=")
        if name in _STORE_OPTIONS:
            if not equals:
                if position + 1 >= len(engine_args):
                    raise InputError(f"engine_args: {name} needs a value")
                position += 1
                value = engine_args[position]
            found[_STORE_OPTIONS[name]] = value
        position += 1
    if not found:
        return ""
    for name, value in found.items():  # the specifier's own separators: skopeo would split the value there
        if not value or any(char in value for char in "[]@+:"):
            raise InputError(f"engine_args: the store's {name} {value!r} cannot be named to skopeo "
                             "(containers-storage:[driver@root+runroot:options] splits at '@', '+', ':' and ']')")
    if "root" not in found:
        raise InputError("engine_args: a --runroot or --storage-driver without --root cannot be given to skopeo")
    driver = f"{found['driver']}@" if "driver" in found else ""
    runroot = f"+{found['runroot']}" if "runroot" in found else ""
    return f"[{driver}{found['root']}{runroot}]"


def import_layout(
    engine: str, engine_args: list[str], layout: str, expected_image_id: str, tag: str, *,
    verified: VerifiedPrefixes | None = None,
) -> ImportResult:
    """``skopeo copy oci:LAYOUT containers-storage:[STORE]TAG``, then the image ID check.
    The copy names the image ``TAG`` only in podman's store; if the ID differs the name is
    removed again before anything else can use it."""
    if engine != "podman":
        raise InputError(f"--import {engine}: the blob route imports into podman's containers-storage; "
                         "use the archive route for docker")
    check_image_id(expected_image_id)
    if ":" in layout:  # oci:PATH ends the path at its first ':': skopeo would read another directory
        raise InputError(f"{layout}: a layout whose path holds ':' cannot be named to skopeo (oci:PATH[:REFERENCE] "
                         "ends the path at the first ':'); use a data_dir without ':'")
    destination = f"containers-storage:{storage_specifier(engine_args)}{tag}"
    # As the archive route's import: the blobs' sha256 binds them to what rank 0 holds, not
    # to a safe image, so the digests and every layer entry (oci.entry_safety) are checked
    # here, before skopeo hands a layer to the store's unpacker; ``verified``: the layer runs
    # this rank checked before are not read again (a delta reads its new layers only).
    image = open_image(layout)
    report = verify_image(image, verified=verified)
    # --debug: the only output that says which layers were skipped: containers/image's copy
    # logs "Skipping blob sha256:... (already present):" when the store has the layer (seen
    # with Debian 12's skopeo 1.9.3; without --debug both cases print "Copying blob")
    silence = silence_limit(_largest_blob(image))
    with engine_scratch() as scratch:  # what skopeo stages a layer in is removed, however the copy ends
        copied = _run(["skopeo", "--tmpdir", str(scratch), "--debug", "copy", f"oci:{layout}", destination],
                      f"skopeo copy oci:{layout} {destination}", silence)
    reused = tuple(dict.fromkeys(_SKIPPED.findall(copied.stderr)))
    found = image_id_of(engine, engine_args, tag)
    if found != expected_image_id:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # the refusal below says what matters
            subprocess.run([engine, *engine_args, "untag", tag], capture_output=True, timeout=60)
        raise CheckFailed(f"{layout}: {engine} holds image ID {found} under {tag} after the copy, expected "
                          f"{expected_image_id}; the name was removed", check_id="fanout.image-id")
    return ImportResult(engine=engine, loaded=(tag,), image_id=expected_image_id, tag=tag, reused_layers=reused,
                        layers_checked=report.layers_read)


def check_layout(layout: str, verified: VerifiedPrefixes) -> tuple[int, list[str]]:
    """Every digest and layer entry of ``layout`` checked as ``import_layout`` checks them
    (the runs ``verified`` knows are not read again, each run read now is recorded there):
    the layers read, and the key of each run of the image's layers (``prefix_keys``)."""
    report = verify_image(open_image(layout), verified=verified)
    return report.layers_read, list(report.run_keys)
