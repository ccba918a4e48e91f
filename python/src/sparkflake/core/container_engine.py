"""The local container engine (podman or docker): detection, global options, inspection.

Every call is an argv list; nothing goes through a shell. Global options (a private
storage root for tests, a runtime) come from ``--engine-arg`` or from
``SPARKFLAKE_PODMAN_ARGS`` / ``SPARKFLAKE_DOCKER_ARGS``, split like a shell would split
words (``shlex``, which only tokenizes: no expansion, nothing executed).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .interrupts import interrupts_held

ENGINES = ("podman", "docker")


@dataclass(frozen=True)
class Engine:
    name: str  # podman | docker
    binary: str
    global_args: tuple[str, ...] = ()

    def command(self, *args: str) -> list[str]:
        return [self.binary, *self.global_args, *args]


def engine_args_from_environment(name: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    variable = f"SPARKFLAKE_{name.upper()}_ARGS"
    raw = environ.get(variable, "")
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise InputError(f"{variable}: {exc}") from None


def detect_engine(
    preferred: str | None = None,
    extra_args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Engine:
    environ = os.environ if environ is None else environ
    names = (preferred,) if preferred else ENGINES
    for name in names:
        if name not in ENGINES:
            raise InputError(f"--engine {name!r}: expected podman or docker")
        binary = shutil.which(name)
        if binary:
            return Engine(name, binary, (*engine_args_from_environment(name, environ), *extra_args))
    wanted = preferred or "podman or docker"
    raise InputError(f"no container engine found on PATH ({wanted})", check_id="engine.detected")


# containers/image keeps an image copy's big temporary files (an oci-archive unpacked as
# oci<N>/, a layer on its way into the store as storage<N>/) in podman's TMPDIR, else its
# image_copy_tmp_dir, /var/tmp (containers.conf(5)), and in skopeo's --tmpdir, else /var/tmp
# (skopeo(1); skopeo does not read TMPDIR), and removes them only when it ends by itself. An
# import sparkflake ended (silence, SIGINT, SIGTERM) left them in /var/tmp for good.
BIG_FILES_DIR = "/var/tmp"  # not /tmp, which may be a small tmpfs


def make_engine_scratch(prefix: str = "sparkflake-engine-") -> Path:
    """A new private directory (0700) for one engine or skopeo run's temporary files, where
    the tool would have put them: in $TMPDIR when it is set, else in /var/tmp. The caller
    removes it, with what the tool left in it, when the run ends."""
    parent = os.environ.get("TMPDIR") or BIG_FILES_DIR
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise InputError(f"cannot make a temporary directory in {parent} (TMPDIR, else {BIG_FILES_DIR}): "
                         f"{exc.strerror or exc}") from None


@contextmanager
def engine_scratch() -> Iterator[Path]:
    """``make_engine_scratch()``, removed with its content however the run ends."""
    scratch: Path | None = None
    try:
        with interrupts_held():  # named before an interrupt can land, for the finally below
            scratch = make_engine_scratch()
        yield scratch
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def with_scratch(scratch: Path) -> dict[str, str]:
    """This process's environment with TMPDIR set to ``scratch``: where podman keeps an
    image copy's temporary files (docker's client keeps none; the daemon does)."""
    return {**os.environ, "TMPDIR": str(scratch)}


@dataclass(frozen=True)
class ImageRecord:
    image_id: str  # sha256:<hex>
    labels: Mapping[str, str]


# What the docker client says when it reaches no daemon (docker/cli: "Cannot connect to the
# Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"; on a TCP or
# SSH host, "error during connect"). The client alone answers every inspect with "no such
# object", so without this a missing daemon read as a missing image.
_NO_DAEMON = ("Cannot connect to the Docker daemon", "Is the docker daemon running", "error during connect")


def _run(engine: Engine, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    try:
        result = subprocess.run(engine.command(*args), capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"{engine.name} {' '.join(args[:2])}: {exc}", check_id="engine.detected") from None
    if result.returncode != 0 and engine.name == "docker":
        said = result.stderr.decode(errors="replace")
        if any(sign in said for sign in _NO_DAEMON):
            line = next((text for text in said.splitlines() if any(sign in text for sign in _NO_DAEMON)), said)
            raise InputError(
                f"docker ({engine.binary}) reaches no daemon: {line.strip()}; start the docker daemon (or set "
                "DOCKER_HOST to one), or use --engine podman", check_id="engine.detected")
    return result


def inspect_image(engine: Engine, reference: str) -> ImageRecord | None:
    """The image's ID and labels, or None when the engine does not have it."""
    result = _run(engine, "image", "inspect", reference)
    if result.returncode != 0:
        return None
    try:
        records = json.loads(result.stdout)
        record = records[0]
        image_id = str(record["Id"])
        config = record.get("Config") or {}
        labels = config.get("Labels") or record.get("Labels") or {}
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    if not image_id.startswith("sha256:"):
        image_id = "sha256:" + image_id
    return ImageRecord(image_id=image_id, labels={str(k): str(v) for k, v in labels.items()})


def container_exists(engine: Engine, name: str) -> bool:
    result = _run(engine, "container", "inspect", name)
    return result.returncode == 0


def image_id(engine: Engine, reference: str) -> str | None:
    """The ID (config digest) the engine gives ``reference``, or None when it has no such
    image. podman prints the bare hex, docker ``sha256:<hex>``; both come back as the
    latter."""
    result = _run(engine, "image", "inspect", "--format", "{{.Id}}", reference)
    found = result.stdout.decode(errors="replace").strip()
    if result.returncode != 0 or not found:
        return None
    found = found.splitlines()[0]
    return found if found.startswith("sha256:") else f"sha256:{found}"
