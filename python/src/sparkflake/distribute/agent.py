"""The per-rank program the controller starts over SSH: ``python -m sparkflake.distribute.agent``.

Its stdout is a machine protocol (one JSON object per line), not output for people: the
controller reads the last line as the result. Exit 0 when the step succeeded, 1 when a check
failed, 2 for bad input, 3 when a relay lost its controller.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

from ..core.directory_lock import updating_file
from ..core.documents import parse_json
from ..core.errors import InputError, SparkflakeError
from . import engine, files, manifest, receive, relay
from .agent_protocol import emit as _emit
from .agent_protocol import end_with_the_session, run_protocol
from .verified_prefixes import VerifiedPrefixStore


def _status(args: argparse.Namespace) -> int:
    state = files.inspect_copy(Path(args.path), args.sha256, args.size)
    report = state.as_record()
    parent = Path(args.path).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    report["free_bytes"] = files.free_bytes(parent)
    _emit(report)
    return 0


def _receive(args: argparse.Namespace) -> int:
    """Receive the files of one hop's plan, in order, over this one connection; stop at the
    first file whose stream broke or that cannot be written (the relay resumes it)."""
    planned = relay.read_plan_line(sys.stdin.fileno())
    if planned is None:  # the hop was cancelled before the go: nothing on this rank changes
        _emit({"status": relay.CANCELLED})
        return 3
    failed = False
    for item in planned:
        result = receive.receive(Path(item.path), item.size, item.sha256, sys.stdin.buffer, _emit)
        _emit(result)
        failed = failed or result["status"] != receive.OK
        if result["status"] not in (receive.OK, receive.MISMATCH):
            break
    return 1 if failed else 0


def _relay(args: argparse.Namespace) -> int:
    try:
        downstream = _argv_argument(args.downstream_json, "--downstream-json")
    except InputError as exc:
        _emit({"status": "failed", "message": str(exc)})
        return 2
    go = _watch_controller()
    result = relay.relay(go.wait_for_plan, downstream,
                         progress=lambda index, position: _emit({"progress": position, "file": index}),
                         on_result=lambda index, outcome: _emit({"file": index, "result": outcome}))
    _emit(result)
    return 0 if result["status"] == relay.DONE else 1


class _Go:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.planned: list[relay.PlannedFile] | None = None

    def wait_for_plan(self) -> list[relay.PlannedFile] | None:
        self.event.wait()
        return self.planned


def _watch_controller() -> _Go:
    """The controller sends the plan line on our stdin once the source verified, and keeps
    stdin open; end of stdin means it is gone or gave up on this hop, so forwarding stops
    and the downstream ssh dies with us (its stdin closes)."""
    go = _Go()

    def watch() -> None:
        # the raw fd, not sys.stdin: a daemon thread blocked inside the buffered reader holds
        # its lock, and interpreter shutdown would wait a second for it, then abort
        go.planned = relay.read_plan_line(0)
        go.event.set()
        if go.planned is None:
            return  # cancelled: relay() ends the downstream connection and returns
        while os.read(0, 65536):
            pass
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()
    return go


def _argv_argument(text: str, option: str) -> list[str]:
    """An argv list the controller passed as JSON (``--engine-args-json``, ``--downstream-json``)."""
    try:
        value = parse_json(text, option)
    except InputError as exc:
        raise InputError(f"{exc.message}; expected a JSON array of strings") from None
    if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
        raise InputError(f"{option}: expected a JSON array of strings")
    return value


def _import(args: argparse.Namespace) -> int:
    engine_args = _argv_argument(args.engine_args_json, "--engine-args-json")
    result = engine.import_archive(args.engine, engine_args, args.archive, args.image_id, args.tag)
    _emit({"status": "ok", "engine": result.engine, "loaded": list(result.loaded),
           "image_id": result.image_id, "tag": result.tag})
    return 0


def _image_status(args: argparse.Namespace) -> int:
    engine_args = _argv_argument(args.engine_args_json, "--engine-args-json")
    found = engine.image_id_of(args.engine, engine_args, args.image_id)
    _emit({"status": "ok", "present": found == args.image_id, "image_id": found})
    return 0


def _download(args: argparse.Namespace) -> int:
    from . import download  # urllib and http.client only where a rank downloads

    request = _read_stdin_json("the download request")
    url = request.get("url") if isinstance(request, dict) else None
    if not isinstance(url, str):
        raise InputError('the download request (stdin): expected {"url": "http(s)://..."}')
    result = download.download(url, Path(args.path), args.sha256)
    _emit(result)
    return 0 if result["status"] == receive.OK else 1


def _manifest(args: argparse.Namespace) -> int:
    entries = manifest.build_manifest(Path(args.dir))
    _emit({"status": "ok", "files": [entry.as_record() for entry in entries]})
    return 0


def _pull(args: argparse.Namespace) -> int:
    from ..oci import remote
    from ..oci.registry_auth import load_credentials
    from ..oci.registry_transfer import pull_to_layout
    from ..oci.types import Platform

    source = remote.parse_reference(args.reference)
    credentials = load_credentials(args.auth_file) if args.auth_file else None
    client = remote.RegistryClient(source.registry, insecure=args.insecure, ca_file=args.ca_file,
                                   credentials=credentials)
    result = pull_to_layout(client, source, Path(args.layout), Platform.parse_any(args.platform))
    _emit({"status": "ok", **result.as_record()})
    return 0


def _check_manifest(args: argparse.Namespace) -> int:
    entries = manifest.manifest_from_document(_read_stdin_json("manifest"), "manifest (stdin)")
    report = manifest.compare_directory(Path(args.dir), entries, sizes_only=args.sizes_only)
    if args.record:
        if report["missing"] or report["mismatch"]:
            _emit({"status": "failed", **report,
                   "message": f"{args.dir}: {len(report['missing'])} files missing, "
                              f"{len(report['mismatch'])} differ; manifest not recorded"})
            return 1
        manifest.record_manifest(Path(args.dir), entries)
    _emit({"status": "ok", **report})
    return 0


def _read_stdin_json(what: str) -> Any:
    raw = sys.stdin.buffer.read(relay.PLAN_LIMIT + 1)
    if len(raw) > relay.PLAN_LIMIT:
        raise InputError(f"{what} (stdin): more than {relay.PLAN_LIMIT} bytes")
    return parse_json(raw, f"{what} (stdin)")


def _layout_plan(args: argparse.Namespace) -> int:
    """The source layout's plan; with --check-entries, then (the plan on its way to the
    controller, which sets the transfer up) every layer entry of it checked as an import
    checks them (the runs this rank checked before are not read again), and the records of
    the image's runs, which the other ranks' imports take instead of reading those layers."""
    from . import store  # the OCI reader only where a layout is read, not on every relay hop

    layout = store.find_layout(Path(args.layout))
    _emit({"status": "ok", "layout": str(layout), **store.read_layout(layout).as_record()})
    if args.check_entries:
        verified = VerifiedPrefixStore(Path(args.check_entries))
        layers_checked, keys = engine.check_layout(str(layout), verified)
        _emit({"status": "ok", "layers_checked": layers_checked, "verified_prefixes": verified.records_of(keys)})
    return 0


def _blob_status(args: argparse.Namespace) -> int:
    from . import store

    if args.recorded:
        _emit({"status": "ok", "held": store.recorded_blobs(Path(args.store)), "present_wrong": []})
        return 0
    blobs = store.parse_blobs(_read_stdin_json("blob list"), "blob list (stdin)")
    report = store.blob_status(Path(args.store), blobs, rehash=args.rehash, remember=not args.no_record)
    _emit({"status": "ok", **report})
    return 0


def _commit_layout(args: argparse.Namespace) -> int:
    """Manifest and index.json once every blob is in; then, with --engine, the import (one
    connection per rank for both: this is on the critical path of a delta)."""
    from . import store

    if args.report_held:  # what the store holds, before the controller knows what to send
        _emit({"status": "ok", "held": store.recorded_blobs(Path(args.store)), "present_wrong": []})
    document = _read_stdin_json("commit")
    if not isinstance(document, dict) or not isinstance(document.get("received"), dict):
        raise InputError("commit (stdin): expected an object with plan and received")
    plan = store.plan_from_document(document.get("plan"), "commit (stdin): plan")
    received = {str(digest): identity for digest, identity in document["received"].items()
                if isinstance(identity, list) and all(type(n) is int for n in identity)}  # a stat identity
    # the store's index.json names one image, the one the import then copies: a second
    # fan-out of another image to this rank waits until this one has imported its own (it
    # replaced index.json in between, and each imported the other's image: refused by the
    # image-ID check, both failed). A store not made yet holds no blob to commit: its
    # refusal names the missing blob (the lock beside index.json could not be made there)
    root = Path(args.store)
    with updating_file(root / "index.json") if root.is_dir() else contextlib.nullcontext():
        committed = store.commit(root, plan, received)
        if args.engine:
            verified = _verified_prefixes(args)
            try:
                if verified is not None and document.get("verified_prefixes") is not None:  # rank 0's check of the source
                    verified.admit(document["verified_prefixes"], "commit (stdin): verified_prefixes", len(plan.layers))
                committed["import"] = _import_report(engine.import_layout(
                    args.engine, _argv_argument(args.engine_args_json, "--engine-args-json"), args.store,
                    plan.config.digest, args.tag, verified=verified))
            except SparkflakeError as exc:  # committed all the same: say both
                committed.update(status="failed", message=str(exc),
                                 **{"import": {"status": "failed", "message": str(exc)}})
                _emit(committed)
                return exc.exit_code
    _emit(committed)
    return 0


def _import_report(result: engine.ImportResult) -> dict[str, Any]:
    return {"status": "ok", "engine": result.engine, "image_id": result.image_id, "tag": result.tag,
            "reused_layers": list(result.reused_layers), "layers_checked": result.layers_checked}




def _import_layout(args: argparse.Namespace) -> int:
    engine_args = _argv_argument(args.engine_args_json, "--engine-args-json")
    _emit(_import_report(engine.import_layout(args.engine, engine_args, args.layout, args.image_id, args.tag,
                                              verified=_verified_prefixes(args))))
    return 0


def _verified_prefixes(args: argparse.Namespace) -> VerifiedPrefixStore | None:
    return VerifiedPrefixStore(Path(args.verified_prefixes)) if args.verified_prefixes else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkflake.distribute.agent")
    commands = parser.add_subparsers(dest="command", required=True)
    # what names an image in a rank's engine: the commands that import or look one up share it
    engine_image = argparse.ArgumentParser(add_help=False)
    engine_image.add_argument("--engine", required=True)
    engine_image.add_argument("--image-id", required=True)
    engine_image.add_argument("--engine-args-json", default="[]")

    status = commands.add_parser("status")
    status.add_argument("--path", required=True)
    status.add_argument("--sha256", required=True)
    status.add_argument("--size", type=int)
    status.set_defaults(handler=_status)

    receiving = commands.add_parser("receive")  # the plan comes on stdin (relay.plan_line)
    receiving.set_defaults(handler=_receive)

    relaying = commands.add_parser("relay")  # the plan comes on stdin once the source verified
    relaying.add_argument("--downstream-json", required=True)
    relaying.set_defaults(handler=_relay)

    importing = commands.add_parser("import", parents=[engine_image])
    importing.add_argument("--archive", required=True)
    importing.add_argument("--tag")
    importing.set_defaults(handler=_import)

    image_status = commands.add_parser("image-status", parents=[engine_image])
    image_status.set_defaults(handler=_image_status)

    # the URL comes on stdin ({"url": ...}), never on argv: a presigned URL's signature
    downloading = commands.add_parser("download")
    downloading.add_argument("--path", required=True)
    downloading.add_argument("--sha256", required=True)
    downloading.set_defaults(handler=_download)

    pulling = commands.add_parser("pull")
    pulling.add_argument("--reference", required=True)
    pulling.add_argument("--layout", required=True)
    pulling.add_argument("--platform", required=True)
    pulling.add_argument("--insecure", action="store_true")
    pulling.add_argument("--ca-file")
    pulling.add_argument("--auth-file")
    pulling.set_defaults(handler=_pull)

    checking = commands.add_parser("check-manifest")
    checking.add_argument("--dir", required=True)
    checking.add_argument("--sizes-only", action="store_true")
    checking.add_argument("--record", action="store_true")
    checking.set_defaults(handler=_check_manifest)

    planning = commands.add_parser("layout-plan")
    planning.add_argument("--layout", required=True)
    planning.add_argument("--check-entries", metavar="VERIFIED_PREFIXES",
                          help="then check every layer entry, with the runs this rank has checked (verified_prefixes)")
    planning.set_defaults(handler=_layout_plan)

    blob_status = commands.add_parser("blob-status")  # the blob descriptors come on stdin
    blob_status.add_argument("--store", required=True)
    blob_status.add_argument("--recorded", action="store_true",
                             help="no blob list: every recorded blob still unchanged (stat only)")
    blob_status.add_argument("--rehash", action="store_true", help="ignore the record, hash every blob")
    blob_status.add_argument("--no-record", action="store_true",
                             help="write nothing (a source layout, or --verify)")
    blob_status.set_defaults(handler=_blob_status)

    committing = commands.add_parser("commit-layout")  # the plan and received identities on stdin
    committing.add_argument("--store", required=True)
    committing.add_argument("--report-held", action="store_true",
                            help="first write the recorded blobs (as blob-status --recorded), then wait")
    committing.add_argument("--engine", help="then import into this engine (the plan's config digest is the ID)")
    committing.add_argument("--tag")
    committing.add_argument("--engine-args-json", default="[]")
    committing.add_argument("--verified-prefixes", help="the layer runs this rank has checked (verified_prefixes)")
    committing.set_defaults(handler=_commit_layout)

    layout_import = commands.add_parser("import-layout", parents=[engine_image])
    layout_import.add_argument("--layout", required=True)
    layout_import.add_argument("--tag", required=True)
    layout_import.add_argument("--verified-prefixes", help="the layer runs this rank has checked (verified_prefixes)")
    layout_import.set_defaults(handler=_import_layout)

    listing = commands.add_parser("manifest")
    listing.add_argument("--dir", required=True)
    listing.set_defaults(handler=_manifest)
    return parser


if __name__ == "__main__":
    end_with_the_session()
    sys.exit(run_protocol(build_parser()))
