"""Stage 2 of a build: every input of the composition in the cache and verified (link
``inputs``): missing files fetched or imported from the profile's ``inputs/`` and ``--from``
directories, git sources fetched by commit, then every file re-hashed (but one this run
fetched, hashed as it came in) and every checkout re-checked by tree id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.blob_cache import Artifact, BlobCache, default_opener, offline_opener
from ..core.errors import CheckFailed, InputError, SparkflakeError
from ..core.file_hashes import FileHashes
from ..core.progress import ProgressCallback
from ..fetch import fetch_all
from ..fetch.git import GitCache, fetch_git_inputs
from ..lock.pins import DebPin, Pin, SdistPin, WheelPin
from .composition import Composition
from .verification import PASSED, LinkResult

PROFILE_INPUTS = "inputs"


def _artifact(pin: Pin) -> Artifact:
    if isinstance(pin, WheelPin | SdistPin):
        return Artifact(pin.name, pin.filename, pin.sha256, pin.size, tuple(pin.urls))
    if isinstance(pin, DebPin):
        return Artifact(pin.name, pin.pool_filename, pin.sha256, pin.size, tuple(pin.urls))
    raise InputError(f"{pin.name}: {pin.kind} inputs are not fetched as files by the build")


def _verified(cache: BlobCache, artifact: Artifact, hashes: FileHashes | None) -> Path:
    if hashes is None:
        return cache.verified_path(artifact)
    path = cache.blob_path(artifact.sha256)
    if path.is_file() and path.stat().st_size == artifact.size and hashes.sha256(path) == artifact.sha256:
        return path
    return cache.verified_path(artifact)  # re-hashes, evicts and names an altered entry


@dataclass(frozen=True)
class FetchedInputs:
    paths: Mapping[str, Path]  # input name -> verified cache path
    downloaded: int
    imported: int
    link: LinkResult
    git_trees: Mapping[str, Path] = field(default_factory=dict)  # git input name -> verified checkout


def fetch_inputs(
    composition: Composition,
    cache: BlobCache,
    *,
    from_dirs: Sequence[Path] = (),
    offline: bool = False,
    progress: ProgressCallback | None = None,
    hashes: FileHashes | None = None,
    git_mirrors: Mapping[str, Sequence[str]] | None = None,
    skip_git: Sequence[str] = (),
) -> FetchedInputs:
    """Every file input in the cache, then verified (link ``inputs``): re-hashed, or --
    with ``hashes`` -- re-hashed only when the cache file's stat identity changed since
    it was last hashed; one this run downloaded or imported was hashed as it came in. Git sources (but those named in ``skip_git``) are fetched by commit
    (offline: only from the cache and from ``from_dirs`` that are repositories) and their
    checkouts re-hashed by tree id. When inputs are missing, one error names each."""
    pins: list[Pin] = [*composition.debs, *composition.wheels]
    if isinstance(composition.source, SdistPin):
        pins.append(composition.source)
    artifacts = [_artifact(pin) for pin in pins]
    missing = [a for a in artifacts if not cache.contains(a.sha256)]
    directories = list(from_dirs)
    profile_inputs = composition.profile.directory / PROFILE_INPUTS
    if profile_inputs.is_dir():
        directories.append(profile_inputs)
    downloaded = imported = 0
    fetched_now: set[str] = set()  # sha256 of what this run downloaded or imported, hashed as it came in
    unfetched: list[str] = []
    if missing:
        opener = offline_opener if offline else default_opener
        try:
            report = fetch_all(missing, cache, from_dirs=directories, progress=progress, opener=opener)
        except InputError as exc:
            unfetched.append(exc.message)
        except SparkflakeError as exc:
            raise type(exc)(exc.message, check_id="inputs") from exc
        else:
            downloaded = sum(1 for o in report.outcomes if o.source == "download")
            imported = sum(1 for o in report.outcomes if o.source == "import")
            fetched_now = {o.sha256 for o in report.outcomes if o.source in ("download", "import")}
    git_pins = [pin for pin in composition.git_pins() if pin.name not in skip_git]
    unknown = sorted(set(git_mirrors or {}) - {pin.name for pin in composition.git_pins()})
    if unknown:
        raise InputError(f"--git-mirror {', '.join(unknown)}: not a git source of {composition.profile.name}")
    git_cache = GitCache(cache.root)
    try:
        fetch_git_inputs(git_pins, git_cache, mirrors=git_mirrors, local_repositories=directories, offline=offline)
    except InputError as exc:
        unfetched.append(exc.message)
    except SparkflakeError as exc:
        raise type(exc)(exc.message, check_id="inputs") from exc
    if unfetched:
        raise InputError("\n".join(unfetched), check_id="inputs")
    paths: dict[str, Path] = {}
    problems: list[str] = []
    for position, artifact in enumerate(artifacts):
        if progress:
            progress(position, len(artifacts), f"verify {artifact.name}")
        path = cache.blob_path(artifact.sha256)
        if artifact.sha256 in fetched_now and path.is_file():
            # its bytes were hashed on their way into the cache moments ago, by this run: a
            # second pass over gigabytes of wheels would only hash the same bytes again
            paths[artifact.name] = path
            continue
        try:
            paths[artifact.name] = _verified(cache, artifact, hashes)
        except SparkflakeError as exc:
            problems.append(exc.message)
    git_trees: dict[str, Path] = {}
    for pin in git_pins:
        try:
            git_trees[pin.name] = git_cache.verified_tree(pin)
        except SparkflakeError as exc:
            problems.append(exc.message)
    if problems:
        raise CheckFailed("; ".join(problems), check_id="inputs")
    total = sum(a.size or 0 for a in artifacts)
    message = f"{len(artifacts)} inputs ({total} bytes) in the cache, every sha256 equal to the lock"
    if git_trees:
        message += f"; {len(git_trees)} git checkouts, every tree id equal to the lock"
    link = LinkResult("inputs", PASSED, message)
    return FetchedInputs(paths, downloaded, imported, link, git_trees)
