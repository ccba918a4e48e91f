"""``sparkflake replicate MODEL_DIR --site SITE``: a checkpoint directory from rank 0 to the
other ranks over the same chain transport as ``fanout``.

The manifest (path, size, sha256 of every file) is computed once, at rank 0. Each rank says
which files it already holds correctly; only the others travel, one file at a time, each
pipelined down the chain and verified by its receiver before it takes its final name. A
rank that holds every file gets the manifest recorded beside them
(``.sparkflake-manifest.json``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ..core.errors import InputError
from ..core.progress import ProgressCallback as Progress
from .agent_reply import MalformedReply, texts_at
from .chain import FAILED, ChainTransfer, SizeGate, Transfer
from .evidence import EVIDENCE_SCHEMA, REPORT_SCHEMA
from .manifest import FileEntry, manifest_bytes, manifest_from_document
from .site import Rank, Site
from .ssh import run_agent


@dataclass(frozen=True)
class ReplicateRequest:
    model_dir: str  # absolute path on rank 0
    dest: str | None = None  # absolute path on every other rank; default DATA_DIR/models/NAME
    retry_seconds: float = 120.0


def destination(rank: Rank, request: ReplicateRequest) -> str:
    if request.dest:
        return request.dest
    return rank.data_path("models", PurePosixPath(request.model_dir).name)


def failed_files_message(entries: list[FileEntry], state: list[str], error: str | None) -> str:
    lost = [entry.path for entry, held in zip(entries, state, strict=True) if held == FAILED]
    shown = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
    return f"{shown}: {error}" if lost else str(error)


def replicate(site: Site, request: ReplicateRequest, *, progress: Progress | None = None) -> dict[str, Any]:
    if not request.model_dir.startswith("/") or PurePosixPath(request.model_dir).name in ("", ".", ".."):
        raise InputError(f"{request.model_dir}: expected an absolute directory path on rank 0")
    if request.dest is not None and not request.dest.startswith("/"):
        raise InputError(f"--dest: expected an absolute path, got {request.dest!r}")
    started = time.monotonic()
    ranks = site.ordered_ranks()
    first = ranks[0]
    listed = run_agent(site, first, ["manifest", "--dir", request.model_dir])
    if listed.result is None or listed.result.get("status") != "ok":
        raise InputError(f"rank {first.name}: cannot list {request.model_dir}: {listed.describe_failure()}")
    entries = manifest_from_document(listed.result, f"rank {first.name} manifest of {request.model_dir}")
    manifest_text = manifest_bytes(entries).decode()
    listed_paths = {entry.path for entry in entries}
    dirs = {first.name: request.model_dir}
    dirs.update({rank.name: destination(rank, request) for rank in ranks[1:]})

    records: dict[str, dict[str, Any]] = {
        rank.name: {"schema": EVIDENCE_SCHEMA, "kind": "replicate", "rank": rank.name,
                    "dir": dirs[rank.name], "status": "pending", "error": None,
                    "files": len(entries), "files_reused": 0, "files_copied": 0, "bytes_copied": 0}
        for rank in ranks
    }
    records[first.name].update(status="verified", role="source", files_reused=len(entries))

    def check(rank: Rank) -> Any:
        return run_agent(site, rank, ["check-manifest", "--dir", dirs[rank.name]], input_text=manifest_text)

    with ThreadPoolExecutor(max_workers=len(ranks)) as pool:
        replies = dict(zip([r.name for r in ranks[1:]], pool.map(check, ranks[1:]), strict=True))
    failed: dict[str, str] = {}
    holds: dict[str, set[str]] = {}
    for rank in ranks[1:]:
        reply = replies[rank.name]
        if reply.result is None or reply.result.get("status") != "ok":
            failed[rank.name] = f"rank {rank.name} ({rank.ssh}): cannot check {dirs[rank.name]}: {reply.describe_failure()}"
            continue
        try:
            where = f"rank {rank.name} ({rank.ssh})"
            matching, extra = texts_at(reply.result, "matching", where), texts_at(reply.result, "extra", where)
        except MalformedReply as exc:
            failed[rank.name] = exc.message
            continue
        holds[rank.name] = set(matching) & listed_paths  # a path the manifest does not list is no file reused
        records[rank.name]["files_reused"] = len(holds[rank.name])
        records[rank.name]["extra"] = extra

    # One chain transfer for every file some rank lacks: one relay per hop carries them all
    # over one connection (per-file ssh sessions and agents were ~1 s per file).
    transfers = [Transfer(sha256=entry.sha256, size=entry.size,
                          paths={name: str(PurePosixPath(directory) / entry.path) for name, directory in dirs.items()})
                 for entry in entries]
    needs = {name: [k for k, entry in enumerate(entries) if entry.path not in held]
             for name, held in holds.items()}
    chain = ChainTransfer(site, transfers, SizeGate.opened(0), needs=needs, failed=dict(failed),
                          retry_seconds=request.retry_seconds, progress=progress)
    outcomes = chain.run()
    for name in needs:
        outcome = outcomes[name]
        records[name]["files_copied"] = len(outcome.files_received)
        records[name]["bytes_copied"] = outcome.bytes_received
        if outcome.status == FAILED:
            failed[name] = failed_files_message(entries, chain.state[name], outcome.error)

    for rank in ranks[1:]:
        record = records[rank.name]
        if rank.name in failed:
            record.update(status="failed", error=failed[rank.name])
            continue
        final = run_agent(site, rank, ["check-manifest", "--dir", dirs[rank.name], "--sizes-only", "--record"],
                          input_text=manifest_text)
        if final.result is None or final.result.get("status") != "ok":
            record.update(status="failed", error=f"rank {rank.name}: {final.describe_failure()}")
        else:
            record["status"] = "verified"
    ordered = [records[rank.name] for rank in ranks]
    return {
        "schema": REPORT_SCHEMA,
        "kind": "replicate",
        "model_dir": request.model_dir,
        "manifest": json.loads(manifest_text),
        "complete": all(record["status"] == "verified" for record in ordered),
        "seconds": round(time.monotonic() - started, 6),
        "ranks": ordered,
    }

