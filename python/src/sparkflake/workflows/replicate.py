"""`sparkflake replicate MODEL_DIR --site SITE`: a checkpoint directory from rank 0 to every
rank (``distribute.replicate.replicate``: listed once, each rank reusing the files it holds
verified and receiving the rest down the chain), each rank's record written to
``--evidence-dir`` when asked for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.progress import Progress
from ..distribute.replicate import ReplicateRequest, replicate
from ..distribute.site import load_site
from .fanout import DistributionResult, with_evidence


@dataclass(frozen=True)
class ReplicationRequest:
    site: Path  # the site file (TOML)
    model_dir: str  # the checkpoint directory on rank 0 (absolute)
    dest: str | None = None  # directory on every other rank (default DATA_DIR/models/NAME)
    retry_seconds: float = 120.0  # how long a broken hop keeps resuming
    evidence_dir: Path | None = None  # one JSON evidence record per rank


def replicate_checkpoint(request: ReplicationRequest, progress: Progress | None = None) -> DistributionResult:
    report = replicate(
        load_site(request.site),
        ReplicateRequest(model_dir=request.model_dir, dest=request.dest, retry_seconds=request.retry_seconds),
        progress=progress,
    )
    return with_evidence(report, request.evidence_dir)
