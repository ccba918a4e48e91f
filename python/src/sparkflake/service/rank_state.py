"""What a rank does and keeps for the service, run on the rank: start its container after
admitting it again, keep each started deployment (its request, runtime.env and pins file)
so that ``rollback`` can start the previous one, and find, watch, describe and stop the
service's containers by their labels — never by name alone, so no foreign container is
touched."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.atomic_write import write_bytes_atomic
from ..core.canonical_json import readable_json_bytes
from ..core.container_engine import Engine
from ..core.documents import parse_json, read_json_file, read_regular_file
from ..core.errors import InputError
from ..launch.plan import prepare_state
from .rank_admission import admit_rank, rank_engine
from .rank_request import DEPLOYMENT_LABEL, SERVICE_LABEL, RankRequest

KEPT_SCHEMA = "sparkflake.service-rank/v1"
DOWNS_FILE = "downs.json"  # how many `service down`s have stopped this rank
LOG_LINES = 40  # the last lines of a rank's log kept in the evidence
ENGINE_TIMEOUT = 120


def _engine(engine: Engine, *args: str, timeout: float = ENGINE_TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(engine.command(*args), capture_output=True, encoding="utf-8", errors="replace", timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"{engine.name} {' '.join(args[:2])}: {exc}", check_id="engine.reachable") from None


def deployment_dir(state_dir: str, deployment: str) -> Path:
    if not deployment or "/" in deployment or deployment.startswith("."):
        raise InputError(f"deployment {deployment!r}: not a deployment name")
    return Path(state_dir) / "deployments" / deployment


def keep_deployment(request: RankRequest, pins_path: str) -> RankRequest:
    """Copy what the deployment was started from under the state directory; the request
    that starts it again from the copies."""
    directory = deployment_dir(request.state_dir, request.deployment)
    directory.mkdir(parents=True, exist_ok=True)
    env_copy = directory / "runtime.env"
    write_bytes_atomic(env_copy, read_regular_file(request.env_file, "env file"))
    pins_copy = None
    if pins_path:
        pins_copy = str(directory / "checkpoint-pins.json")
        write_bytes_atomic(pins_copy, read_regular_file(pins_path, "checkpoint pins"))
    kept = RankRequest(**{**json.loads(request.to_json()), "engine_args": request.engine_args,
                          "env_file": str(env_copy), "checkpoint_pins": pins_copy, "replacing": False,
                          "downs": None})
    write_bytes_atomic(directory / "request.json", readable_json_bytes(json.loads(kept.to_json())))
    return kept


@contextlib.contextmanager
def rank_lock(state_dir: str, *, create: bool) -> Iterator[None]:
    """The service's lock on this rank (``flock`` on its state directory), held by a start
    from its last look at the controller until its container exists, and by a stop: a stop
    never lists the service's containers while a start it may not know of is creating one
    (a start whose controller was interrupted carries on until it looks). A stop where
    nothing was ever started (no state directory) has nothing to wait for."""
    if create:
        os.makedirs(state_dir, exist_ok=True)
    try:
        descriptor = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        if create:
            raise
        yield
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # the lock goes with the descriptor


def downs_of(state_dir: str) -> int:
    """How many `service down`s have stopped this rank (none without a state directory)."""
    path = Path(state_dir) / DOWNS_FILE
    if not path.exists():
        return 0
    document = read_json_file(path, "the count of downs")
    count = document.get("downs") if isinstance(document, dict) and document.get("schema") == KEPT_SCHEMA else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InputError(f"{path}: expected a {KEPT_SCHEMA} document with a count of downs")
    return count


def count_down(state_dir: str) -> None:
    """One more `service down` on this rank (the caller holds the rank's lock)."""
    write_bytes_atomic(Path(state_dir) / DOWNS_FILE,
                       readable_json_bytes({"schema": KEPT_SCHEMA, "downs": downs_of(state_dir) + 1}))


def start_rank(request: RankRequest, controller_gone: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Admit again (nothing may have changed since the gang admission), keep the
    deployment, prepare the cache root's state, start the container detached. A start whose
    controller went away (``controller_gone``: its SSH session ended, an interrupt) creates
    nothing: it looks before it keeps the deployment and, holding the rank's lock, before
    the container is created; what it kept meanwhile is removed again."""
    admission = admit_rank(request)
    if not admission.ok:
        failed = [check.as_record() for check in admission.checks if check.status != "pass"]
        return {"status": "failed", "message": "admission failed at start: "
                + "; ".join(f"{c['id']}: {c['detail']}" for c in failed), "checks": failed}
    gone = {"status": "failed", "message": "the controller went away before the container was created: none was"}
    if controller_gone():
        return gone
    with rank_lock(request.state_dir, create=True):
        # a `service down` since this start's admission stopped the service on this rank: it
        # meant the start too (else an up and a down at once both said they succeeded, the
        # ranks the down had passed before the up reached them left running)
        if request.downs is not None and downs_of(request.state_dir) != request.downs:
            return {"status": "failed", "message": "a `service down` stopped the service on this rank after this "
                    "start's admission: no container was created"}
        keep_deployment(request, admission.plan.resolution.values["CHECKPOINT_PINS"])
        prepare_state(admission.plan)
        if controller_gone():
            remove_kept(request.state_dir, request.deployment)
            return gone
        started = subprocess.run(admission.argv, capture_output=True, encoding="utf-8", errors="replace",
                                 timeout=ENGINE_TIMEOUT, check=False)
    if started.returncode != 0:
        return {"status": "failed", "message": f"{request.engine} run: {started.stderr.strip()[-500:]}"}
    return {"status": "ok", "container": admission.facts["container"], "container_id": started.stdout.strip(),
            "started_at": time.time()}


def commit_rank(state_dir: str, deployment: str) -> dict[str, Any]:
    """The deployment is the service now: the one it replaces becomes ``previous``."""
    deployment_dir(state_dir, deployment)  # a name, not a path
    root = Path(state_dir)
    current = kept_pointer(root / "current.json")
    if current is not None and current != deployment:
        write_bytes_atomic(root / "previous.json", readable_json_bytes({"schema": KEPT_SCHEMA, "deployment": current}))
    write_bytes_atomic(root / "current.json", readable_json_bytes({"schema": KEPT_SCHEMA, "deployment": deployment}))
    return {"status": "ok", "current": deployment, "previous": current if current != deployment else None}


def kept_pointer(path: Path) -> str | None:
    if not path.exists():
        return None
    document = read_json_file(path, "kept deployment")
    if not isinstance(document, dict) or document.get("schema") != KEPT_SCHEMA:
        raise InputError(f"{path}: expected a {KEPT_SCHEMA} document")
    deployment = document.get("deployment")
    if not isinstance(deployment, str):
        raise InputError(f"{path}: deployment: expected a string")
    return deployment


def kept_deployments(state_dir: str) -> dict[str, Any]:
    root = Path(state_dir)
    found: dict[str, Any] = {"status": "ok"}
    for which in ("current", "previous"):
        name = kept_pointer(root / f"{which}.json")
        request = None
        if name is not None:
            path = deployment_dir(state_dir, name) / "request.json"
            request = parse_json(read_regular_file(path, "kept deployment request"), str(path))
            RankRequest.from_document(request, str(path))
        found[which] = request
    return found


def service_containers(engine: Engine, service: str, deployment: str | None = None) -> list[dict[str, Any]]:
    """This service's containers (all states), as the engine describes them."""
    filters = ["--filter", f"label={SERVICE_LABEL}={service}"]
    if deployment is not None:
        filters += ["--filter", f"label={DEPLOYMENT_LABEL}={deployment}"]
    for _attempt in range(3):  # one that went away between the two calls: ask again
        listed = _engine(engine, "ps", "--all", "--quiet", "--no-trunc", *filters)
        if listed.returncode != 0:
            raise InputError(f"{engine.name} ps: {listed.stderr.strip()[-300:]}")
        ids = listed.stdout.split()
        if not ids:
            return []
        inspected = _engine(engine, "container", "inspect", *ids)
        if inspected.returncode == 0:
            break
    else:
        raise InputError(f"{engine.name} container inspect: {inspected.stderr.strip()[-300:]}")
    try:
        described = json.loads(inspected.stdout)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{engine.name} container inspect: not JSON: {str(exc)[:200]}") from None
    if not isinstance(described, list):
        raise InputError(f"{engine.name} container inspect: expected a JSON array of containers")
    containers = []
    for record in described:
        if not isinstance(record, dict):
            continue
        labels = (record.get("Config") or {}).get("Labels") or {}
        if labels.get(SERVICE_LABEL) != service:  # the filter said so; never act on a foreign one
            continue
        state = record.get("State") or {}
        containers.append({
            "id": record.get("Id"), "name": str(record.get("Name", "")).lstrip("/"),
            "image": record.get("Image"), "deployment": labels.get(DEPLOYMENT_LABEL),
            "settings_hash": labels.get("org.sparkflake.settings-hash"),
            "status": state.get("Status"), "running": bool(state.get("Running")),
            "exit_code": state.get("ExitCode"), "started_at": state.get("StartedAt"),
            "finished_at": state.get("FinishedAt"),
        })
    return sorted(containers, key=lambda c: c["name"])


def last_log_lines(engine: Engine, container: str, lines: int = LOG_LINES) -> list[str]:
    shown = _engine(engine, "logs", "--tail", str(lines), "--", container)  # "--": a name is never a flag
    return (shown.stdout + shown.stderr).splitlines()[-lines:]


def stop_service(engine: Engine, service: str, deployment: str | None, timeout: int) -> dict[str, Any]:
    """Stop and remove this service's containers (of one deployment, or all), keeping the
    last lines of each one's log."""
    stopped = []
    for container in service_containers(engine, service, deployment):
        logs = last_log_lines(engine, container["id"])
        halted = _engine(engine, "stop", "--time", str(timeout), container["id"], timeout=timeout + ENGINE_TIMEOUT)
        removed = _engine(engine, "rm", "--force", container["id"])
        stopped.append({**container, "logs": logs, "stopped": halted.returncode == 0 and removed.returncode == 0,
                        "message": (halted.stderr + removed.stderr).strip()[-300:]})
    failed = [c["name"] for c in stopped if not c["stopped"]]
    return {"status": "failed" if failed else "ok", "containers": stopped,
            "message": f"could not stop {', '.join(failed)}" if failed else ""}


class Children:
    """Child processes that end with the agent: ``end_all`` ends those started and refuses
    to start more (``watch``'s ``podman wait`` otherwise outlives its agent until the
    container ends, one per watch of every start)."""

    END_SECONDS = 5.0  # after SIGTERM, before SIGKILL

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: list[subprocess.Popen[str]] = []
        self._ended = False

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv)``, output captured as text, ended by ``end_all``."""
        with self._lock:
            if self._ended:
                raise InputError(f"{argv[0]}: not started, the agent is ending")
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                                     errors="replace")
            self._started.append(child)
        stdout, stderr = child.communicate()
        return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)

    def end_all(self) -> None:
        """End every child started (SIGTERM, then SIGKILL); none starts after this."""
        with self._lock:
            self._ended = True
            for child in self._started:
                if child.poll() is None:
                    child.terminate()
            for child in self._started:
                try:
                    child.wait(self.END_SECONDS)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


def watch_container(request: RankRequest, name: str, children: Children | None = None) -> dict[str, Any]:
    """Until the container ends (the controller ends the watch by closing our stdin): its
    exit status and last log lines. ``podman wait`` runs as one of ``children``, which the
    agent ends when the controller goes."""
    engine = rank_engine(request)
    # "--": the name (from the controller, which read it in this rank's reply) is never read
    # as a flag: `podman wait -l` would wait for the latest container, whichever that is
    waited = (children or Children()).run(engine.command("wait", "--", name))
    code = waited.stdout.strip().splitlines()[-1] if waited.stdout.strip() else waited.stderr.strip()[-200:]
    return {"status": "exited", "container": name, "exit_code": code, "logs": last_log_lines(engine, name)}


def remove_kept(state_dir: str, deployment: str) -> None:
    """A deployment that never became the service (its start was rolled back)."""
    root = Path(state_dir)
    if deployment in (kept_pointer(root / "current.json"), kept_pointer(root / "previous.json")):
        return
    directory = deployment_dir(state_dir, deployment)
    if directory.is_dir() and not directory.is_symlink():
        shutil.rmtree(directory)
    if os.path.isdir(root / "deployments") and not any((root / "deployments").iterdir()):
        (root / "deployments").rmdir()
