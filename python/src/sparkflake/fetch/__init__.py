"""The fetch stage: every locked input into the content-addressed cache (``core.blob_cache``),
imported from operator directories or downloaded in parallel; git inputs by commit
(``fetch.git``). One error names every input that could not be had."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..core.blob_cache import (
    Artifact,
    BlobCache,
    ByteMeter,
    FetchOutcome,
    MissingInput,
    Opener,
    default_opener,
    fetch_artifact,
)
from ..core.digest import sha256_file
from ..core.errors import InputError
from ..core.progress import ProgressCallback


@dataclass
class FetchReport:
    outcomes: list[FetchOutcome] = field(default_factory=list)

    @property
    def downloaded_bytes(self) -> int:
        return sum(o.size for o in self.outcomes if o.source == "download")

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.outcomes)


def import_from_dirs(
    directories: Iterable[str | os.PathLike[str]],
    artifacts: Sequence[Artifact],
    cache: BlobCache,
) -> list[FetchOutcome]:
    """Import operator-supplied files whose sha256 matches a locked input.

    Only files whose size equals a wanted size are read, so pointing at a large directory
    costs a directory walk, not a read of everything in it; such a file is read once, copied
    into the cache as it is hashed.
    """
    wanted = {a.sha256: a for a in artifacts if not cache.contains(a.sha256)}
    sizes = {a.size for a in wanted.values()}
    unknown_size = None in sizes
    outcomes: list[FetchOutcome] = []
    for directory in directories:
        base = Path(directory)
        if not base.is_dir():
            raise InputError(f"--from {base}: not a directory")
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                if not path.is_file():
                    continue
                size = path.stat().st_size
                if size not in sizes and not unknown_size:
                    continue
                of_its_size = [a for a in wanted.values() if a.size == size]
                if of_its_size:
                    # almost surely a wanted input: copy and hash in one read (a file of a
                    # locked size that is none of them costs a copy, removed at once)
                    artifact = cache.import_matching(path, wanted, of_its_size[0])
                    if artifact is None:
                        continue
                    del wanted[artifact.sha256]
                else:  # only an input with no locked size can be it: hash before copying
                    digest = sha256_file(path.resolve())  # --from may hold symlinks; the cache gets the bytes
                    artifact = wanted.pop(digest, None)
                    if artifact is None:
                        continue
                    cache.import_file(path, artifact)
                outcomes.append(FetchOutcome(artifact.name, artifact.sha256, size, "import", path.resolve().as_uri()))
    return outcomes


def fetch_all(
    artifacts: Sequence[Artifact],
    cache: BlobCache,
    *,
    workers: int = 6,
    progress: ProgressCallback | None = None,
    from_dirs: Sequence[str | os.PathLike[str]] = (),
    opener: Opener = default_opener,
    timeout: float = 60.0,
) -> FetchReport:
    """Fetch every artifact in parallel; on any failure raise one error naming each input.

    Inputs sharing a sha256 are fetched once. Larger files start first so the pool stays busy.
    """
    unique: dict[str, Artifact] = {}
    for artifact in artifacts:
        unique.setdefault(artifact.sha256, artifact)
    report = FetchReport()
    if from_dirs:
        report.outcomes.extend(import_from_dirs(from_dirs, list(unique.values()), cache))
    cache.blob_dir.mkdir(parents=True, exist_ok=True)
    ordered = sorted(unique.values(), key=lambda a: (-(a.size or 0), a.name))
    total = sum(a.size or 0 for a in ordered)
    meter = ByteMeter(total, progress)
    # Cached and imported entries count as done from the start of the bar.
    failures: list[MissingInput] = []
    imported = {o.sha256 for o in report.outcomes}
    pending = []
    for artifact in ordered:
        if artifact.sha256 in imported:
            meter.set(artifact, artifact.size or 0)
        else:
            pending.append(artifact)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {
            pool.submit(fetch_artifact, a, cache, meter=meter, opener=opener, timeout=timeout): a
            for a in pending
        }
        for future in as_completed(futures):
            try:
                outcome = future.result()
            except MissingInput as missing:
                failures.append(missing)
                continue
            meter.set(futures[future], outcome.size)
            report.outcomes.append(outcome)
    if failures:
        failures.sort(key=lambda f: f.artifact.name)
        raise InputError(
            f"{len(failures)} locked input(s) missing:\n"
            + "\n".join(f.describe(cache) for f in failures),
            check_id="fetch-missing",
        )
    report.outcomes.sort(key=lambda o: o.name)
    return report
