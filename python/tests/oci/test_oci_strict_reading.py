"""What Go's and the image spec's readers refuse is refused here too (issue 28 class 9):
tar data after the end-of-archive blocks, a header after a lone zero block, a bad header
checksum; an index or manifest without schemaVersion 2, a config whose rootfs is not
"layers", a descriptor whose embedded data is other bytes, non-string RepoTags."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from fixtures.hostile_layers import hostile_layout, rewrite_json, tar_bytes, without_end
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci.entry_safety import EntrySafety
from sparkflake.oci.layer_scan import TarElfScanner
from sparkflake.oci.reader import open_image
from sparkflake.oci.verify import verify_image

pytestmark = pytest.mark.oci

SAFE = [[("usr", "dir", ""), ("usr/bin", "dir", ""), ("usr/bin/tool", "file", "")]]

_names = st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8}){0,2}", fullmatch=True)
_entries = st.lists(st.tuples(_names, st.just("file"), st.just("")), min_size=1, max_size=5, unique_by=lambda e: e[0])
_hidden = st.lists(st.tuples(st.sampled_from(["../escape", "/etc/cron.d/job", "usr/bin/tool"]), st.just("file"),
                             st.just("")), min_size=1, max_size=2, unique_by=lambda e: e[0])


def _scan(stream: bytes, cuts: list[int]) -> TarElfScanner:
    """The scanner fed ``stream`` in pieces cut at ``cuts`` (chunk boundaries anywhere)."""
    scanner = TarElfScanner(safety=EntrySafety())
    start = 0
    for cut in sorted({min(cut, len(stream)) for cut in cuts}) + [len(stream)]:
        scanner.feed(stream[start:cut])
        start = cut
    return scanner


_cuts = st.lists(st.integers(0, 1 << 15), max_size=6)


@given(_entries, st.integers(0, 20), _cuts)
def test_a_tar_with_any_zero_padding_after_its_end_reads_clean(entries, padding_blocks, cuts) -> None:
    scanner = _scan(tar_bytes(entries) + bytes(512 * padding_blocks), cuts)
    assert scanner.error is None and scanner.unsafe is None


@given(_entries, _hidden, _cuts)
def test_data_after_the_end_of_archive_is_refused_at_its_offset(entries, hidden, cuts) -> None:
    visible = tar_bytes(entries)
    scanner = _scan(visible + tar_bytes(hidden), cuts)
    assert scanner.unsafe is not None and "after its end-of-archive blocks" in scanner.unsafe
    assert scanner.unsafe.startswith(f"data at byte {len(visible)} of the tar stream")


@given(_entries, _hidden, _cuts)
def test_a_header_after_a_lone_zero_block_is_refused(entries, hidden, cuts) -> None:
    stream = without_end(tar_bytes(entries)) + bytes(512) + tar_bytes(hidden)
    scanner = _scan(stream, cuts)
    assert scanner.error is not None and "a header after a single zero block" in scanner.error


def test_one_zero_block_at_the_very_end_is_an_end_as_go_reads_it() -> None:
    scanner = _scan(without_end(tar_bytes(SAFE[0])) + bytes(512), [])
    assert scanner.error is None and scanner.unsafe is None


@given(_entries, st.integers(0, 99), st.integers(1, 255))
def test_a_header_whose_checksum_does_not_add_up_is_refused(entries, at, delta) -> None:
    stream = bytearray(tar_bytes(entries))
    stream[at] = (stream[at] + delta) % 256  # a byte of the first header's name, checksum kept
    scanner = _scan(bytes(stream), [])
    assert scanner.error is not None and "header checksum" in scanner.error


_DOCUMENT_CASES = {
    "manifest schemaVersion 1": ({"manifest": rewrite_json(lambda d: d.update(schemaVersion=1))},
                                 "schemaVersion: expected 2, got 1"),
    "index without schemaVersion": ({"index": rewrite_json(lambda d: d.pop("schemaVersion"))},
                                    "index.json: schemaVersion: missing (the image spec requires 2)"),
    "schemaVersion true": ({"manifest": rewrite_json(lambda d: d.update(schemaVersion=True))},
                           "schemaVersion: expected 2, got True"),
    "rootfs overlay": ({"config": rewrite_json(lambda d: d["rootfs"].update(type="overlay"))},
                       "rootfs.type: expected 'layers', got 'overlay'"),
    "config data of other bytes": (
        {"manifest": rewrite_json(lambda d: d["config"].update(data=base64.b64encode(b"x" * d["config"]["size"]).decode()))},
        ": config: data: hashes to sha256:"),
    "layer data not base64": ({"manifest": rewrite_json(lambda d: d["layers"][0].update(data="not base64!"))},
                              ": layers[0]: data: not base64"),
    "duplicate key": ({"manifest": lambda raw: raw.replace(b'"layers": [', b'"layers": [], "layers": [', 1)},
                      "$.layers: the key is given twice in one object"),
    "byte-order mark": ({"index": lambda raw: b"\xef\xbb\xbf" + raw}, "index.json: starts with a UTF-8 byte-order mark"),
    # a Go reader refuses these types (a bare dict()/set lookup of them was a traceback in
    # verify_image, audit, load and receipt verify: a second hunt over hostile documents)
    "manifest mediaType a list": ({"manifest": rewrite_json(lambda d: d.update(mediaType=[]))},
                                  "mediaType: expected a string, got []"),
    "manifest annotations a number": ({"manifest": rewrite_json(lambda d: d.update(annotations=1))},
                                      "annotations: expected an object of strings, got int"),
    "manifest annotation not a string": ({"manifest": rewrite_json(lambda d: d.update(annotations={"a": 1}))},
                                         "annotations.a: expected a string, got 1"),
    "index annotations a list": ({"index": rewrite_json(lambda d: d.update(annotations=[1]))},
                                 "index.json: annotations: expected an object of strings, got list"),
    "config config a string": ({"config": rewrite_json(lambda d: d.update(config="x"))},
                               "config: expected an object, got str"),
    "config Labels a list": ({"config": rewrite_json(lambda d: d.update(config={"Labels": [1]}))},
                             "config.Labels: expected an object of strings, got list"),
    "config label not a string": ({"config": rewrite_json(lambda d: d.update(config={"Labels": {"l": True}}))},
                                  "config.Labels.l: expected a string, got True"),
    # the runtime check's config_env iterated these (finding H3, /work/notes/hypothesis-findings-3.md)
    "config Env a number": ({"config": rewrite_json(lambda d: d.update(config={"Env": 5}))},
                            "config.Env: expected an array of strings, got int"),
    "config Env a string": ({"config": rewrite_json(lambda d: d.update(config={"Env": "A=1"}))},
                            "config.Env: expected an array of strings, got str"),
    "config Env entry not a string": ({"config": rewrite_json(lambda d: d.update(config={"Env": ["A=1", 1.5]}))},
                                      "config.Env[1]: expected a string, got 1.5"),
}


def test_null_annotations_and_labels_are_go_s_nil_and_read(tmp_path: Path) -> None:
    layout = hostile_layout(tmp_path / "oci", SAFE, manifest=rewrite_json(lambda d: d.update(annotations=None)),
                            config=rewrite_json(lambda d: d.update(config={"Labels": None})))
    report = verify_image(open_image(layout))
    assert report.annotations == {} and report.labels == {}


@pytest.mark.parametrize("case", sorted(_DOCUMENT_CASES))
def test_documents_the_spec_refuses_are_refused_by_the_reader(tmp_path: Path, case: str) -> None:
    rewrites, message = _DOCUMENT_CASES[case]
    layout = hostile_layout(tmp_path / "oci", SAFE, **rewrites)
    with pytest.raises(InputError) as caught:
        verify_image(open_image(layout))
    assert caught.value.check_id == "document.parse"
    assert str(layout) in str(caught.value) and message in str(caught.value), str(caught.value)


def test_descriptor_data_that_is_the_content_is_read(tmp_path: Path) -> None:
    """The spec allows embedded data; what it must be, it is here."""
    def embed(raw: bytes) -> bytes:
        manifest = json.loads(raw)
        config = (tmp_path / "oci" / "blobs" / "sha256" / manifest["config"]["digest"][7:]).read_bytes()
        manifest["config"]["data"] = base64.b64encode(config).decode()
        return json.dumps(manifest).encode()

    layout = hostile_layout(tmp_path / "oci", SAFE, manifest=embed)
    assert verify_image(open_image(layout)).layers[0].diff_id.startswith("sha256:")


def _docker_archive(path: Path, repo_tags: object) -> Path:
    """A docker-archive whose last member is the config (no trailing NULs: without_end
    can cut the end off)."""
    layer = tar_bytes(SAFE[0])
    layer_name = hashlib.sha256(layer).hexdigest() + ".tar"
    config = json.dumps({"architecture": "arm64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_name[:-4]]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": repo_tags, "Layers": [layer_name]}]).encode()
    with tarfile.open(path, "w") as archive:
        for name, content in (("manifest.json", manifest), (layer_name, layer), (config_name, config)):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


def test_repo_tags_that_are_not_strings_are_refused(tmp_path: Path) -> None:
    assert open_image(_docker_archive(tmp_path / "good.tar", ["spark/glm53:r8"])).repo_tags == ["spark/glm53:r8"]
    assert open_image(_docker_archive(tmp_path / "none.tar", None)).repo_tags == []
    for tags, message in (([["nested"]], "RepoTags[0]: expected a string, got ['nested']"),
                          (["ok", 7], "RepoTags[1]: expected a string, got 7"),
                          ("spark/glm53:r8", "RepoTags: expected a list of strings")):
        with pytest.raises(InputError) as caught:
            open_image(_docker_archive(tmp_path / "bad.tar", tags))
        assert caught.value.check_id == "document.parse" and message in str(caught.value)


def test_an_archive_with_members_after_its_end_or_twice_is_refused(tmp_path: Path) -> None:
    archive = _docker_archive(tmp_path / "image.tar", ["spark/glm53:r8"])
    stream = archive.read_bytes()
    hidden = tar_bytes([("manifest.json", "file", "")])
    for name, content, message in (
        ("after-the-end.tar", stream + hidden, f"data at byte {len(stream)}, after the archive's end-of-archive block"),
        ("after-one-zero-block.tar", without_end(stream) + bytes(512) + hidden, "after the archive's end-of-archive"),
        ("twice.tar", without_end(stream) + hidden, "member manifest.json appears twice"),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError) as caught:
            open_image(tmp_path / name)
        assert caught.value.check_id == "image.readable" and message in str(caught.value), str(caught.value)
    padded = tmp_path / "padded.tar"
    padded.write_bytes(stream + bytes(4096))
    assert open_image(padded).repo_tags == ["spark/glm53:r8"]
