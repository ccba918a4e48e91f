"""`sparkflake service up|rollback|restart|down|status SITE`: the whole service, from one
machine with SSH to the ranks.

What the operator names is turned into the service stage's request here (a build's
``digests.json`` read, the digests checked, the signing key loaded); the work is
``service.workflow``'s: gang admission, ordered start, readiness, roll back, the record
(``service.down``'s for ``down``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..core.errors import InputError
from ..distribute.site import MAX_SERVICE_WAIT, shown_integer
from ..launch.evidence import load_built_image
from ..service import down, workflow
from ..signing.keys import key_password, load_private_key
from .named_digests import check_named_digest

Deployment = Literal["up", "rollback", "restart"]
_DEPLOYMENTS = {"up": workflow.up, "rollback": workflow.rollback, "restart": workflow.restart}


@dataclass(frozen=True)
class ServiceCommandRequest:
    site: str  # the site file (site.toml)
    image: str | None = None  # sha256:CONFIG, overrides [service].image
    manifest: str | None = None  # sha256:MANIFEST, overrides [service].manifest
    digests_file: str | None = None  # a build's digests.json: its config and manifest digests
    ready_timeout: int | None = None  # seconds, overrides [service].ready_timeout
    replace: bool = False  # up: stop the running deployment after admission, then start
    sign_key_file: str | None = None  # cosign key that signs the deployment record (COSIGN_PASSWORD)


def service_request(request: ServiceCommandRequest) -> workflow.ServiceRequest:
    """The service stage's request; bad input (a digest, a timeout, the key) refused."""
    image, manifest = request.image, request.manifest
    if request.digests_file:
        if image or manifest:
            raise InputError("--digests replaces --image and --manifest")
        built = load_built_image(request.digests_file)
        if built is None:
            raise InputError(f"--digests {request.digests_file}: no such file")
        image, manifest = built.config_digest, built.manifest_digest
    for option, value in (("--image", image), ("--manifest", manifest)):
        check_named_digest(option, value)
    timeout = request.ready_timeout
    if timeout is not None and not 0 < timeout <= MAX_SERVICE_WAIT:  # the site file's own bound
        raise InputError(f"--ready-timeout {shown_integer(timeout)}: expected a positive number of seconds, "
                         f"at most {MAX_SERVICE_WAIT}")
    key = load_private_key(request.sign_key_file, key_password()) if request.sign_key_file else None
    return workflow.ServiceRequest(site_path=request.site, image=image, manifest=manifest, ready_timeout=timeout,
                                   replace=request.replace, sign_key=key)


def deploy_service(deployment: Deployment, request: ServiceCommandRequest,
                   progress: workflow.Progress) -> workflow.DeployResult:
    """``up`` (a new deployment), ``rollback`` (each rank's previous) or ``restart`` (each
    rank's current), through the same admission; the deployment record written."""
    return _DEPLOYMENTS[deployment](service_request(request), progress)


def stop_service(request: ServiceCommandRequest, progress: workflow.Progress) -> down.DownResult:
    """The service's containers stopped (by label) on every rank, last rank first."""
    return down.down(service_request(request), progress)


def service_status(request: ServiceCommandRequest) -> workflow.StatusResult:
    """Per rank: image, settings hash, up since; rank 0 ready or not."""
    return workflow.status(service_request(request))
