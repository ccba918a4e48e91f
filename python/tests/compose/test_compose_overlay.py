"""Source overlay: plan, manifests, ELF refusal, sdist extraction, overlay comparison."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.compose.source_overlay import (
    compare_overlay,
    compare_retained_native,
    extract_sdist_package,
    overlay_manifest,
    package_tree_hashes,
    plan_overlay,
    retained_native_manifest,
    wheel_native_files,
    write_overlay_tree,
)
from sparkflake.core.errors import CheckFailed, InputError

ELF = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + (3).to_bytes(2, "little") + (183).to_bytes(2, "little") + bytes(44)


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return root


def test_plan_add_replace_unchanged(tmp_path: Path) -> None:
    base = make_tree(tmp_path / "site", {"pkg/__init__.py": b"a\n", "pkg/mod.py": b"old\n", "pkg/_C.so": ELF})
    source = make_tree(tmp_path / "src", {"pkg/__init__.py": b"a\n", "pkg/mod.py": b"new\n", "pkg/extra.json": b"{}\n"})
    plan = plan_overlay(base, source, "pkg")
    assert [(e.path, e.operation) for e in plan.entries] == [("pkg/extra.json", "add"), ("pkg/mod.py", "replace")]
    assert plan.unchanged == 1
    out = tmp_path / "overlay"
    assert write_overlay_tree(plan, out) == []
    assert (out / "pkg/mod.py").read_bytes() == b"new\n"
    assert not (out / "pkg/__init__.py").exists()
    manifest = overlay_manifest(plan, source_identity={"kind": "sdist"}, patch_set_sha256="", patched_tree_git="g",
                                patched_tree_nar_hash="n", install_prefix="/site")
    before = {f"pkg/{p}": h for p, h in package_tree_hashes(base / "pkg").items()}
    after = dict(before, **{"pkg/mod.py": sha(b"new\n"), "pkg/extra.json": sha(b"{}\n")})
    assert compare_overlay(manifest, before, after) == []
    after["pkg/__init__.py"] = sha(b"sneaky\n")
    assert any("not in the overlay manifest" in p for p in compare_overlay(manifest, before, after))


def test_source_elf_refused(tmp_path: Path) -> None:
    base = make_tree(tmp_path / "site", {"pkg/__init__.py": b""})
    source = make_tree(tmp_path / "src", {"pkg/__init__.py": b"", "pkg/_fast.so": ELF})
    with pytest.raises(CheckFailed) as error:
        plan_overlay(base, source, "pkg")
    assert error.value.check_id == "overlay.elf" and "_fast.so" in str(error.value)


def test_overlay_over_base_elf_refused(tmp_path: Path) -> None:
    base = make_tree(tmp_path / "site", {"pkg/_C.abi3.so": ELF})
    source = make_tree(tmp_path / "src", {"pkg/_C.abi3.so": b"# not an extension any more\n"})
    with pytest.raises(CheckFailed) as error:
        plan_overlay(base, source, "pkg")
    assert error.value.check_id == "overlay.elf" and "pkg/_C.abi3.so" in str(error.value)


def test_source_symlink_refused(tmp_path: Path) -> None:
    base = make_tree(tmp_path / "site", {"pkg/a.py": b""})
    source = make_tree(tmp_path / "src", {"pkg/a.py": b""})
    (source / "pkg" / "link.py").symlink_to("a.py")
    with pytest.raises(InputError, match="symlinks"):
        plan_overlay(base, source, "pkg")


def test_retained_native_matches_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/_C.so", ELF + b"payload")
        archive.writestr("pkg/__init__.py", b"")
        archive.writestr("other/_x.so", ELF)
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    shipped = wheel_native_files(wheel, "pkg")
    assert shipped == {"pkg/_C.so": (len(ELF) + 7, sha(ELF + b"payload"))}
    manifest = retained_native_manifest(site, "pkg", wheel_filename=wheel.name, wheel_sha256="0" * 64)
    assert manifest["files"][0]["machine"] == "aarch64"
    assert compare_retained_native(manifest, shipped) == []
    (site / "pkg/_C.so").write_bytes(ELF + b"payloaX")
    changed = retained_native_manifest(site, "pkg", wheel_filename=wheel.name, wheel_sha256="0" * 64)
    assert compare_retained_native(changed, shipped)


def _sdist(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return buffer.getvalue()


def test_extract_sdist_package_only(tmp_path: Path) -> None:
    sdist = tmp_path / "pkg-1.tar.gz"
    sdist.write_bytes(_sdist({"pkg-1/setup.py": b"", "pkg-1/pkg/a.py": b"a", "pkg-1/pkg/sub/b.txt": b"b", "pkg-1/tests/t.py": b""}))
    root = extract_sdist_package(sdist, "pkg", tmp_path / "out")
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == ["a.py", "sub/b.txt"]


def test_extract_sdist_refuses_links_and_missing_package(tmp_path: Path) -> None:
    sdist = tmp_path / "pkg-1.tar.gz"
    sdist.write_bytes(_sdist({"pkg-1/pkg/a.py": b"a"}, {"pkg-1/pkg/evil.py": "/etc/passwd"}))
    with pytest.raises(InputError, match="not a regular file"):
        extract_sdist_package(sdist, "pkg", tmp_path / "out")
    other = tmp_path / "other-1.tar.gz"
    other.write_bytes(_sdist({"other-1/other/a.py": b""}))
    with pytest.raises(InputError, match="no files under"):
        extract_sdist_package(other, "pkg", tmp_path / "out2")
    (tmp_path / "broken.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(InputError, match="cannot read sdist"):
        extract_sdist_package(tmp_path / "broken.tar.gz", "pkg", tmp_path / "out3")


_names = st.text(alphabet="abcdefgh", min_size=1, max_size=4)
_trees = st.dictionaries(_names.map(lambda n: f"pkg/{n}.py"), st.binary(max_size=20), max_size=8)


@given(base=_trees, source=_trees)
def test_plan_invariant(tmp_path_factory: pytest.TempPathFactory, base: dict[str, bytes], source: dict[str, bytes]) -> None:
    """Applying the planned overlay to the base gives base updated by source, and the
    manifest describes exactly that difference."""
    root = tmp_path_factory.mktemp("inv")
    base = {k: v for k, v in base.items() if not v.startswith(b"\x7fELF")}
    source = {k: v for k, v in source.items() if not v.startswith(b"\x7fELF")}
    site = make_tree(root / "site", {"pkg/__init__.py": b"", **base})
    src = make_tree(root / "src", {"pkg/__init__.py": b"", **source})
    plan = plan_overlay(site, src, "pkg")
    manifest = overlay_manifest(plan, source_identity={}, patch_set_sha256="", patched_tree_git="", patched_tree_nar_hash="", install_prefix="")
    out = root / "overlay"
    out.mkdir()
    write_overlay_tree(plan, out)
    before = {f"pkg/{p}": h for p, h in package_tree_hashes(site / "pkg").items()}
    after = dict(before)
    if (out / "pkg").exists():
        after.update({f"pkg/{p}": h for p, h in package_tree_hashes(out / "pkg").items()})
    expected = dict(before, **{path: sha(content) for path, content in source.items()})
    assert after == expected
    assert compare_overlay(manifest, before, after) == []
