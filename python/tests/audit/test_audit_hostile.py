"""The audit and `image inspect` against hostile layouts and archives: documents that
are symlinks to devices or FIFOs (bounded, never read without end, never waited on), blobs
that are symlinks out of the layout (refused with a check), and `--expect-file
digests.json` covering index.json."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.hostile_layers import hostile_layout, rewrite_json, tar_bytes, without_end

from sparkflake import audit
from sparkflake.cli import main
from sparkflake.core.errors import InputError

SAFE = [[("usr", "dir", ""), ("usr/bin", "dir", ""), ("usr/bin/tool", "file", "")]]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkflake.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def _manifest_and_config(layout: Path) -> tuple[Path, Path, Path]:
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = blobs / index["manifests"][0]["digest"].split(":")[1]
    document = json.loads(manifest.read_text())
    return manifest, blobs / document["config"]["digest"].split(":")[1], blobs / document["layers"][0]["digest"].split(":")[1]


@pytest.mark.parametrize("document", ["index.json", "oci-layout", "manifest", "config"])
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo"])
@pytest.mark.parametrize("command", ["audit", "inspect"])
def test_document_that_is_a_device_or_fifo(tmp_path, document, device, command):
    layout = hostile_layout(tmp_path / "oci", SAFE)
    manifest, config, _ = _manifest_and_config(layout)
    path = {"index.json": layout / "index.json", "oci-layout": layout / "oci-layout",
            "manifest": manifest, "config": config}[document]
    path.unlink()
    if device == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(device)
    argv = ["audit", f"oci:{layout}"] if command == "audit" else ["image", "inspect", str(layout)]
    completed = cli(*argv)  # a hang would be the 60 s timeout; an unbounded read, a MemoryError
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr
    assert str(layout) in completed.stderr
    expected = "a FIFO" if device == "fifo" else ("outside the layout" if path.is_symlink() else "device")
    assert expected in completed.stderr, completed.stderr


def test_blob_symlink_out_of_the_layout_is_a_named_check(tmp_path):
    layout = hostile_layout(tmp_path / "oci", SAFE)
    _, _, layer = _manifest_and_config(layout)
    elsewhere = tmp_path / "elsewhere.blob"
    shutil.move(layer, elsewhere)  # the same bytes, so every digest still matches
    layer.symlink_to(elsewhere)
    report = audit.audit_image(audit.open_target(f"oci:{layout}"), audit.expectations_from())
    failing = {c.id: c for c in report.failures}
    assert set(failing) == {"layout.inside"}, report.checks
    assert str(elsewhere) in failing["layout.inside"].detail and "layer 0" in failing["layout.inside"].detail
    assert report.exit_code == 1
    with pytest.raises(InputError) as caught:  # image inspect reads through the same files
        from sparkflake.oci.reader import open_image
        from sparkflake.oci.verify import verify_image

        verify_image(open_image(layout))
    assert caught.value.check_id == "layout.inside"


def test_blob_symlink_inside_the_layout_is_read(tmp_path):
    """What the audit accepts: a symlink that stays inside the layout (to a regular file)."""
    layout = hostile_layout(tmp_path / "oci", SAFE)
    _, _, layer = _manifest_and_config(layout)
    kept = layout / "kept.blob"
    shutil.move(layer, kept)
    layer.symlink_to("../../kept.blob")
    report = audit.audit_image(audit.open_target(f"oci:{layout}"), audit.expectations_from())
    assert report.exit_code == 0, report.failures


def test_archive_that_is_a_fifo(tmp_path):
    fifo = tmp_path / "image.tar"
    os.mkfifo(fifo)
    completed = cli("audit", str(fifo))
    assert completed.returncode == 2 and "is a FIFO" in completed.stderr and "Traceback" not in completed.stderr


def test_expect_file_covers_the_index(tmp_path, capsys):
    spec_dir = tmp_path / "spec"
    (spec_dir / "tree").mkdir(parents=True)
    (spec_dir / "tree" / "hello").write_text("hi\n")
    (spec_dir / "spec.json").write_text(json.dumps({"layers": [{"tree": "tree"}]}))
    assert main(["image", "build", str(spec_dir / "spec.json"), "-o", str(tmp_path / "out"),
                 "--cache", str(tmp_path / "cache")]) == 0
    out = tmp_path / "out"
    digests = str(out / "digests.json")
    good = audit.audit_image(audit.open_target(f"oci:{out / 'oci'}"), audit.expectations_from(expect_file=digests))
    assert [c.status for c in good.checks if c.id == "expect.index"] == ["pass"]
    # an index.json that adds an annotation (manifest, config and layers untouched)
    index = json.loads((out / "oci" / "index.json").read_text())
    index["annotations"] = {"org.example.injected": "yes"}
    (out / "oci" / "index.json").write_text(json.dumps(index))
    bad = audit.audit_image(audit.open_target(f"oci:{out / 'oci'}"), audit.expectations_from(expect_file=digests))
    assert [c.id for c in bad.failures] == ["expect.index"]
    assert json.loads(Path(digests).read_text())["index"] in bad.failures[0].detail


# ---- issue 28 class 9: what Go's and the spec's readers refuse, the audit refuses ------

_VISIBLE = tar_bytes(SAFE[0])
_ESCAPE = tar_bytes([("../escape", "file", "")])
_AUDIT_CASES = {
    # a ../ entry after the end-of-archive blocks: tar --ignore-zeros extracts it
    "entry after the end": ({"tars": [_VISIBLE + _ESCAPE]}, 1,
                            "FAIL layer.entries-safe", f"data at byte {len(_VISIBLE)} of the tar stream, after its "
                            "end-of-archive blocks"),
    "entry after a lone zero block": ({"tars": [without_end(_VISIBLE) + bytes(512) + _ESCAPE]}, 1,
                                      "FAIL layer.decompress", "a header after a single zero block"),
    "schemaVersion 1": ({"manifest": rewrite_json(lambda d: d.update(schemaVersion=1))}, 2,
                        "[document.parse]", "schemaVersion: expected 2, got 1"),
    # a config the audit cannot judge is bad input (exit 2), as the manifest cases are
    "rootfs overlay": ({"config": rewrite_json(lambda d: d["rootfs"].update(type="overlay"))}, 2,
                       "ERR  document.parse", "rootfs.type: expected 'layers', got 'overlay'"),
    "duplicate key": ({"index": lambda raw: raw.replace(b'"schemaVersion": 2', b'"schemaVersion": 2, "schemaVersion": 1')},
                      2, "[document.parse]", "index.json: $.schemaVersion: the key is given twice"),
    "byte-order mark": ({"manifest": lambda raw: b"\xef\xbb\xbf" + raw}, 2, "[document.parse]",
                        "starts with a UTF-8 byte-order mark"),
    "descriptor data of other bytes": (
        {"manifest": rewrite_json(lambda d: d["config"].update(data=base64.b64encode(b"{}").decode()))}, 2,
        "[document.parse]", "config: data: holds 2 bytes, the descriptor's size is"),
}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("case", sorted(_AUDIT_CASES))
def test_what_go_and_the_spec_refuse_the_audit_refuses(tmp_path, case):
    rewrites, exit_code, check, message = _AUDIT_CASES[case]
    layout = hostile_layout(tmp_path / "oci", SAFE, **rewrites)
    before = _tree(tmp_path)
    completed = cli("audit", f"oci:{layout}")
    assert completed.returncode == exit_code, completed.stdout + completed.stderr
    output = completed.stdout + completed.stderr
    assert check in output and message in output, output
    assert "Traceback" not in output
    assert _tree(tmp_path) == before  # the audit changed nothing
