"""`sparkflake build` on the fixture profile, offline: reproducible digests, the
verification chain refusing each tampered link by name, bad input refused with nothing
written, and cross-checks with skopeo, umoci and the receipt verifier."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkflake import audit
from sparkflake.audit.receipt import verify_receipt
from sparkflake.cli import main as cli_main
from sparkflake.compose.assembly import assemble
from sparkflake.compose.chain_links import ChainContext, verify_composition
from sparkflake.compose.composed_image import (
    OUTPUT_FORMATS,
    ImageOptions,
    build_lower_layers,
    prepare_top_over_layers,
)
from sparkflake.compose.composition import load_composition
from sparkflake.compose.inputs import fetch_inputs
from sparkflake.compose.source_overlay import package_files
from sparkflake.compose.verification import ChainFailed
from sparkflake.core.blob_cache import BlobCache
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.oci.blob_store import BlobStore
from sparkflake.workflows.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "profiles" / "fixture"
EXPECTED = json.loads((FIXTURE / "expected-digests.json").read_text())
SITE = "opt/venv/lib/python3.11/site-packages"


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("fixture-build")
    # the archives asked for (a build writes the layout alone unless asked): they are read below
    result = build_profile(
        BuildRequest(profile=str(FIXTURE), output_dir=base / "out", cache_root=base / "cache", offline=True,
                     formats=OUTPUT_FORMATS)
    )
    return base, result


def copy_profile(tmp_path: Path) -> Path:
    """A copy of the fixture profile that a test may break (inputs/ stays shared)."""
    target = tmp_path / "profiles" / "fixture"
    shutil.copytree(FIXTURE, target)
    return target


def test_build_matches_expected_digests(built) -> None:
    base, result = built
    image = result.image
    message = (
        "fixture digests changed; if intended, update profiles/fixture/expected-digests.json "
        f"(manifest {image.manifest_digest}, config {image.config_digest})"
    )
    assert image.manifest_digest == EXPECTED["manifest"], message
    assert image.config_digest == EXPECTED["config"], message
    assert [layer.diff_id for layer in image.layers] == [layer["diff_id"] for layer in EXPECTED["layers"]]
    assert list(result.layer_names) == ["os-base", "python-cuda", "python-torch", "python-env", "vllm", "composition"]
    digests = json.loads((base / "out" / "digests.json").read_text())
    assert digests["manifest"] == image.manifest_digest and digests["config"] == image.config_digest
    assert {link.link for link in result.chain} == {
        "inputs", "retained-native", "overlay", "patches", "native-interface", "absences", "elf-machine", "labels",
        "claims",
    }


def test_second_build_elsewhere_same_digests_and_layer_cache(built, tmp_path: Path) -> None:
    base, first = built
    again = build_profile(
        BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True)
    )
    assert again.image.manifest_digest == first.image.manifest_digest
    assert again.image.config_digest == first.image.config_digest
    warm = build_profile(
        BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True,
                     formats=OUTPUT_FORMATS)
    )
    assert warm.image.manifest_digest == first.image.manifest_digest
    assert all(warm.layers_from_cache)
    for name in ("oci-archive.tar", "docker-archive.tar", "receipt.json"):
        assert (tmp_path / "out" / name).read_bytes() == (base / "out" / name).read_bytes()


def test_cli_build_prints_digests_with_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["build", str(FIXTURE), "--offline", "--cache", str(tmp_path / "c"), "-o", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0
    assert f"manifest digest  {EXPECTED['manifest']}" in out
    assert f"config digest    {EXPECTED['config']}  (image ID)" in out
    assert "verified retained-native" in out


def test_cli_build_into_an_impossible_place_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o under /proc (no directory can be made there): exit 2 at once, before any fetch,
    the path named, no traceback; a file where the output's parent should be: the same."""
    code = cli_main(["build", str(FIXTURE), "--offline", "--cache", str(tmp_path / "c"), "-o", "/proc/sparkflake-no/out"])
    err = capsys.readouterr().err
    assert code == 2
    assert "sparkflake: error: /proc/sparkflake-no/out: cannot write here: No such file or directory" in err
    assert "Traceback" not in err
    assert not (tmp_path / "c").exists()  # refused before any fetch or assembly
    (tmp_path / "a-file").write_text("")
    code = cli_main(["build", str(FIXTURE), "--offline", "--cache", str(tmp_path / "c"), "-o", str(tmp_path / "a-file" / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"{tmp_path / 'a-file' / 'out'}: cannot write here: " in err


def test_skopeo_and_umoci_agree(built, tmp_path: Path) -> None:
    base, result = built
    inspected = json.loads(
        subprocess.run(["skopeo", "inspect", f"oci:{base / 'out' / 'oci'}:fixture"], check=True, capture_output=True, text=True).stdout
    )
    assert inspected["Digest"] == result.image.manifest_digest
    assert inspected["Labels"]["org.sparkflake.status"] == "implemented"
    raw = subprocess.run(["skopeo", "inspect", "--raw", f"docker-archive:{base / 'out' / 'docker-archive.tar'}"],
                         check=True, capture_output=True).stdout
    assert json.loads(raw)["config"]["digest"] == result.image.config_digest
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{base / 'out' / 'oci'}:fixture", str(bundle)],
                   check=True, capture_output=True)
    rootfs = bundle / "rootfs"
    retained = json.loads((base / "out" / "retained-native.json").read_text())
    assert len(retained["files"]) == 2
    for entry in retained["files"]:
        assert sha((rootfs / SITE / entry["path"]).read_bytes()) == entry["sha256"]
    overlay = json.loads((base / "out" / "source-overlay.json").read_text())
    operations = {e["path"]: e["operation"] for e in overlay["entries"]}
    assert operations == {
        "vllm/entrypoints/cli.py": "replace",
        "vllm/envs.py": "replace",
        "vllm/fixture_patch.py": "add",
        "vllm/legacy.py": "delete",
        "vllm/overlay_only.py": "add",
    }
    for entry in overlay["entries"]:
        target = rootfs / SITE / entry["path"]
        if entry["operation"] == "delete":
            assert not target.exists()
        else:
            assert sha(target.read_bytes()) == entry["target_sha256"]
    embedded = json.loads((rootfs / "etc/sparkflake/receipt.json").read_text())
    assert embedded["_type"] == "https://in-toto.io/Statement/v1"
    assert [s["digest"]["sha256"] for s in embedded["subject"]] == [
        layer.diff_id.removeprefix("sha256:") for layer in result.image.layers[:-1]
    ]
    config = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"oci:{base / 'out' / 'oci'}:fixture"],
                                       check=True, capture_output=True, text=True).stdout)
    assert config["config"]["Entrypoint"] == ["vllm", "serve"]


def test_receipt_shape_and_verify_every_format(built) -> None:
    base, result = built
    full = json.loads((base / "out" / "receipt.json").read_text())
    assert full["predicateType"] == "https://slsa.dev/provenance/v1"
    assert full["subject"][0]["digest"]["sha256"] == result.image.manifest_digest.removeprefix("sha256:")
    names = {dep["name"] for dep in full["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert {"vllm", "vllm-sdist", "torch", "fixture-base:arm64", "patch-set:profiles/fixture/patches"} <= names
    byproducts = {item["name"] for item in full["predicate"]["runDetails"]["byproducts"]}
    assert {"retained-native-manifest", "source-overlay-manifest", "image-config", "image-manifest"} <= byproducts
    for image in ("oci", "oci-archive.tar", "docker-archive.tar"):
        report = verify_receipt(base / "out" / "receipt.json", base / "out" / image)
        assert report.ok and report.config_digest == result.image.config_digest


def test_the_build_output_itself_is_audited_inspected_and_verified(built, capsys) -> None:
    # OUT names its layout OUT/oci, as for load, export and the runtime check (audit, image
    # inspect and receipt verify refused OUT: "oci-layout file missing")
    base, result = built
    out = str(base / "out")
    assert cli_main(["audit", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["digests"]["manifest"]["digest"] == result.image.manifest_digest
    assert cli_main(["image", "inspect", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["digests"]["manifest"] == result.image.manifest_digest
    assert cli_main(["receipt", "verify", str(base / "out" / "receipt.json"), out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["manifest"] == result.image.manifest_digest


def test_receipt_verify_refuses_edited_receipt_label(built, tmp_path: Path) -> None:
    base, _ = built
    full = json.loads((base / "out" / "receipt.json").read_text())
    full["predicate"]["buildDefinition"]["internalParameters"]["labels"]["org.sparkflake.status"] = "qualified"
    edited = tmp_path / "receipt.json"
    edited.write_text(json.dumps(full))
    with pytest.raises(CheckFailed) as error:
        verify_receipt(edited, base / "out" / "oci")
    assert error.value.check_id == "receipt.labels"
    code = cli_main(["receipt", "verify", str(edited), str(base / "out" / "oci")])
    assert code == 1
    # `audit --receipt` reads the labels where the build records them, as `receipt verify` does
    for receipt_path, status in ((base / "out" / "receipt.json", "pass"), (edited, "fail")):
        source = audit.open_target(f"oci:{base / 'out' / 'oci'}")
        report = audit.audit_image(source, audit.expectations_from(receipt_file=str(receipt_path)))
        checks = {c.id: c for c in report.checks}
        assert checks["labels.receipt"].status == status, checks["labels.receipt"]
        assert checks["receipt.subject"].status == checks["receipt.byproducts"].status == "pass"
    assert "org.sparkflake.status: image" in checks["labels.receipt"].detail


def test_receipt_verify_refuses_other_image(built, tmp_path: Path) -> None:
    base, _ = built
    full = json.loads((base / "out" / "receipt.json").read_text())
    full["subject"][0]["digest"]["sha256"] = "0" * 64
    edited = tmp_path / "receipt.json"
    edited.write_text(json.dumps(full))
    with pytest.raises(CheckFailed) as error:
        verify_receipt(edited, base / "out" / "oci-archive.tar")
    assert error.value.check_id == "receipt.subject"


# --------------------------------------------------------------------------- tampering


@pytest.fixture()
def stages(tmp_path: Path):
    """The build stopped before the chain: composition, fetched inputs, trees, top layer."""
    cache_root = tmp_path / "cache"
    composition = load_composition(str(FIXTURE))
    fetched = fetch_inputs(composition, BlobCache(cache_root), offline=True)
    assembly = assemble(composition, fetched, tmp_path / "trees")
    store = BlobStore(cache_root / "oci")
    options = ImageOptions()
    lower = build_lower_layers(assembly.lower_layers(), options, store, None)
    prepared = prepare_top_over_layers(composition, assembly, lower, options, store)
    return composition, fetched, assembly, prepared


def test_untampered_chain_passes(stages) -> None:
    results = verify_composition(*stages)
    assert all(result.status == "passed" for result in results)


def test_native_interface_reads_the_patched_source_s_bytes(stages) -> None:
    """The native-interface link reads unpatched files from the source tree they were
    copied from (its sha256 records answer without reading) and patch outcomes from the
    patched copy: together exactly the patched source's paths and bytes. A patch outcome
    changed after the patch ran is what the link scans."""
    composition, fetched, assembly, prepared = stages
    files = ChainContext(composition, fetched, assembly, prepared).final_python_files()
    patched = package_files(assembly.patched_source)
    assert set(files) == {f"vllm/{path}" for path in patched}
    assert {"vllm/fixture_patch.py", "vllm/envs.py"} <= set(files) and "vllm/legacy.py" not in files
    assert files["vllm/envs.py"].is_relative_to(assembly.patched_source)
    assert files["vllm/overlay_only.py"].is_relative_to(assembly.source_root)
    assert all(files[f"vllm/{path}"].read_bytes() == copy.read_bytes() for path, copy in patched.items())
    with (assembly.patched_source / "envs.py").open("a") as handle:
        handle.write("torch.ops._C.never_registered(x)\n")
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, prepared)
    assert "vllm/envs.py calls torch.ops._C.never_registered, which no retained extension registers" in str(error.value)


def flip_last_byte(path: Path) -> None:
    content = bytearray(path.read_bytes())
    content[-1] ^= 0x01
    path.write_bytes(bytes(content))


def test_tampered_retained_so_refused(stages) -> None:
    composition, fetched, assembly, prepared = stages
    flip_last_byte(assembly.vllm_tree / SITE / "vllm/_C.abi3.so")
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, prepared)
    assert error.value.check_id == "retained-native"
    assert "vllm/_C.abi3.so" in str(error.value)


def test_tampered_overlay_file_refused(stages) -> None:
    composition, fetched, assembly, prepared = stages
    flip_last_byte(assembly.overlay_tree / "vllm/overlay_only.py")
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, prepared)
    assert error.value.check_id == "overlay"
    assert "vllm/overlay_only.py" in str(error.value)


def test_tampered_patch_pre_image_refused(stages) -> None:
    composition, fetched, assembly, prepared = stages
    flip_last_byte(assembly.source_root / "vllm/envs.py")
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, prepared)
    assert error.value.check_id == "patches"
    assert "vllm/envs.py: pre-image" in str(error.value)


def test_tampered_label_refused(stages) -> None:
    composition, fetched, assembly, prepared = stages
    labels = dict(prepared.labels)
    labels["org.sparkflake.input.torch.sha256"] = "0" * 64
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, dataclasses.replace(prepared, labels=labels))
    assert error.value.check_id == "labels"
    assert "org.sparkflake.input.torch.sha256" in str(error.value)
    del labels["org.sparkflake.input.torch.sha256"]
    with pytest.raises(ChainFailed, match="missing"):
        verify_composition(composition, fetched, assembly, dataclasses.replace(prepared, labels=labels))


def test_foreign_elf_refused(stages) -> None:
    composition, fetched, assembly, prepared = stages
    alien = assembly.python_trees["python-env"] / SITE / "b12x" / "alien.so"
    header = bytearray((assembly.vllm_tree / SITE / "vllm/_C.abi3.so").read_bytes())
    header[18:20] = (62).to_bytes(2, "little")  # EM_X86_64
    alien.write_bytes(bytes(header))
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, prepared)
    assert error.value.check_id == "elf-machine" and "alien.so" in str(error.value)


def test_required_absence_refused(stages) -> None:
    composition, fetched, assembly, prepared = stages
    dist_info = assembly.python_trees["python-env"] / SITE / "deep_ep-0.1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Name: deep_ep\n")
    with pytest.raises(ChainFailed) as error:
        verify_composition(composition, fetched, assembly, prepared)
    assert error.value.check_id == "absences" and "deep_ep" in str(error.value)


def test_tampered_cache_input_refused_nothing_written(tmp_path: Path) -> None:
    cache_root = tmp_path / "cache"
    out = tmp_path / "out"
    build_profile(BuildRequest(profile=str(FIXTURE), output_dir=out, cache_root=cache_root, offline=True))
    shutil.rmtree(out)
    wheel_sha = EXPECTED_INPUT_SHA["vllm"]
    blob = cache_root / "blobs" / "sha256" / wheel_sha
    blob.chmod(0o644)
    flip_last_byte(blob)
    with pytest.raises(CheckFailed) as error:
        build_profile(BuildRequest(profile=str(FIXTURE), output_dir=out, cache_root=cache_root, offline=True))
    assert error.value.check_id == "inputs"
    assert "vllm" in str(error.value) and "altered" in str(error.value)
    assert not out.exists()


def test_chain_refused_after_the_archive_started_keeps_the_previous_output(tmp_path: Path) -> None:
    """The archive is copied while the chain runs (stages 4-7 write into a staging
    directory): a refusal there removes the staging directory, archive and all, and the
    previous output stays as it was."""
    cache_root = tmp_path / "cache"
    out = tmp_path / "out"
    build_profile(BuildRequest(profile=str(FIXTURE), output_dir=out, cache_root=cache_root, offline=True))
    before = {path.relative_to(out): path.read_bytes() for path in out.rglob("*") if path.is_file()}
    profile = copy_profile(tmp_path)
    text = (profile / "profile.toml").read_text()
    (profile / "profile.toml").write_text(text.replace('distributions = ["deep_ep"]', 'distributions = ["deep_ep", "vllm"]'))
    with pytest.raises(CheckFailed) as error:
        build_profile(BuildRequest(profile=str(profile), output_dir=out, cache_root=cache_root, offline=True))
    assert error.value.check_id == "absences" and "vllm" in str(error.value)
    after = {path.relative_to(out): path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert after == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cache", "out", "profiles"]


EXPECTED_INPUT_SHA = {
    "vllm": sha((FIXTURE / "inputs" / "vllm-0.1.0-cp38-abi3-manylinux_2_28_aarch64.whl").read_bytes()),
}


# --------------------------------------------------------------------------- bad input


def test_patch_that_no_longer_applies_names_file_and_hunk(tmp_path: Path) -> None:
    profile = copy_profile(tmp_path)
    diff = profile / "patches" / "0001-probe-defaults.diff"
    diff.write_text(diff.read_text().replace(" import os\n", " import sys\n"))
    out = tmp_path / "out"
    with pytest.raises(CheckFailed) as error:
        build_profile(BuildRequest(profile=str(profile), output_dir=out, cache_root=tmp_path / "cache", offline=True))
    assert error.value.check_id == "patches.hunk"
    message = str(error.value)
    assert "vllm/envs.py" in message and "hunk 1" in message and "0001-probe-defaults.diff" in message
    assert not out.exists()
    # Refused before any layer was made: with a cold layer cache, no blob, no record.
    layer_store = tmp_path / "cache" / "oci"
    assert [p for p in layer_store.rglob("*") if p.is_file()] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "profiles"]


def test_patch_pre_image_anchor_mismatch(tmp_path: Path) -> None:
    profile = copy_profile(tmp_path)
    manifest = profile / "patches" / "patches.toml"
    pre = "41ab56640cfec54e8f27bb4e21d68c32c6fd61935f1569cc482da1c976680bfc"
    manifest.write_text(manifest.read_text().replace(pre, "1" * 64))
    with pytest.raises(CheckFailed) as error:
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True))
    assert error.value.check_id == "patches.pre-image" and "vllm/envs.py" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_patch_writing_an_elf_file_refused(tmp_path: Path) -> None:
    """An overlay may carry only Python and data files: a patch whose result is ELF is
    refused by the overlay, naming the file."""
    profile = copy_profile(tmp_path)
    patches = profile / "patches"
    content = b"\x7fELF fake extension\n"
    (patches / "0003-elf.diff").write_bytes(b"--- /dev/null\n+++ b/vllm/_new_ext.so\n@@ -0,0 +1 @@\n+" + content)
    with (patches / "patches.toml").open("a") as handle:
        handle.write(
            f'\n[[patches]]\nname = "elf"\ndiff = "0003-elf.diff"\nfiles = [{{ path = "vllm/_new_ext.so", pre = "", post = "{sha(content)}" }}]\n'
        )
    with pytest.raises(CheckFailed) as error:
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True))
    assert error.value.check_id == "overlay.elf"
    assert "vllm/_new_ext.so" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_missing_input_offline_names_it_and_how_to_supply(tmp_path: Path) -> None:
    profile = copy_profile(tmp_path)
    (profile / "inputs" / "torch-0.1.0-cp311-cp311-manylinux_2_28_aarch64.whl").unlink()
    with pytest.raises(InputError) as error:
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True))
    message = str(error.value)
    assert error.value.check_id == "inputs"
    assert "torch" in message and "--from DIR" in message
    assert not (tmp_path / "out").exists()


def test_role_naming_input_the_lock_lacks(tmp_path: Path) -> None:
    profile = copy_profile(tmp_path)
    toml = profile / "profile.toml"
    toml.write_text(toml.read_text().replace('b12x = "b12x"', 'b12x = "b12x-nightly"'))
    with pytest.raises(InputError, match="b12x-nightly"):
        build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "out", cache_root=tmp_path / "cache", offline=True))
    assert not (tmp_path / "out").exists()
    code = cli_main(["build", str(profile), "--offline", "--cache", str(tmp_path / "cache"), "-o", str(tmp_path / "out")])
    assert code == 2


def test_overlay_source_change_rebuilds_only_top_layer(tmp_path: Path) -> None:
    cache_root = tmp_path / "cache"
    first = build_profile(BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "a", cache_root=cache_root, offline=True))
    profile = copy_profile(tmp_path)
    diff = profile / "patches" / "0002-drop-legacy.diff"
    diff.write_text(diff.read_text().replace("PATCHED = True", "PATCHED = False"))
    manifest = profile / "patches" / "patches.toml"
    old_post = sha(b'"""Added by the fixture patch set."""\nPATCHED = True\n')
    new_post = sha(b'"""Added by the fixture patch set."""\nPATCHED = False\n')
    manifest.write_text(manifest.read_text().replace(old_post, new_post))
    second = build_profile(BuildRequest(profile=str(profile), output_dir=tmp_path / "b", cache_root=cache_root, offline=True))
    assert second.layers_from_cache[:-1] == (True,) * 5
    assert second.layers_from_cache[-1] is False
    assert [layer.digest for layer in second.image.layers[:-1]] == [layer.digest for layer in first.image.layers[:-1]]
    assert second.image.manifest_digest != first.image.manifest_digest


def test_work_dir_removed(tmp_path: Path) -> None:
    build_profile(BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "o", cache_root=tmp_path / "c", offline=True))
    assert list((tmp_path / "c" / "work").iterdir()) == []



# --------------------------------------------------------------------------- git source


def test_git_source_bound_by_tree_id(tmp_path: Path) -> None:
    from sparkflake.compose.source_overlay import extract_sdist_package
    from sparkflake.core.tree_digest import git_tree_id, nar_hash
    from sparkflake.lock.lock_file import load_lock, write_lock
    from sparkflake.lock.pins import GitPin, Lock

    checkout = tmp_path / "checkout"
    extract_sdist_package(FIXTURE / "inputs" / "vllm-0.1.0.tar.gz", "vllm", checkout)
    profile = copy_profile(tmp_path)
    lock = load_lock(profile / "fixture.lock")
    pin = GitPin(
        name="vllm-git",
        urls=("https://fixtures.sparkflake.invalid/vllm.git",),
        rev="1" * 40,
        tree=git_tree_id(checkout),
        nar_hash=nar_hash(checkout).sri,
    )
    write_lock(profile / "fixture.lock", Lock(target=lock.target, inputs=(*lock.inputs, pin)))
    toml = profile / "profile.toml"
    toml.write_text(toml.read_text().replace('vllm_source = "vllm-sdist"', 'vllm_source = "vllm-git"'))

    def request(out: str, source_tree: Path | None) -> BuildRequest:
        return BuildRequest(profile=str(profile), output_dir=tmp_path / out, cache_root=tmp_path / "cache",
                            offline=True, source_tree=source_tree)

    result = build_profile(request("out", checkout))
    labels = json.loads(result.image.config_bytes)["config"]["Labels"]
    assert labels["org.opencontainers.image.revision"] == "1" * 40
    assert labels["org.sparkflake.input.vllm-source"] == f"git:{pin.urls[0]}@{pin.rev}:tree:{pin.tree}"
    overlay = json.loads((tmp_path / "out" / "source-overlay.json").read_text())
    assert overlay["source"]["kind"] == "git" and overlay["source"]["tree"] == pin.tree
    with pytest.raises(InputError, match="vllm-git: git commit 1111111111111111111111111111111111111111") as missing:
        build_profile(request("out2", None))  # offline, not in the cache: fetched by commit
    assert "--git-mirror vllm-git=URL" in missing.value.message
    (checkout / "vllm" / "overlay_only.py").write_text("# changed after locking\n")
    with pytest.raises(CheckFailed) as error:
        build_profile(request("out3", checkout))
    assert error.value.check_id == "inputs" and pin.tree in str(error.value)
    assert not (tmp_path / "out3").exists()
