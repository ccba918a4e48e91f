"""Hostile layer tars: the entry-safety check of the one streaming layer scan
(``oci.entry_safety`` through ``layer_scan.scan_layer``), in the audit, ``image inspect``
and ``fanout --import``; and a property against a real unpacker: whatever the check
accepts, Python's tarfile extracting without any protection (``fully_trusted``) plus a
naive whiteout pass writes nothing outside the root."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from fixtures.hostile_layers import ACROSS, Entry, hostile_layout, tar_bytes
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from sparkflake import audit
from sparkflake.cli import main
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.distribute.engine import import_archive, import_layout
from sparkflake.oci.entry_safety import OTHER, EntrySafety, path_escape
from sparkflake.oci.layer_scan import scan_layer
from sparkflake.oci.layer_tree import normalize_image_path
from sparkflake.oci.tree_paths import normalize_member


def scan_reasons(layers: list[list[Entry]]) -> list[str | None]:
    safety = EntrySafety()
    return [scan_layer(io.BytesIO(tar_bytes(layer)), safety=safety).unsafe_entry for layer in layers]


HOSTILE = {
    "dot-dot": ([[("../escaped", "file", "")]], 0, "'../escaped': path '../escaped' has a '..' component"),
    "absolute": ([[("/etc/passwd", "file", "")]], 0, "path '/etc/passwd' is absolute"),
    "climb-inside-name": ([[("a", "dir", ""), ("a/../../x", "file", "")]], 0, "tar member 1 'a/../../x'"),
    "symlink-then-write": ([[("lib", "symlink", "/host/lib"), ("lib/evil.so", "file", "")]], 0,
                           "'lib/evil.so' is below the symlink lib -> /host/lib"),
    "symlink-then-write-across-layers": ([[("etc", "dir", ""), ("etc/cron", "symlink", "/etc/cron.d")],
                                          [("etc/cron/job", "file", "")]], 1,
                                         "'etc/cron/job' is below the symlink etc/cron -> /etc/cron.d"),
    "hardlink-outside": ([[("shadow", "hardlink", "../../etc/shadow")]], 0, "hardlink target '../../etc/shadow'"),
    "hardlink-absolute": ([[("shadow", "hardlink", "/etc/shadow")]], 0, "hardlink target '/etc/shadow' is absolute"),
    "hardlink-through-symlink": ([[("d", "symlink", "/etc"), ("x", "hardlink", "d/shadow")]], 0,
                                 "hardlink target 'd/shadow' is below the symlink d -> /etc"),
    "whiteout-climbs": ([[("a", "dir", "")], [("a/.wh...", "file", "")]], 1, "whiteout 'a/.wh...' deletes '..'"),
    "whiteout-dot": ([[(".wh..", "file", "")]], 0, "deletes '.'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_each_hostile_layer_is_refused_with_its_first_entry(case):
    layers, position, needle = HOSTILE[case]
    reasons = scan_reasons(layers)
    assert all(reason is None for reason in reasons[:position]), reasons
    assert reasons[position] is not None and needle in reasons[position], reasons


def test_ordinary_layers_pass():
    """What real images hold: absolute and relative symlinks, merged-/usr links, opaque
    directories, whiteouts, hardlinks inside, a symlink replaced by a directory later."""
    layers = [
        [("bin", "symlink", "usr/bin"), ("usr", "dir", ""), ("usr/bin", "dir", ""), ("usr/bin/python3", "file", ""),
         ("usr/bin/python", "symlink", "/usr/bin/python3"), ("usr/bin/py", "hardlink", "usr/bin/python3"),
         ("./etc/", "dir", ""), ("etc/alternatives", "symlink", "/etc/alt"), ("opt", "symlink", "/srv")],
        [("etc/.wh.alternatives", "file", ""), ("etc/alternatives", "dir", ""), ("etc/alternatives/x", "file", ""),
         ("usr/.wh..wh..opq", "file", ""), ("opt", "dir", ""), ("opt/app", "file", "")],
    ]
    assert scan_reasons(layers) == [None, None]


def test_whiteout_and_opaque_remove_a_lower_symlink():
    deleted = [[("d", "symlink", "/etc")], [(".wh.d", "file", "")], [("d/x", "file", "")]]
    assert scan_reasons(deleted) == [None, None, None]
    opaque = [[("top", "dir", ""), ("top/d", "symlink", "/etc")], [("top/.wh..wh..opq", "file", "")],
              [("top/d/x", "file", "")]]
    assert scan_reasons(opaque) == [None, None, None]
    kept = [[("top", "dir", ""), ("top/d", "symlink", "/etc")], [("top/.wh.other", "file", "")], [("top/d/x", "file", "")]]
    assert scan_reasons(kept)[2] is not None


# ----------------------------------------------------------------- the property

# Ordinary names (few, so entries collide: a symlink "a", then "a/b"), hostile ones one
# time in four. Link targets: OUTSIDE (a real directory beside the root, absolute), UP
# (enough '../' to climb from the root to the sandbox), ordinary names.
_CLEAN = st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2).map("/".join)
_HOSTILE = st.one_of(
    _CLEAN.map(lambda n: "../" + n), _CLEAN.map(lambda n: "/" + n), st.tuples(_CLEAN, _CLEAN).map("/../../".join),
    _CLEAN.map(lambda n: n + "/.wh.."), _CLEAN.map(lambda n: n + "/.wh..."), st.just(".wh.."),
    _CLEAN.map(lambda n: n + "/.wh.a"), _CLEAN.map(lambda n: n + "/.wh..wh..opq"), _CLEAN.map(lambda n: "./" + n),
)
_NAMES = st.one_of(_CLEAN, _CLEAN, _CLEAN, _HOSTILE)
_TARGETS = st.one_of(st.sampled_from(["OUTSIDE", "OUTSIDE/canary", "UP/outside/canary", "UP/outside", "a"]), _NAMES)
_ENTRIES = st.tuples(_NAMES, st.sampled_from(["file", "dir", "symlink", "hardlink"]), _TARGETS)
_LAYERS = st.lists(st.lists(_ENTRIES, min_size=1, max_size=4), min_size=1, max_size=3)
_CLIMB = "../" * 25  # root is sandbox/deep*24/root


def _concrete(layers: list[list[Entry]], outside: Path) -> list[list[Entry]]:
    def place(target: str) -> str:
        return target.replace("OUTSIDE", str(outside)).replace("UP/", _CLIMB).replace("UP", _CLIMB.rstrip("/"))

    return [[(name, kind, place(target)) for name, kind, target in layer] for layer in layers]


def _naive_unpack(layer_tar: bytes, root: Path, outside: Path) -> None:
    """An unpacker with no protection: tarfile 'fully_trusted' (follows symlinks above an
    entry, takes '..', absolute names and hard links as given), whiteouts applied by
    joining paths."""
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        tar.errorlevel = 0  # a file where a directory is needed is skipped, as in a lenient tool
        members = tar.getmembers()
        # Python < 3.11.4 has no filters: there extract is fully trusted anyway
        trusting = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        for member in members:
            if ".wh." in os.path.basename(member.name):
                continue
            try:
                # what the OCI changeset rules say an entry does to a symlink at its own
                # path: replace it (removed first); everything above it is followed naively
                if os.path.islink(os.path.join(root, member.name)):
                    os.unlink(os.path.join(root, member.name))
                tar.extract(member, root, set_attrs=False, **trusting)
            except (OSError, KeyError):  # a hard link to nothing, a file where a directory is
                pass
        for member in members:
            base = os.path.basename(member.name)
            if base.startswith(".wh.") and base != ".wh..wh..opq":
                # the directories above are followed naively; the whited-out name itself is
                # removed, not followed (unlink and rmtree take a symlink as it is; bin/fuzz
                # found a whiteout of a symlink to OUTSIDE, which removes only the link)
                parent = os.path.realpath(os.path.join(root, os.path.dirname(member.name)))
                victim = os.path.normpath(os.path.join(parent, base[4:]))  # ".wh..." names the parent
                assert victim.startswith(str(root) + os.sep), f"whiteout {member.name} would delete {victim}"


def _state_outside(sandbox: Path, root: Path) -> dict[str, tuple[int, int, int, int]]:
    found = {}
    for directory, dirs, files in os.walk(sandbox):
        if Path(directory) == root or str(directory).startswith(str(root) + os.sep):
            continue
        for name in dirs + files:
            path = os.path.join(directory, name)
            if Path(path) != root:
                status = os.lstat(path)
                found[path] = (status.st_ino, status.st_nlink, status.st_size, status.st_mtime_ns)
    return found


@settings(max_examples=max(200, settings.default.max_examples))
@given(_LAYERS)
@example([[("a", "symlink", "OUTSIDE"), ("a/b", "file", "")]])
@example([[("a", "symlink", "UP/outside")], [("a/b", "dir", ""), ("a/b/c", "file", "")]])
@example([[("a", "hardlink", "UP/outside/canary")]])
@example([[("a", "hardlink", "OUTSIDE/canary")]])
@example([[("../a", "file", "")]])
@example([[("a/b", "file", ""), ("a/../../b", "file", "")]])
@example([[("a", "dir", "")], [("a/.wh...", "file", "")]])
@example([[("a/a", "symlink", "OUTSIDE"), ("a/.wh.a", "file", ".wh..")]])  # bin/fuzz: removes the link only
def test_whatever_the_check_accepts_a_naive_unpacker_keeps_inside_the_root(tmp_path_factory, layers):
    # the root sits deep enough that no chain of '..' in the generated names leaves the sandbox
    sandbox = tmp_path_factory.mktemp("unpack")
    root = sandbox.joinpath(*["deep"] * 24, "root")
    root.mkdir(parents=True)
    outside = sandbox / "outside"
    (outside / "deeper").mkdir(parents=True)
    (outside / "canary").write_text("host file")
    before = _state_outside(sandbox, root)
    layers = _concrete(layers, outside)
    reasons = scan_reasons(layers)
    event("refused" if any(reasons) else "accepted")
    if any(reasons):
        return
    for layer in layers:
        _naive_unpack(tar_bytes(layer), root, outside)
    assert _state_outside(sandbox, root) == before
    for directory, _, files in os.walk(root):
        for name in files:  # no hard link to a file outside
            assert os.lstat(os.path.join(directory, name)).st_ino != os.lstat(outside / "canary").st_ino


# ----------------------------------------------------------------- the image readers


_SEGMENTS = st.lists(st.sampled_from(["", ".", "..", "a", "b.c", "..a", "a.."]), min_size=1, max_size=5)


@given(_SEGMENTS)
def test_one_decider_says_which_paths_escape_for_every_reader_and_writer(segments):
    """The layer scan, the tree writer (``normalize_member``: the OS base, the runtime
    check's unpack) and the image paths of a layer spec refuse exactly what ``path_escape``
    names: a leading ``/`` (the spec's paths are absolute by design) or a ``..`` part."""
    name = "/".join(segments)
    escape = path_escape(name)
    assert (escape is None) == (not name.startswith("/") and ".." not in segments)
    assert (EntrySafety().check(name, OTHER) is None) == (escape is None)
    member = name
    while member.startswith("./"):  # what normalize_member strips before it decides
        member = member[2:]
    try:
        normalize_member(name, source="t")
        refused = False
    except CheckFailed as refusal:
        assert refusal.check_id == "path-escape"
        refused = True
    assert refused == (path_escape(member) is not None)
    try:
        normalize_image_path(name, what="t")
        refused = False
    except InputError:
        refused = True
    assert refused == (name == "" or path_escape(name.lstrip("/")) is not None)


def test_audit_names_the_layer_and_first_entry(tmp_path):
    layout = hostile_layout(tmp_path / "oci", ACROSS)
    source = audit.open_target(f"oci:{layout}")
    report = audit.audit_image(source, audit.expectations_from())
    checks = [c for c in report.checks if c.id == "layer.entries-safe"]
    assert [c.status for c in checks] == ["pass", "fail"]
    assert "layer 1" in checks[1].detail and "'etc/cron/job' is below the symlink etc/cron -> /etc/cron.d" in checks[1].detail
    assert report.exit_code == 1
    # the digests themselves are all right: the entries alone fail the image
    assert {c.id for c in report.failures} == {"layer.entries-safe"}


def test_image_inspect_refuses_a_hostile_layer(tmp_path, capsys):
    layout = hostile_layout(tmp_path / "oci", [[("../../escape", "file", "")]])
    assert main(["image", "inspect", str(layout)]) == 1
    err = capsys.readouterr().err
    assert "[oci.layer-entries]" in err and "'../../escape'" in err


def test_fanout_import_refuses_before_the_engine_loads(tmp_path):
    layout = hostile_layout(tmp_path / "oci", ACROSS)
    archive = tmp_path / "hostile.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("oci-layout", "index.json", "blobs"):
            tar.add(layout / name, arcname=name)
    # "podman" would be run only after the check; a missing engine would be an InputError
    with pytest.raises(CheckFailed) as caught:
        import_archive("podman", ["--storage-driver=vfs", "--root", str(tmp_path / "store")], str(archive),
                       "sha256:" + "0" * 64, None)
    assert caught.value.check_id == "oci.layer-entries"
    assert not (tmp_path / "store").exists()


def test_the_blob_routes_import_refuses_before_skopeo_copies(tmp_path):
    """A rank's store holds blobs sha256-equal to rank 0's: that binds them to the source, not
    to a safe image. The layout's entries are checked as the archive route's are."""
    layout = hostile_layout(tmp_path / "oci", ACROSS)
    store = tmp_path / "store"
    with pytest.raises(CheckFailed) as caught:
        import_layout("podman", ["--storage-driver=vfs", "--root", str(store)], str(layout),
                      "sha256:" + "0" * 64, "localhost/hostile:1")
    assert caught.value.check_id == "oci.layer-entries"
    assert "'etc/cron/job' is below the symlink etc/cron -> /etc/cron.d" in str(caught.value)
    assert not store.exists()  # skopeo never ran
