"""``sparkflake fanout OUT --site SITE``: an OCI layout to every rank, blob by blob; each rank
receives only the blobs its image store does not already hold verified.

Order of work, so that bad input moves no byte: rank 0 reads the layout's documents (index,
manifest, config re-derived from their bytes); every other rank says which of the image's
blobs its store holds verified (``store.blob_status``); the hops are set up while rank 0
hashes the blobs that will travel, and no byte moves before they verified (the gate). The
missing blobs then go down the chain in one transfer (one relay per hop, pipelined, each
blob verified by size and sha256 before it takes its name). As soon as a rank has every
blob, it writes the manifest and then ``index.json`` (``store.commit``) and, with
``--import podman``, copies the image into podman's store with skopeo, which skips the
layers that store already has, and checks the image ID before the tag counts.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ..core.errors import CheckFailed, InputError
from ..core.progress import ProgressCallback as Progress
from .agent_reply import AgentReply, MalformedReply, optional_text_at, text_at, texts_at
from .chain import FAILED, ChainTransfer, SizeGate, Transfer, cancel_relay, start_relays
from .engine import ENGINES, check_image_id
from .evidence import EVIDENCE_SCHEMA, REPORT_SCHEMA
from .fanout import check_images, stop_workers
from .site import Rank, Site
from .ssh import AgentsOfARun, StartedAgent, run_agent, start_agent
from .store import STORE_NAME, LayoutPlan, blob_path, plan_from_document
from .verified_prefixes import VERIFIED_PREFIXES_NAME

# rank 0's records go to each import beside the plan, in one stdin of at most relay.PLAN_LIMIT
# (16 MiB): half of it at most (glm53's six runs: 0.35 MB); past that each rank checks itself
SHARED_RECORDS_LIMIT = 8 << 20


@dataclass(frozen=True)
class LayoutFanoutRequest:
    layout: str  # absolute path on rank 0: an OCI layout, or a build output holding oci/
    image_id: str | None = None  # when given, the layout's config digest must equal it
    engine: str | None = None
    tag: str | None = None
    verify_only: bool = False
    retry_seconds: float = 120.0


def validate_layout_request(request: LayoutFanoutRequest) -> None:
    if not request.layout.startswith("/"):
        raise InputError(f"{request.layout}: expected an absolute path of an OCI layout on rank 0")
    if request.image_id is not None:
        check_image_id(request.image_id)
    if request.engine is not None:
        if request.engine not in ENGINES:
            raise InputError(f"--import: expected one of {ENGINES}, got {request.engine!r}")
        if request.engine != "podman":
            raise InputError(f"--import {request.engine}: the blob route imports into podman's "
                             "containers-storage; use the archive route (ARCHIVE --sha256) for docker, its "
                             "archive written from the build output by `sparkflake export OUT --format docker-archive`")
        if not request.tag:
            raise InputError("--import with a layout needs --tag: the name the image gets in podman's store")


def layout_fanout(site: Site, request: LayoutFanoutRequest, *, progress: Progress | None = None) -> dict[str, Any]:
    validate_layout_request(request)
    started = time.monotonic()
    ranks = site.ordered_ranks()
    first = ranks[0]
    stores = {rank.name: rank.data_path(STORE_NAME) for rank in ranks}
    # A run that sends starts each rank's settling agent first: it lists what the rank's
    # record holds (stat only) while rank 0 reads the layout, then waits, its SSH session
    # and interpreter ready, until the rank holds every blob and it commits (and imports).
    # --verify instead hashes each blob of the plan on every rank.
    pool = ThreadPoolExecutor(max_workers=len(ranks))
    committers: dict[str, StartedAgent] = {}
    relays: dict[str, Any] = {}
    checking: StartedAgent | None = None  # rank 0's plan agent, gone on to the entry check
    try:
        if not request.verify_only:
            committers = {rank.name: start_agent(site, rank, ["commit-layout", "--report-held", "--store",
                                                              stores[rank.name], *_import_args(rank, request)])
                          for rank in ranks[1:]}
            relays = start_relays(site)  # every hop set up too; they wait for their plans
        listed = {name: pool.submit(committer.first_reply) for name, committer in committers.items()}
        layout, plan, checking = _read_source_plan(site, first, request)
        image_id = plan.config.digest
        if request.image_id is not None and request.image_id != image_id:
            raise CheckFailed(f"rank {first.name}: layout {layout} has image ID (config digest) {image_id}, "
                              f"expected {request.image_id}; nothing transferred", check_id="fanout.image-id")
        blobs = plan.blobs
        blob_list = json.dumps([blob.as_record() for blob in blobs])
        if request.verify_only:
            listed = {rank.name: pool.submit(run_agent, site, rank, ["blob-status", "--rehash", "--no-record",
                                                                     "--store", stores[rank.name]],
                                             input_text=blob_list)
                      for rank in ranks[1:]}
        replies = {name: future.result() for name, future in listed.items()}
    except BaseException:
        # The pool's threads may be reading a committer's first reply (or finishing it):
        # killing ends those reads, and each committer is reaped only once its thread is done
        # (two threads in one Popen.communicate break it).
        for committer in committers.values():
            committer.kill()
        pool.shutdown(wait=True)
        for committer in committers.values():
            committer.cancel()
        for relay_process in relays.values():
            cancel_relay(relay_process)
        if checking is not None:
            checking.cancel()
        raise
    finally:
        pool.shutdown(wait=True)
    stores[first.name] = layout
    evidence = {rank.name: _new_record(rank, stores[rank.name], plan, len(blobs)) for rank in ranks}
    evidence[first.name].update(role="source", status="verified", blobs_reused=len(blobs))
    agents = AgentsOfARun()
    workers: list[threading.Thread] = []
    # with an import, rank 0's plan agent goes on to check every layer entry of the source
    # while the blobs move; the imports wait for its records and read no layer it read
    shared = _SourceEntryCheck(agents.adopt(checking), evidence[first.name]) if checking is not None else None
    if shared is not None:
        workers.append(shared.start())

    needs: dict[str, list[int]] = {}
    unreachable: dict[str, str] = {}
    for rank in ranks[1:]:
        reply, record = replies[rank.name], evidence[rank.name]
        if reply.result is None or reply.result.get("status") != "ok":
            message = f"rank {rank.name} ({rank.ssh}): cannot check its image store: {reply.describe_failure()}"
            unreachable[rank.name] = message
            record.update(status="failed", error=message)
            continue
        try:
            held, present_wrong = _store_state(reply, f"rank {rank.name} ({rank.ssh})")
        except MalformedReply as exc:
            unreachable[rank.name] = exc.message
            record.update(status="failed", error=exc.message)
            continue
        needs[rank.name] = [k for k, blob in enumerate(blobs) if blob.digest not in held]
        record.update(blobs_reused=len(blobs) - len(needs[rank.name]), present_wrong=present_wrong,
                      status="verified" if not needs[rank.name] else "mismatch" if present_wrong else "missing")

    if request.verify_only:
        source = _source_check(site, first, layout, blobs)
        if source:
            raise CheckFailed(source, check_id="fanout.source-sha256")
        if request.engine:
            check_images(site, ranks, request.engine, image_id, evidence)
        return _summary(request, plan, evidence, ranks, started)

    travelling = sorted({k for wanted in needs.values() for k in wanted})
    transfers = [Transfer(sha256=blob.digest.removeprefix("sha256:"), size=blob.size,
                          paths={name: str(blob_path(PurePosixPath(root), blob.digest)) for name, root in stores.items()})
                 for blob in blobs]
    gate = SizeGate()
    chain: ChainTransfer | None = None
    for committer in committers.values():
        agents.adopt(committer)

    def complete(name: str) -> None:
        worker = threading.Thread(target=_settle, args=(agents, site, site.rank(name), stores[name], plan),
                                  kwargs={"request": request, "chain": chain, "record": evidence[name],
                                          "committer": committers.pop(name, None), "shared": shared})
        workers.append(worker)
        worker.start()

    chain = ChainTransfer(site, transfers, gate, needs=needs, failed=unreachable,
                          retry_seconds=request.retry_seconds, on_verified=complete, progress=progress,
                          prestarted=relays)
    chain.start()
    try:
        failure = _source_check(site, first, layout, [blobs[k] for k in travelling]) if travelling else None
        if failure:
            raise CheckFailed(failure, check_id="fanout.source-sha256")
    except BaseException:
        gate.cancel()
        agents.end_all()  # rank 0's entry check, the committers
        with contextlib.suppress(Exception):
            chain.join()  # ended by the cancelled gate; the first error is the one to report
        for worker in list(workers):
            worker.join()
        for committer in committers.values():
            committer.cancel()
        raise
    try:
        gate.open(0)
        if request.engine:
            complete(first.name)
        for name, wanted in needs.items():
            if not wanted:
                complete(name)  # holds every blob: only the manifest and index are written
        outcomes = chain.join()
        for worker in list(workers):
            worker.join()
    except BaseException:  # an interrupt: nothing more is sent, committed or imported
        stop_workers(chain, agents, workers)
        for committer in committers.values():
            committer.cancel()
        raise
    for committer in committers.values():  # ranks the chain did not complete
        committer.cancel()
    for name, outcome in outcomes.items():
        if name not in needs and name not in unreachable:
            continue
        record = evidence[name]
        record.update(outcome.evidence(), blobs_sent=[blobs[k].digest for k in outcome.files_received],
                      blobs_reused=len(blobs) - len(outcome.files_received))
        if outcome.status == FAILED:
            record["error"] = outcome.error or record.get("error")
        elif needs.get(name):
            record["seconds"] = outcome.seconds
    return _summary(request, plan, evidence, ranks, started)


def _new_record(rank: Rank, store: str, plan: LayoutPlan, count: int) -> dict[str, Any]:
    return {"schema": EVIDENCE_SCHEMA, "kind": "fanout-blobs", "rank": rank.name, "ssh": rank.ssh,
            "store": store, "manifest_digest": plan.manifest_digest, "status": "pending", "error": None,
            "blobs": count, "blobs_sent": [], "blobs_reused": 0, "present_wrong": [],
            "bytes_received": 0, "seconds": 0.0, "attempts": 0, "resumed_from": [],
            "committed": False, "image_id": None, "imported": False}


def _read_source_plan(site: Site, first: Rank,
                      request: LayoutFanoutRequest) -> tuple[str, LayoutPlan, StartedAgent | None]:
    """Rank 0's plan of the layout; with an import, also its agent, gone on to check every
    layer entry (``layout-plan --check-entries``: one session, its interpreter warm)."""
    checks = bool(request.engine) and not request.verify_only
    args = ["layout-plan", "--layout", request.layout]
    if checks:
        args += ["--check-entries", first.data_path(VERIFIED_PREFIXES_NAME)]
    agent = start_agent(site, first, args)
    try:
        reply = agent.first_reply()
        if reply.result is None or reply.result.get("status") != "ok":
            ended = agent.finish()  # its status says a refusal (1) from bad input (2)
            if reply.result is None:
                raise InputError(f"rank {first.name} ({first.ssh}): cannot reach rank 0: {reply.describe_failure()}; "
                                 "nothing transferred")
            error = CheckFailed if ended.returncode == 1 else InputError
            raise error(f"rank {first.name}: {AgentReply(ended.returncode, reply.result, ended.stderr).describe_failure()}"
                        "; nothing transferred")
        layout = str(reply.result.get("layout", request.layout))
        plan = plan_from_document(reply.result, f"rank {first.name}: layout {layout}")
    except BaseException:
        agent.cancel()
        raise
    if not checks:
        agent.finish()  # it ends after the plan
        return layout, plan, None
    return layout, plan, agent


def _source_check(site: Site, first: Rank, layout: str, blobs: list[Any]) -> str | None:
    """Rank 0 hashes the blobs that will travel; the message when one is missing or wrong."""
    reply = run_agent(site, first, ["blob-status", "--rehash", "--no-record", "--store", layout],
                      input_text=json.dumps([blob.as_record() for blob in blobs]))
    if reply.result is None or reply.result.get("status") != "ok":
        return f"rank {first.name}: cannot hash the blobs of {layout}: {reply.describe_failure()}; nothing transferred"
    try:
        held, _ = _store_state(reply, f"rank {first.name} ({first.ssh})")
    except MalformedReply as exc:
        return f"{exc.message}; nothing transferred"
    bad = [blob.digest for blob in blobs if blob.digest not in held]
    if bad:
        return (f"rank {first.name}: layout {layout}: {len(bad)} blobs missing or not matching their digest "
                f"({', '.join(bad)}); nothing transferred")
    return None


def _store_state(reply: AgentReply, where: str) -> tuple[set[str], list[str]]:
    """A ``blob-status`` (or ``commit-layout --report-held``) reply: the digests the rank's
    store holds, and those it holds with other bytes."""
    held = texts_at(reply.result, "held", where)
    return set(held), texts_at(reply.result, "present_wrong", where)


def _import_args(rank: Rank, request: LayoutFanoutRequest) -> list[str]:
    if not request.engine:
        return []
    assert request.tag is not None
    return ["--engine", request.engine, "--tag", request.tag, "--engine-args-json", json.dumps(list(rank.engine_args)),
            "--verified-prefixes", rank.data_path(VERIFIED_PREFIXES_NAME)]


class _SourceEntryCheck:
    """Rank 0's check of every layer entry of the source layout (its plan agent's, after the
    plan), run while the chain moves the blobs; the imports wait for it and take its records
    of the image's runs of layers (``verified_prefixes``). Without records (the check
    refused, rank 0's session ended, or they are too large to send) each rank checks its
    layers itself, and a refusal is then its own."""

    def __init__(self, agent: StartedAgent, record: dict[str, Any]) -> None:
        self._agent, self._record = agent, record
        self._done = threading.Event()
        self.records: dict[str, Any] = {}

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run)
        thread.start()
        return thread

    def wait(self) -> dict[str, Any]:
        self._done.wait()
        return self.records

    def _run(self) -> None:
        record = self._record
        began = time.monotonic()
        try:
            reply = self._agent.finish()
            found = reply.result.get("verified_prefixes") if _ok(reply) and reply.result is not None else None
            if isinstance(found, dict) and len(json.dumps(found)) <= SHARED_RECORDS_LIMIT:
                self.records = found
            record["source_entry_check"] = {
                "status": "ok" if _ok(reply) else "failed", "seconds": round(time.monotonic() - began, 6),
                "layers_checked": (reply.result or {}).get("layers_checked") if _ok(reply) else None,
                "runs_shared": len(self.records), "message": None if _ok(reply) else reply.describe_failure()}
        finally:
            self._done.set()


def _settle(agents: AgentsOfARun, site: Site, rank: Rank, store: str, plan: LayoutPlan, *, request: LayoutFanoutRequest,
            chain: ChainTransfer | None, record: dict[str, Any], committer: StartedAgent | None,
            shared: _SourceEntryCheck | None) -> None:
    """Once a rank holds every blob: manifest and index (not on rank 0, whose layout is the
    source), then the import and the image ID check, in one agent call."""
    began = time.monotonic()
    if committer is None:  # rank 0: its layout is the source, only the import
        if not request.engine:
            return
        if shared is not None:
            shared.wait()  # rank 0's own records: its import reads no layer its check read
        reply = run_agent(site, rank, ["import-layout", "--layout", store, "--image-id", plan.config.digest,
                                       *_import_args(rank, request)], within=agents)
        imported = reply.result if _ok(reply) else None
    else:
        identities = chain.outcomes[rank.name].identities if chain is not None else {}
        received = {plan.blobs[k].digest: identity for k, identity in identities.items()}
        document: dict[str, Any] = {"plan": plan.as_record(), "received": received}
        if shared is not None and shared.wait():
            document["verified_prefixes"] = shared.records
        reply = committer.finish(json.dumps(document))
        if reply.result is not None and reply.result.get("manifest_digest"):
            record.update(status="verified", committed=True)
        imported = reply.result.get("import") if _ok(reply) and reply.result is not None else None
        if not record["committed"]:
            record.update(status="failed", error=f"rank {rank.name}: {reply.describe_failure()}")
            return
    record["settle_seconds"] = round(time.monotonic() - began, 6)
    if not request.engine:
        return
    if imported is None:
        record.update(status="failed", error=f"rank {rank.name}: import failed: {reply.describe_failure()}")
        return
    try:  # this runs in a worker thread: what it cannot read is the rank's failure, in its record
        where = f"rank {rank.name} ({rank.ssh})"
        path = "$" if committer is None else "$.import"
        if not isinstance(imported, dict):
            raise MalformedReply(where, path, "an object", imported)
        image_id = text_at(imported, "image_id", where, path)
        tag = optional_text_at(imported, "tag", where, path)
        reused = texts_at(imported, "reused_layers", where, path)
        checked = imported.get("layers_checked")  # an agent of an older version does not say
        if checked is not None and (type(checked) is not int or checked < 0):
            raise MalformedReply(where, f"{path}.layers_checked", "a count of layers", checked)
    except MalformedReply as exc:
        record.update(status="failed", error=exc.message)
        return
    if image_id != plan.config.digest:
        record.update(status="failed", error=f"rank {rank.name}: the engine holds image ID {image_id} after the "
                                             f"import, expected {plan.config.digest}")
        return
    record.update(imported=True, image_id=image_id, tag=tag, layers_reused_by_engine=reused, layers_checked=checked)


def _ok(reply: AgentReply) -> bool:
    return reply.returncode == 0 and reply.result is not None and reply.result.get("status") == "ok"


def _summary(request: LayoutFanoutRequest, plan: LayoutPlan, evidence: dict[str, dict[str, Any]],
             ranks: list[Rank], started: float) -> dict[str, Any]:
    records = [evidence[rank.name] for rank in ranks]
    complete = all(record["status"] == "verified" and (not request.engine or record["imported"])
                   for record in records)
    return {
        "schema": REPORT_SCHEMA,
        "kind": "fanout-blobs",
        "layout": request.layout,
        "manifest_digest": plan.manifest_digest,
        "image_id": plan.config.digest,
        "verify_only": request.verify_only,
        "complete": complete,
        "seconds": round(time.monotonic() - started, 6),
        "ranks": records,
    }
