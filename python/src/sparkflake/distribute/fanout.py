"""``sparkflake fanout``: one checksum-bound archive to every rank of a site.

Order of work, so that bad input moves no byte: the request is validated (digest, image
ID, archive name), then rank 0's archive is hashed (or downloaded and hashed), then every
other rank reports what it holds (a verified copy is reused, a wrong one moved aside), then
the chain transfer runs, then each verified rank optionally imports the archive and checks
the image ID before tagging. ``verify_only`` hashes and reports, changing nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

from ..core.digest import is_sha256_hex
from ..core.errors import CheckFailed, InputError
from ..core.progress import ProgressCallback as Progress
from ..core.urls import redacted
from .agent_reply import AgentReply, MalformedReply, count_at, flag_at, optional_text_at, text_at
from .chain import FAILED, ChainTransfer, SizeGate, Transfer
from .engine import check_import_request
from .evidence import EVIDENCE_SCHEMA, REPORT_SCHEMA
from .files import CopyState
from .site import Rank, Site
from .ssh import AgentsOfARun, run_agent


@dataclass(frozen=True)
class FanoutRequest:
    archive: str  # a path on rank 0, or an http(s) URL rank 0 downloads (resumable)
    sha256: str
    image_id: str | None = None
    engine: str | None = None
    tag: str | None = None
    verify_only: bool = False
    retry_seconds: float = 120.0

    @property
    def is_url(self) -> bool:
        return self.archive.startswith(("http://", "https://"))

    @property
    def shown(self) -> str:
        """The archive as messages and the report show it: a URL without user information or
        query (a presigned URL's signature is a credential)."""
        return redacted(self.archive) if self.is_url else self.archive

    @property
    def name(self) -> str:
        raw = urlparse(self.archive).path if self.is_url else self.archive
        return PurePosixPath(raw).name


def validate_request(request: FanoutRequest) -> None:
    if not is_sha256_hex(request.sha256):
        raise InputError(f"--sha256: expected 64 lowercase hex digits, got {request.sha256!r}")
    check_import_request(request.engine, request.image_id)
    if request.is_url:
        if "@" in re.split(r"[?#]", request.archive.partition("://")[2], maxsplit=1)[0]:
            # urllib sends no user information, and the URL is shown and recorded: a credential
            # travels in a presigned URL's query, which is never shown (an "@" of a path is
            # refused with it: "user:pa/ss@host" reads as a host, a port and a path)
            raise InputError(f"{request.shown}: the URL carries user information (user:password@); give a "
                             "presigned URL (its query is never shown or recorded) or serve the archive without")
        try:
            port = urlparse(request.archive).port  # raises for a port that is no number
        except ValueError:  # not urllib's words: they quote what they could not read
            raise InputError(f"{request.shown}: not a URL: its host or port cannot be read") from None
        if port == 0:
            raise InputError(f"{request.shown}: port 0 is no port to download from")
    name = request.name
    if not name or name in (".", "..") or name.startswith("."):
        raise InputError(f"{request.shown}: cannot derive an archive file name from it")
    if not request.is_url and not request.archive.startswith("/"):
        raise InputError(f"{request.archive}: expected an absolute path on rank 0 or an http(s) URL")


def fanout(site: Site, request: FanoutRequest, *, progress: Progress | None = None) -> dict[str, Any]:
    validate_request(request)
    started = time.monotonic()
    ranks = site.ordered_ranks()
    first = ranks[0]
    evidence: dict[str, dict[str, Any]] = {
        rank.name: {"schema": EVIDENCE_SCHEMA, "kind": "fanout", "rank": rank.name, "ssh": rank.ssh,
                    "sha256": None, "bytes": None,
                    "bytes_received": 0, "seconds": None, "status": "pending", "error": None,
                    "image_id": None, "imported": False, "attempts": 0, "resumed_from": []}
        for rank in ranks
    }

    paths = {rank.name: rank.data_path(request.name) for rank in ranks}
    if not request.is_url:
        paths[first.name] = request.archive
    # Rank 0's check and the others' (read-only) status run together, and the hops are set
    # up while rank 0 is still hashing; but no rank changes anything and no byte moves
    # before rank 0's archive has verified (the gate). A wrong copy is moved aside by the
    # receiver that replaces it.
    pool = ThreadPoolExecutor(max_workers=len(ranks))
    try:
        source_future = pool.submit(_prepare_source, site, first, request, evidence[first.name])
        status_futures = {rank.name: pool.submit(_status, site, rank, paths[rank.name], request)
                          for rank in ranks[1:]}
        replies = {name: future.result() for name, future in status_futures.items()}
        if request.verify_only:
            source_future.result()
    except BaseException:
        pool.shutdown(wait=True)
        raise

    needs: set[str] = set()
    unreachable: dict[str, str] = {}
    for rank in ranks[1:]:
        reply = replies[rank.name]
        record = evidence[rank.name]
        record["path"] = paths[rank.name]
        if reply.result is None or reply.returncode != 0:
            message = f"rank {rank.name} ({rank.ssh}): cannot run the status check: {reply.describe_failure()}"
            unreachable[rank.name] = message
            record.update(status="failed", error=message)
            continue
        try:
            state = CopyState.from_reply(reply.result, f"rank {rank.name} ({rank.ssh})")
        except MalformedReply as exc:
            unreachable[rank.name] = exc.message
            record.update(status="failed", error=exc.message)
            continue
        record["moved_aside"] = None
        if state.matches:
            record.update(status="verified", reused=True, sha256=request.sha256, bytes=state.size, seconds=0.0)
        else:
            record.update(status="missing" if not state.exists else "mismatch", partial_bytes=state.partial_size)
            needs.add(rank.name)

    if request.verify_only:
        pool.shutdown(wait=True)
        source_bytes = evidence[first.name]["bytes"]
        for rank in ranks[1:]:  # the same sha256 is the same bytes: a rank that says otherwise is wrong
            record = evidence[rank.name]
            if record.get("reused") and record["bytes"] != source_bytes:
                record.update(status="failed", reused=False,
                              error=f"rank {rank.name} ({rank.ssh}): the agent's reply gives a copy with sha256 "
                                    f"{request.sha256} of {record['bytes']} bytes; rank 0's has {source_bytes}")
        if request.engine and request.image_id:
            check_images(site, ranks, request.engine, request.image_id, evidence)
        return _summary(site, request, evidence, started)

    imports: list[threading.Thread] = []
    agents = AgentsOfARun()
    gate = SizeGate()

    def verified(name: str) -> None:
        record = evidence[name]
        record.update(status="verified", sha256=request.sha256, bytes=gate.size)
        if request.engine:
            worker = threading.Thread(target=_import, args=(agents, site, site.rank(name), paths[name], request, record))
            imports.append(worker)
            worker.start()

    chain = ChainTransfer(
        site,
        [Transfer(sha256=request.sha256, paths=paths)],
        gate,
        needs={name: [0] for name in needs},
        failed=unreachable,
        retry_seconds=request.retry_seconds,
        on_verified=verified,
        progress=progress,
    )
    chain.start()
    try:
        source_future.result()
    except BaseException:
        gate.cancel()
        with contextlib.suppress(Exception):
            chain.join()  # ended by the cancelled gate; the first error is the one to report
        raise
    finally:
        pool.shutdown(wait=True)
    try:
        gate.open(int(evidence[first.name]["bytes"]))
        if request.engine:
            verified(first.name)
        for name in evidence:
            if name != first.name and evidence[name]["status"] == "verified":
                verified(name)
        outcomes = chain.join()
        for worker in list(imports):
            worker.join()
    except BaseException:  # an interrupt: nothing more is sent, committed or imported
        stop_workers(chain, agents, imports)
        raise
    for name, outcome in outcomes.items():
        if name not in needs and name not in unreachable:
            continue
        record = evidence[name]
        record.update(outcome.evidence())
        if outcome.status == FAILED:
            record["error"] = outcome.error or record.get("error")
        else:
            record["seconds"] = outcome.seconds
    return _summary(site, request, evidence, started)


def _prepare_source(site: Site, first: Rank, request: FanoutRequest, record: dict[str, Any]) -> str:
    began = time.monotonic()
    where = f"rank {first.name} ({first.ssh})"
    if request.is_url and not request.verify_only:  # --verify reads what rank 0 already holds
        path = first.data_path(request.name)
        deadline = time.monotonic() + request.retry_seconds
        received = 0
        attempts = 0
        while True:
            attempts += 1
            # the URL on stdin, not on argv: ssh's argv here and the agent's on rank 0 are
            # every local user's to read (/proc/PID/cmdline), a presigned URL's signature too
            reply = run_agent(site, first, ["download", "--path", path, "--sha256", request.sha256],
                              input_text=json.dumps({"url": request.archive}) + "\n")
            if reply.result is not None and "received" in reply.result:
                received += count_at(reply.result, "received", where)
            if (reply.result or {}).get("status") != "incomplete" or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        _require_source(first, reply, request)
        record.update(bytes_received=received, attempts=attempts)
        size = count_at(reply.result, "size", where)
    else:
        path = first.data_path(request.name) if request.is_url else request.archive
        reply = run_agent(site, first, ["status", "--path", path, "--sha256", request.sha256])
        _require_source(first, reply, request)
        state = CopyState.from_reply(reply.result, where)
        if not state.exists:
            raise InputError(f"rank {first.name}: archive {path} does not exist; nothing transferred")
        if not state.matches or state.size is None:
            raise CheckFailed(
                f"rank {first.name}: archive {path} has sha256 {state.sha256}, expected "
                f"{request.sha256}; nothing transferred",
                check_id="fanout.source-sha256",
            )
        size = state.size
    record.update(status="verified", sha256=request.sha256, bytes=size,
                  seconds=round(time.monotonic() - began, 6), path=path, role="source")
    return path


def _require_source(first: Rank, reply: AgentReply, request: FanoutRequest) -> None:
    if reply.result is None:
        # A rank that cannot be reached is a rank that could not be completed (exit 1, as
        # for every other rank; docs/distribution.md), not bad input.
        raise CheckFailed(f"rank {first.name} ({first.ssh}): cannot reach rank 0: {reply.describe_failure()}; "
                          "nothing transferred", check_id="fanout.rank-reachable")
    status = reply.result.get("status")
    if status == "incomplete":
        raise CheckFailed(f"rank {first.name}: {reply.result.get('message')}; gave up after --retry-seconds",
                          check_id="fanout.download")
    if status == "sha256-mismatch":
        raise CheckFailed(f"rank {first.name}: {reply.result.get('message')}; nothing transferred",
                          check_id="fanout.source-sha256")
    if status == "failed":
        raise InputError(f"rank {first.name}: {reply.result.get('message')}; nothing transferred")


def _status(site: Site, rank: Rank, path: str, request: FanoutRequest) -> AgentReply:
    return run_agent(site, rank, ["status", "--path", path, "--sha256", request.sha256])


def stop_workers(chain: ChainTransfer, agents: AgentsOfARun, workers: list[threading.Thread]) -> None:
    """End a fan-out that was interrupted after bytes began to move: its relays, and the
    agents its workers started (imports, commits), then wait for every thread it started,
    so none carries on after the controller has gone."""
    chain.cancel()
    agents.end_all()
    with contextlib.suppress(Exception):
        chain.join()
    for worker in list(workers):
        worker.join()


def _import(agents: AgentsOfARun, site: Site, rank: Rank, path: str, request: FanoutRequest,
            record: dict[str, Any]) -> None:
    assert request.engine and request.image_id
    args = ["import", "--archive", path, "--engine", request.engine, "--image-id", request.image_id,
            "--engine-args-json", json.dumps(list(rank.engine_args))]
    if request.tag:
        args += ["--tag", request.tag]
    began = time.monotonic()
    reply = run_agent(site, rank, args, within=agents)
    record["import_seconds"] = round(time.monotonic() - began, 6)
    if not (reply.returncode == 0 and reply.result and reply.result.get("status") == "ok"):
        record.update(status="failed", error=f"rank {rank.name}: import failed: {reply.describe_failure()}")
        return
    try:  # this runs in a worker thread: what it cannot read is the rank's failure, in its record
        where = f"rank {rank.name} ({rank.ssh})"
        image_id, tag = text_at(reply.result, "image_id", where), optional_text_at(reply.result, "tag", where)
    except MalformedReply as exc:
        record.update(status="failed", error=exc.message)
        return
    if image_id != request.image_id:
        record.update(status="failed", error=f"rank {rank.name}: the engine holds image ID {image_id} after the "
                                             f"import, expected {request.image_id}")
        return
    record.update(imported=True, image_id=image_id, tag=tag)


def check_images(site: Site, ranks: list[Rank], engine: str, image_id: str,
                 evidence: dict[str, dict[str, Any]]) -> None:
    """Read-only: does each rank's engine hold ``image_id``?"""
    for rank in ranks:
        record = evidence[rank.name]
        if record["status"] == "failed":
            continue
        reply = run_agent(site, rank, ["image-status", "--engine", engine, "--image-id", image_id,
                                       "--engine-args-json", json.dumps(list(rank.engine_args))])
        try:
            present = reply.result is not None and flag_at(reply.result, "present", f"rank {rank.name} ({rank.ssh})")
        except MalformedReply as exc:
            record.update(status="failed", error=exc.message)
            present = False
        record["image_id"] = image_id if present else None
        record["imported"] = present
        if not present:
            record["image_missing"] = True


def _summary(site: Site, request: FanoutRequest, evidence: dict[str, dict[str, Any]], started: float) -> dict[str, Any]:
    records = [evidence[name] for name in site.order]
    complete = all(
        record["status"] == "verified" and (not request.engine or record["imported"]) for record in records
    )
    return {
        "schema": REPORT_SCHEMA,
        "kind": "fanout",
        "archive": request.shown,
        "sha256": request.sha256,
        "image_id": request.image_id,
        "verify_only": request.verify_only,
        "complete": complete,
        "seconds": round(time.monotonic() - started, 6),
        "ranks": records,
    }
