"""`sparkflake launch-rank RANK ENVFILE`: verify and start one rank.

1. ``launch_inputs`` — the image to launch (``--image``, or a build's ``digests.json``), the
   profile's launch contract with that image's own capabilities, the container engine;
2. ``plan_rank`` — ``launch.plan.plan_launch``: the env file read as data, every setting
   resolved, the identity, every check before start, the container spec and its argv;
3. ``start_rank`` — ``launch.plan.prepare_state``, the one step that writes: the cache
   root marked, stored state accepted or quarantined;
4. ``exec_rank`` — the container engine replaces this process.

Four calls, not one, because the operator reads each step's outcome before the next one
runs: a missing engine under ``--dry-run`` is said before the plan is made, the plan's
report before any state is changed.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ..core.blob_cache import default_cache_root
from ..core.container_engine import Engine, detect_engine
from ..core.errors import InputError
from ..launch.contract import LaunchContract, load_contract
from ..launch.evidence import load_built_image
from ..launch.identity import StateDecision
from ..launch.image_capabilities import capabilities_of_image
from ..launch.plan import LaunchPlan, plan_launch, prepare_state
from .named_digests import check_named_digest


@dataclass(frozen=True)
class LaunchRequest:
    rank: int  # this host's rank (0 is the master)
    env_file: str  # runtime.env of this rank
    profile: str = "glm53-dflash7"  # name or path
    engine: str | None = None  # podman or docker (default: detected)
    engine_args: tuple[str, ...] = ()  # global engine options
    image: str | None = None  # image ID to launch (default: the profile's pin)
    digests_file: str | None = None  # a build's digests.json: launch its config digest
    cache_root: Path | None = None  # where `runtime check` kept each image's capabilities
    dry_run: bool = False  # check and report, start nothing
    rehash: bool = False  # ignore the verified-hash cache
    detach: bool = False  # start the container detached


@dataclass(frozen=True)
class LaunchInputs:
    image: str | None  # the image ID to launch; None: the profile's pin
    contract: LaunchContract  # with the capabilities written for that image
    engine: Engine | None
    engine_problem: InputError | None  # why no engine was found (said, not refused, under --dry-run)


def _image_to_launch(request: LaunchRequest) -> tuple[str | None, str | None]:
    """The image ID to launch, and its manifest digest when a digests.json names it."""
    if request.image and request.digests_file:
        raise InputError("--image and --digests are exclusive")
    if request.image:
        check_named_digest("--image", request.image)
        return request.image, None
    if request.digests_file:
        built = load_built_image(request.digests_file)
        if built is None:
            raise InputError(f"--digests {request.digests_file}: no such file")
        return built.config_digest, built.manifest_digest
    return None, None


def _with_image_capabilities(contract: LaunchContract, request: LaunchRequest, image: str | None,
                             manifest: str | None) -> LaunchContract:
    """The contract with the capabilities written for ``image`` (an earlier image's own, on
    a roll back), found beside --digests or in the cache's store."""
    if image is None:
        return contract
    found = capabilities_of_image(
        image, manifest_digest=manifest, digests_file=Path(request.digests_file) if request.digests_file else None,
        cache_root=request.cache_root or default_cache_root(),
        profile_capabilities=contract.capabilities,
    )
    return dataclasses.replace(contract, capabilities=found)


def launch_inputs(request: LaunchRequest) -> LaunchInputs:
    """What the plan is made of; a missing engine is refused unless ``dry_run``."""
    image, manifest = _image_to_launch(request)
    contract = _with_image_capabilities(load_contract(request.profile), request, image, manifest)
    try:
        return LaunchInputs(image=image, contract=contract,
                            engine=detect_engine(request.engine, request.engine_args), engine_problem=None)
    except InputError as exc:
        if not request.dry_run:
            raise
        return LaunchInputs(image=image, contract=contract, engine=None, engine_problem=exc)


def plan_rank(request: LaunchRequest, inputs: LaunchInputs) -> LaunchPlan:
    """The rank's plan: every check run, nothing started, no stored state changed."""
    return plan_launch(
        rank=request.rank,
        env_file=request.env_file,
        contract=inputs.contract,
        engine=inputs.engine,
        image_id=inputs.image,
        rehash=request.rehash,
        detach=request.detach,
    )


def start_rank(plan: LaunchPlan) -> list[StateDecision]:
    """The cache root marked, the stored state accepted or quarantined (a plan that passed)."""
    return prepare_state(plan)


def exec_rank(plan: LaunchPlan) -> NoReturn:
    """The container engine in place of this process."""
    try:
        os.execv(plan.argv[0], plan.argv)
    except OSError as exc:
        raise InputError(f"cannot exec {plan.argv[0]}: {exc.strerror}") from None
