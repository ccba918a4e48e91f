"""`receipt verify` finds the files its manifests name in the merged image filesystem from
the one pass that verifies each layer (``oci.verify.verify_image`` recording every tar
member): each layer is read once (it was read three times: verify_image, then a pass for
the manifests, then a pass for the files they list), a blob other than the manifest names
is refused by that pass, and the merge of the recorded members
(``audit.receipt.merged_files``) is the merge the receipt check made over ``tarfile``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import tarfile
from pathlib import Path

import pytest
from fixtures.receipts import image_with_receipt
from hypothesis import example, given
from hypothesis import strategies as st

from sparkflake import oci
from sparkflake.audit.receipt import ReceiptCheckFailed, merged_files, verify_receipt
from sparkflake.core.errors import CheckFailed
from sparkflake.oci.compression import Compression
from sparkflake.oci.layer_scan import TarElfScanner
from sparkflake.oci.layer_stream import LayerStream
from sparkflake.oci.reader import open_image

pytestmark = pytest.mark.audit

FILE_SIZE = 4 << 20  # incompressible: a layer blob is about its files' size
PREFIX = "opt/app"


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _stacked_image(root: Path, compression: Compression | None = None, *,
                   claim_removed: bool = False) -> tuple[Path, Path]:
    """Three layers: a native library and two Python files; a file added, one deleted
    (whiteout) and a directory made opaque; the manifests naming what is left (or, with
    ``claim_removed``, the removed files at their first contents), and one more file. The
    image's layout and a receipt right about everything but the labels and the in-image
    receipt (a test image has neither)."""
    native, big, new = os.urandom(FILE_SIZE), os.urandom(FILE_SIZE), os.urandom(FILE_SIZE)
    files = {
        0: {"lib/native.so": native, "old.py": b"old\n", "plugins/x.py": b"x\n"},
        1: {"big.bin": big, "plugins/y.py": b"y\n"},
    }
    retained = json.dumps({"files": [{"path": "lib/native.so", "sha256": sha(native), "size": FILE_SIZE}]}).encode()
    overlay = json.dumps({"install_prefix": f"/{PREFIX}", "entries": [
        {"path": "new.py", "target_sha256": sha(new)},
        {"path": "old.py", "target_sha256": sha(b"old\n") if claim_removed else ""},
        {"path": "plugins/x.py", "target_sha256": sha(b"x\n") if claim_removed else ""}, {"path": "plugins/y.py", "target_sha256": sha(b"y\n")},
        {"path": "big.bin", "target_sha256": sha(big)}]}).encode()
    for layer, contents in files.items():
        for name, content in contents.items():
            path = root / f"tree{layer}" / PREFIX / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    layers = (
        oci.LayerInput(sources=(oci.TreeSource(str(root / "tree0")),)),
        oci.LayerInput(sources=(oci.TreeSource(str(root / "tree1")),), deletions=(f"/{PREFIX}/old.py",),
                       opaque_dirs=(f"/{PREFIX}/plugins",)),
        oci.LayerInput(files=(oci.GeneratedFile(f"/{PREFIX}/new.py", new),)),
    )
    return image_with_receipt(root, layers, retained, overlay, image_name="localhost/stacked:1", compression=compression)


def _link_statuses(layout: Path, receipt_path: Path) -> dict[str, str]:
    with pytest.raises(ReceiptCheckFailed) as refused:
        verify_receipt(receipt_path, layout)
    return {link.link: link.status for link in refused.value.report.links}


EXPECTED = {"subject": "passed", "config": "passed", "layers": "passed", "labels": "failed", "embedded": "failed",
            "retained-native": "passed", "overlay": "passed"}


def _bytes_read() -> int:
    """This process's bytes read so far (read(2) and kin, every thread)."""
    with open("/proc/self/io") as report:
        return int(dict(line.split(": ") for line in report.read().splitlines())["rchar"])


def test_each_layer_is_read_once(tmp_path, monkeypatch) -> None:
    layout, receipt_path = _stacked_image(tmp_path)
    blob_bytes = sum(layout.joinpath(ref.name).stat().st_size for ref in open_image(layout).layer_refs)
    streams: list[object] = []
    enter = LayerStream.__enter__

    def counted(stream: LayerStream) -> LayerStream:
        streams.append(stream)
        return enter(stream)

    monkeypatch.setattr(LayerStream, "__enter__", counted)
    before = _bytes_read()
    statuses = _link_statuses(layout, receipt_path)
    read = _bytes_read() - before
    assert statuses == EXPECTED, statuses
    assert len(streams) == 3, f"{len(streams)} layer passes for 3 layers"
    assert read < 1.5 * blob_bytes, f"read {read / blob_bytes:.2f}x the layer blobs"


def test_files_a_whiteout_or_an_opaque_directory_removed_fail_the_overlay_link(tmp_path) -> None:
    layout, receipt_path = _stacked_image(tmp_path, claim_removed=True)
    with pytest.raises(ReceiptCheckFailed) as refused:
        verify_receipt(receipt_path, layout)
    links = {link.link: link for link in refused.value.report.links}
    assert links["retained-native"].status == "passed"
    old, x = sha(b"old\n"), sha(b"x\n")
    assert links["overlay"].detail == f"old.py: image absent, manifest {old}; plugins/x.py: image absent, manifest {x}"


def test_a_whiteout_at_the_root_removes_what_is_below_it(tmp_path) -> None:
    """``/.wh.opt`` deletes /opt: its files are absent from the merged filesystem (the
    receipt check named members ``member.name.lstrip("./")``, which made the marker
    ``wh.opt``, no whiteout, and found the deleted file)."""
    (tmp_path / "tree" / PREFIX).mkdir(parents=True)
    (tmp_path / "tree" / PREFIX / "gone.py").write_bytes(b"gone\n")
    layers = (oci.LayerInput(sources=(oci.TreeSource(str(tmp_path / "tree")),)), oci.LayerInput(deletions=("/opt",)))
    retained = json.dumps({"files": []}).encode()
    overlay = json.dumps({"install_prefix": f"/{PREFIX}", "entries": [{"path": "gone.py", "target_sha256": ""}]}).encode()
    layout, receipt_path = image_with_receipt(tmp_path, layers, retained, overlay, image_name="localhost/stacked:1")
    assert _link_statuses(layout, receipt_path) == EXPECTED


@pytest.mark.parametrize("change", ["cut", "other"])
def test_a_layer_blob_cut_short_or_replaced_is_refused_before_any_link(tmp_path, change):
    """The files are found in the pass that verifies the layer: a blob that is not the one
    the manifest names never reaches the merge (before, the merge's own passes had to
    re-check each blob they read)."""
    layout, receipt_path = _stacked_image(tmp_path / "a", Compression("zstd"))
    blob = layout / open_image(layout).layer_refs[0].name
    if change == "cut":
        blob.write_bytes(blob.read_bytes()[:-3])  # the end of the last zstd frame
    else:
        other, _ = _stacked_image(tmp_path / "b", Compression("zstd"))
        blob.write_bytes((other / open_image(other).layer_refs[0].name).read_bytes())
    with pytest.raises(CheckFailed) as refused:
        verify_receipt(receipt_path, layout)
    assert refused.value.check_id in ("oci.blob-size", "oci.blob-digest"), refused.value
    assert not isinstance(refused.value, ReceiptCheckFailed)


# --- the merge over recorded members against the merge the receipt check made over tarfile

_paths = st.lists(st.sampled_from(["a", "b", ".c"]), min_size=1, max_size=3).map("/".join)
_entries = st.lists(st.tuples(st.sampled_from(["file", "dir", "symlink", "whiteout", "opaque"]),
                              st.sampled_from(["", "./"]), _paths, st.binary(max_size=3)), max_size=8)


def _layer(entries: list[tuple[str, str, str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for kind, prefix, path, content in entries:
            parent, base = posixpath.split(path)
            name = {"whiteout": posixpath.join(parent, f".wh.{base}"),
                    "opaque": posixpath.join(path, ".wh..wh..opq")}.get(kind, path)
            info = tarfile.TarInfo(prefix + name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "a"
            else:
                info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if info.isfile() else None)
    return buffer.getvalue()


def _merged_by_tarfile(layers: list[bytes], wanted: set[str]) -> dict[str, tuple[str, int]]:
    """The receipt check's merge as it was, over ``tarfile`` (its name was
    ``member.name.lstrip("./")``, which also took the dot of a top-level ``.wh.NAME``: a
    whiteout or opaque marker at the root was missed; here the name is normalized), with
    an opaque marker keeping what its own layer unpacked before it, as moby's and
    containers/storage's UnpackLayer do (``unpackedPaths``)."""
    state: dict[str, tuple[str, int]] = {}
    for layer in layers:
        unpacked: set[str] = set()
        with tarfile.open(fileobj=io.BytesIO(layer), mode="r|") as archive:
            for member in archive:
                name = posixpath.normpath(member.name.lstrip("/") or ".")
                base, parent = posixpath.basename(name), posixpath.dirname(name)
                if not base.startswith(".wh."):
                    unpacked.add(name)
                if base == ".wh..wh..opq":
                    prefix = f"{parent}/" if parent else ""
                    state = {p: v for p, v in state.items() if not p.startswith(prefix) or p in unpacked}
                elif base.startswith(".wh."):
                    removed = posixpath.join(parent, base[len(".wh."):])
                    state = {p: v for p, v in state.items() if p != removed and not p.startswith(removed + "/")}
                elif name in wanted and not member.isfile():
                    state.pop(name, None)
                elif name in wanted:
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    state[name] = (sha(extracted.read()), member.size)
    return state


@given(st.lists(_entries, min_size=1, max_size=4))
@example([[("file", "", "a/b", b"1"), ("file", "./", ".c", b"2")], [("whiteout", "./", "a", b"")]])
@example([[("file", "", "a/b", b"1")], [("opaque", "", ".", b"")]]).via("an opaque root: the old name lost the dot")
@example([[("file", "", "a/b", b"1"), ("opaque", "", "a", b"")]]).via("a marker after a file of its own layer")
def test_the_merge_of_recorded_members_is_the_merge_over_tarfile(stack) -> None:
    layers = [_layer(entries) for entries in stack]
    recorded = []
    for layer in layers:
        scanner = TarElfScanner(record_members=True)
        scanner.feed(layer)
        recorded.append(scanner.recorded)
    wanted = {posixpath.normpath(path) for entries in stack for _, _, path, _ in entries}
    assert merged_files(recorded, wanted) == _merged_by_tarfile(layers, wanted)
