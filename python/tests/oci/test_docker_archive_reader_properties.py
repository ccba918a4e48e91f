"""The docker-archive reader (``oci.reader.open_image`` on a tar with ``manifest.json`` and
no ``oci-layout``, i.e. ``_open_docker_archive`` over ``TarFiles``): an archive written by
``tarfile`` in any member order, with files or (as legacy ``docker save`` writes shared
layers) symlinks and hard links, reads back as its manifest.json entry says: config bytes
exactly, each layer's size, digest (from a ``<hex>.tar``/``<hex>.json`` name) and bytes;
and a damaged one (a manifest.json of another shape, a missing or twice-present member,
a truncated archive, data after the end) is refused with ``InputError`` naming the archive,
never a traceback."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci.reader import open_image

pytestmark = pytest.mark.oci


def _hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(members: list[tuple[str, str, bytes | str]]) -> bytes:
    """(name, "file" | "symlink" | "hardlink", content or link target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = str(payload)
                tar.addfile(info)
    return buffer.getvalue()


_layers = st.lists(st.binary(max_size=300), max_size=4)
_tags = st.none() | st.lists(st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?:[a-z0-9.]{1,6}", fullmatch=True), max_size=2)


@st.composite
def _archives(draw):
    """A docker-archive's members (in a drawn order) and what its manifest.json says."""
    config = json.dumps({"architecture": "arm64", "os": "linux", "n": draw(st.integers())}).encode()
    layers = draw(_layers)
    legacy = draw(st.booleans())  # docker save before 25: <id>/layer.tar, shared ones linked
    config_name = f"{_hex(config)}.json"
    members: list[tuple[str, str, bytes | str]] = [(config_name, "file", config)]
    layer_names = []
    stored: dict[bytes, str] = {}
    for layer in layers:
        if legacy:
            name = f"{_hex(layer + bytes([len(layer_names)]))}/layer.tar"
            if layer in stored and draw(st.booleans()):
                link = draw(st.sampled_from(["symlink", "hardlink"]))
                target = f"../{stored[layer]}" if link == "symlink" else stored[layer]
                members.append((name, link, target))
            else:
                members.append((name, "file", layer))
                stored.setdefault(layer, name)
        else:
            name = f"{_hex(layer)}.tar"
            if layer not in stored:
                members.append((name, "file", layer))
                stored[layer] = name
        layer_names.append(name)
    entry: dict[str, object] = {"Config": config_name, "Layers": layer_names}
    tags = draw(_tags)
    if tags is not None:
        entry["RepoTags"] = tags
    manifest = json.dumps([entry]).encode()
    order = draw(st.permutations(range(len(members) + 1)))
    everything = [*members, ("manifest.json", "file", manifest)]
    # a hard link must follow what it links to (tarfile reads it back that way)
    ordered = [everything[i] for i in order]
    ordered.sort(key=lambda member: member[1] == "hardlink")
    return ordered, config, layers, layer_names, tags or [], legacy


@settings(max_examples=40)
@given(_archives(), st.sampled_from(["", "./"]))
def test_a_docker_archive_reads_back_as_written(tmp_path_factory, archive, prefix) -> None:
    members, config, layers, layer_names, tags, legacy = archive
    path = tmp_path_factory.mktemp("da") / "image.tar"
    path.write_bytes(_tar([(prefix + name, kind, payload) for name, kind, payload in members]))

    reader = open_image(path)
    assert reader.format == "docker-archive" and reader.config_bytes == config
    assert reader.config_ref.digest == f"sha256:{_hex(config)}" and reader.config_ref.size == len(config)
    assert reader.repo_tags == tags and reader.manifest_bytes is None
    assert [ref.name for ref in reader.layer_refs] == layer_names
    assert [ref.size for ref in reader.layer_refs] == [len(layer) for layer in layers]
    # a <hex>.tar name gives the digest to check; docker save's <id>/layer.tar gives none
    assert [ref.digest for ref in reader.layer_refs] == [None if legacy else f"sha256:{_hex(layer)}" for layer in layers]
    for ref, layer in zip(reader.layer_refs, layers, strict=True):
        with reader.open_blob(ref) as blob:
            assert blob.read() == layer


def _valid(config: bytes = b"{}", layer: bytes = b"L") -> list[tuple[str, str, bytes | str]]:
    manifest = json.dumps([{"Config": f"{_hex(config)}.json", "Layers": [f"{_hex(layer)}.tar"]}]).encode()
    return [("manifest.json", "file", manifest), (f"{_hex(config)}.json", "file", config), (f"{_hex(layer)}.tar", "file", layer)]


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_entries = st.fixed_dictionaries({}, optional={"Config": _json | st.just("c.json"), "Layers": _json,
                                               "RepoTags": _json})


@given(st.one_of(_json, st.lists(_entries, max_size=3)).map(lambda doc: json.dumps(doc).encode())
       | st.binary(max_size=40))
def test_any_other_manifest_json_is_refused_naming_the_archive(tmp_path_factory, manifest) -> None:
    path = tmp_path_factory.mktemp("da") / "image.tar"
    path.write_bytes(_tar([("manifest.json", "file", manifest), ("c.json", "file", b"{}")]))
    try:
        reader = open_image(path)
    except InputError as refused:
        assert str(path) in str(refused) and refused.check_id in ("document.parse", "image.readable")
        return
    # read: the one entry names c.json and existing members as layers, and string tags
    entries = json.loads(manifest)
    assert isinstance(entries, list) and len(entries) == 1 and entries[0]["Config"] == "c.json"
    assert all(name in ("c.json", "manifest.json") for name in entries[0]["Layers"])
    assert [ref.name for ref in reader.layer_refs] == entries[0]["Layers"]
    assert all(isinstance(tag, str) for tag in entries[0].get("RepoTags") or [])


@given(st.sampled_from(["truncate", "trailing", "duplicate", "missing-layer", "missing-config", "dangling-link"]),
       st.integers(1, 2000), st.binary(min_size=1, max_size=16).filter(lambda noise: noise.strip(b"\0")))
def test_a_damaged_archive_is_refused_naming_it(tmp_path_factory, damage, cut, noise) -> None:
    members = _valid()
    if damage == "duplicate":
        members.append(members[2])
    elif damage == "missing-layer":
        members.pop(2)
    elif damage == "missing-config":
        members.pop(1)
    elif damage == "dangling-link":
        members[2] = (members[2][0], "symlink", "nowhere.tar")
    raw = _tar(members)
    if damage == "truncate":
        content_end = len(raw.rstrip(b"\0"))  # the layer's last byte; zeros after it are padding
        raw = raw[: content_end - cut % content_end - 1]
    elif damage == "trailing":
        raw = raw + noise
    path = tmp_path_factory.mktemp("da") / "image.tar"
    path.write_bytes(raw)
    with pytest.raises(InputError) as refused:
        reader = open_image(path)
        for ref in reader.layer_refs:  # a truncated member is found by the reader, not left to a read
            with reader.open_blob(ref) as blob:
                assert len(blob.read()) == ref.size
    assert str(path) in str(refused.value)
