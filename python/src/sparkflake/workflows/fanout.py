"""`sparkflake fanout`: an image to every rank of the site, by one of three routes.

- the archive route (``--sha256``): ``distribute.fanout.fanout``, one checksum-bound
  archive forwarded rank to rank over the adjacent links;
- the blob route (a layout, no ``--sha256``): ``distribute.blobs.layout_fanout``, only the
  blobs each rank's image store lacks;
- the registry route (``--from-registry``): ``distribute.registry_mode.registry_fanout``,
  every rank pulls the digest-pinned image.

Each rank's record goes to ``--evidence-dir`` when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.errors import InputError
from ..core.progress import Progress
from ..distribute.blobs import LayoutFanoutRequest, layout_fanout
from ..distribute.fanout import FanoutRequest, fanout
from ..distribute.registry_mode import RegistryFanoutRequest, registry_fanout
from ..distribute.site import load_site


@dataclass(frozen=True)
class DistributionRequest:
    site: Path  # the site file (TOML)
    source: str | None = None  # ARCHIVE (a path on rank 0 or an http(s) URL) or a layout OUT
    sha256: str | None = None  # the archive's expected sha256: the archive route
    from_registry: str | None = None  # REGISTRY/REPO@sha256:…: the registry route
    platform: str = "linux/arm64"  # registry route: the platform to pull
    insecure_registry: bool = False  # registry route: plain HTTP (loopback registries only)
    ca_file: str | None = None  # registry route: CA certificate path on every rank
    auth_file: str | None = None  # registry route: credentials JSON path on every rank
    image_id: str | None = None  # expected image ID, checked before tagging
    engine: str | None = None  # podman or docker: load the verified image into it on every rank
    tag: str | None = None  # applied after the image ID matched
    verify_only: bool = False  # read-only: report what every rank holds
    retry_seconds: float = 120.0  # how long a broken hop keeps resuming
    evidence_dir: Path | None = None  # one JSON evidence record per rank


@dataclass(frozen=True)
class DistributionResult:
    report: dict[str, Any]  # the route's report: ``ranks`` (one record each) and ``complete``

    @property
    def ranks(self) -> list[dict[str, Any]]:
        ranks: list[dict[str, Any]] = self.report["ranks"]
        return ranks

    @property
    def complete(self) -> bool:
        return bool(self.report["complete"])


def distribute(request: DistributionRequest, progress: Progress | None = None) -> DistributionResult:
    """The route the request names, every rank's evidence written when asked for."""
    if request.from_registry:
        if request.source or request.sha256 or request.verify_only:
            raise InputError("--from-registry replaces ARCHIVE and --sha256 (and has no --verify)")
        report = registry_fanout(load_site(request.site), RegistryFanoutRequest(
            reference=request.from_registry, platform=request.platform, image_id=request.image_id,
            engine=request.engine, tag=request.tag, insecure=request.insecure_registry,
            ca_file=request.ca_file, auth_file=request.auth_file,
        ))
    elif not request.source:
        raise InputError("fanout needs ARCHIVE and --sha256, a layout OUT, or --from-registry")
    elif not request.sha256:
        report = layout_fanout(load_site(request.site), LayoutFanoutRequest(
            layout=request.source, image_id=request.image_id, engine=request.engine, tag=request.tag,
            verify_only=request.verify_only, retry_seconds=request.retry_seconds,
        ), progress=progress)
    else:
        report = fanout(load_site(request.site), FanoutRequest(
            archive=request.source, sha256=request.sha256, image_id=request.image_id, engine=request.engine,
            tag=request.tag, verify_only=request.verify_only, retry_seconds=request.retry_seconds,
        ), progress=progress)
    return with_evidence(report, request.evidence_dir)


def with_evidence(report: dict[str, Any], evidence_dir: Path | None) -> DistributionResult:
    """The result of a distribution to every rank, each rank's record written to
    ``evidence_dir/RANK.json`` when one is given."""
    if evidence_dir:
        for record in report["ranks"]:
            write_bytes_atomic(evidence_dir / f"{record['rank']}.json", readable_json_bytes(record))
    return DistributionResult(report=report)
