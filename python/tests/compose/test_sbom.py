"""The SBOM of a build: SPDX 2.3 JSON that spdx-tools validates (its `pyspdxtools -i` and,
for property tests, its validator in-process), listing every locked input with the lock's
identity, deterministic, recorded in the receipt and carried as an OCI 1.1 artifact whose
subject is the image, without changing the image's digests."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.licenses import canonicalize_license_expression
from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from sparkflake.compose import receipt, sbom
from sparkflake.compose.composition import load_composition
from sparkflake.compose.package_license import license_from_metadata, sdist_license, wheel_license
from sparkflake.core.blob_cache import BlobCache
from sparkflake.core.canonical_json import readable_json_bytes
from sparkflake.lock.lock_file import load_lock
from sparkflake.lock.pins import DebPin, FilePin, GitPin, SdistPin, WheelPin
from sparkflake.workflows.build import BuildRequest, build_profile

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "profiles" / "fixture"
EXPECTED = json.loads((FIXTURE / "expected-digests.json").read_text())
PYSPDXTOOLS = Path(sys.executable).parent / "pyspdxtools"


def pyspdxtools(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(PYSPDXTOOLS), "-i", str(path)], capture_output=True, text=True, timeout=300,
                          check=False)


def spdx_issues(document: dict) -> list[str]:
    return [issue.validation_message for issue in validate_full_spdx_document(JsonLikeDictParser().parse(document))]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("sbom-build")
    result = build_profile(BuildRequest(profile=str(FIXTURE), output_dir=base / "out", cache_root=base / "cache",
                                        offline=True, keep_work=True))
    return base, result


def test_fixture_sbom_validates_and_lists_every_input(built) -> None:
    base, result = built
    path = base / "out" / "sbom.spdx.json"
    checked = pyspdxtools(path)
    assert checked.returncode == 0 and "invalid" not in checked.stderr, checked.stderr
    document = json.loads(path.read_text())
    assert document["spdxVersion"] == "SPDX-2.3"
    assert document["creationInfo"]["created"] == "1970-01-01T00:00:01Z"  # the image's SOURCE_DATE_EPOCH (1)
    by_checksum = {p["checksums"][0]["checksumValue"]: p for p in document["packages"] if p.get("checksums")}
    lock = load_lock(FIXTURE / "fixture.lock")
    for pin in lock.inputs:
        package = by_checksum[pin.sha256]
        assert package["downloadLocation"] == pin.urls[0]
        assert package["versionInfo"] == pin.version
        assert package["externalRefs"][0]["referenceLocator"].startswith(("pkg:pypi/", "pkg:deb/debian/"))
    image = by_checksum[result.image.manifest_digest.removeprefix("sha256:")]
    assert image["SPDXID"] == sbom.IMAGE_ID and image["primaryPackagePurpose"] == "CONTAINER"
    contained = {r["relatedSpdxElement"] for r in document["relationships"] if r["relationshipType"] == "CONTAINS"}
    assert contained == {by_checksum[pin.sha256]["SPDXID"] for pin in lock.inputs}
    assert {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
            "relatedSpdxElement": sbom.IMAGE_ID} in document["relationships"]
    # what the fixture wheels' METADATA states (License: Apache-2.0); its sdist states none
    assert by_checksum[lock.by_name("b12x").sha256]["licenseDeclared"] == "Apache-2.0"
    assert by_checksum[lock.by_name("vllm-sdist").sha256]["licenseDeclared"] == "NOASSERTION"


def test_the_validator_can_refuse(built, tmp_path: Path) -> None:
    base, _ = built
    document = json.loads((base / "out" / "sbom.spdx.json").read_text())
    document["packages"][1]["licenseDeclared"] = "Not A License"
    broken = tmp_path / "broken.spdx.json"
    broken.write_text(json.dumps(document))
    assert pyspdxtools(broken).returncode != 0


def test_sbom_recorded_in_receipt_and_layout_without_moving_image_digests(built) -> None:
    base, result = built
    out = base / "out"
    content = (out / "sbom.spdx.json").read_bytes()
    recorded = receipt.byproduct(json.loads((out / "receipt.json").read_text()), receipt.SBOM)
    assert recorded is not None and recorded["digest"]["sha256"] == hashlib.sha256(content).hexdigest()
    artifact_digest = receipt.byproduct(result.full_receipt, receipt.SBOM_ARTIFACT)["digest"]["sha256"]
    blobs = out / "oci" / "blobs" / "sha256"
    artifact = json.loads((blobs / artifact_digest).read_bytes())
    assert hashlib.sha256((blobs / artifact_digest).read_bytes()).hexdigest() == artifact_digest
    assert artifact["artifactType"] == "application/spdx+json"
    assert artifact["subject"] == {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                   "digest": result.image.manifest_digest, "size": len(result.image.manifest_bytes)}
    assert (blobs / artifact["layers"][0]["digest"].removeprefix("sha256:")).read_bytes() == content
    assert (blobs / artifact["config"]["digest"].removeprefix("sha256:")).read_bytes() == b"{}"
    # both digests known at build time and recorded (record_expected.py)
    assert "sha256:" + hashlib.sha256(content).hexdigest() == EXPECTED["sbom"]
    assert f"sha256:{artifact_digest}" == EXPECTED["sbom_artifact"]
    # the image's own digests, and index.json, are those recorded before the SBOM existed
    index_bytes = (out / "oci" / "index.json").read_bytes()
    assert "sha256:" + hashlib.sha256(index_bytes).hexdigest() == EXPECTED["index"]
    assert result.image.manifest_digest == EXPECTED["manifest"] and result.image.config_digest == EXPECTED["config"]
    # the in-image receipt re-derived from the full one does not carry the SBOM (it names the manifest)
    in_image = receipt.in_image_from_full(result.full_receipt)
    assert receipt.byproduct(in_image, receipt.SBOM) is None


def test_sbom_is_deterministic(built, tmp_path: Path) -> None:
    base, _ = built
    build_profile(BuildRequest(profile=str(FIXTURE), output_dir=tmp_path / "out", cache_root=tmp_path / "cache",
                               offline=True, use_layer_cache=False, use_tree_cache=False))
    assert (tmp_path / "out" / "sbom.spdx.json").read_bytes() == (base / "out" / "sbom.spdx.json").read_bytes()


def test_installed_metadata_gives_the_licenses_the_wheels_state(built) -> None:
    base, result = built
    composition = load_composition(str(FIXTURE))
    assembly = result.assembly
    site = assembly.site_packages.lstrip("/")
    installed = {}
    for wheel in composition.wheels:
        found = [tree / site / sbom.dist_info_name(wheel) / "METADATA" for tree in assembly.python_trees.values()]
        (installed[wheel.name],) = [path for path in found if path.is_file()]
    blobs = BlobCache(base / "cache")
    paths = {wheel.name: blobs.blob_path(wheel.sha256) for wheel in composition.wheels}
    from_wheels = sbom.stated_licenses(composition.wheels, paths)
    from_tree = sbom.stated_licenses(composition.wheels, {}, installed)
    assert from_wheels == from_tree and len(from_tree) == len(composition.wheels)


def test_glm53_sbom_lists_all_310_locked_inputs(tmp_path: Path) -> None:
    """From the lock alone (no wheel at hand here, so no license is read): every input,
    and spdx-tools accepts the document."""
    composition = load_composition("glm53-dflash7")
    expected = json.loads((REPO / "profiles" / "glm53-dflash7" / "expected-digests.json").read_text())
    pins = [*composition.debs, *composition.wheels, composition.source]
    document = sbom.sbom_document(
        profile_name="glm53-dflash7",
        image=sbom.ImageIdentity("localhost/sparkflake", "glm53-dflash7", expected["manifest"], "arm64"),
        pins=pins, source_date_epoch=1, tool_version="test",
        patch_set=("patch-set:overlays/vllm", composition.patch_set.patch_set_sha256),
    )
    locked = [pin for lock in composition.locks for pin in lock.inputs]
    # 251, 15 Debian packages of the RDMA userspace (issue 27), 44 of FlashInfer's JIT toolchain
    # (g++, python3.11-dev, dash, libc-bin and their closure; nvcc, crt, nvvm: issue 26)
    assert len(locked) == 310
    checksums = {p["checksums"][0]["checksumValue"] for p in document["packages"] if p.get("checksums")}
    assert {pin.sha256 for pin in locked} <= checksums
    path = tmp_path / "glm53.spdx.json"
    path.write_bytes(readable_json_bytes(document))
    checked = pyspdxtools(path)
    assert checked.returncode == 0 and "invalid" not in checked.stderr, checked.stderr


# --- properties ---------------------------------------------------------------------------

_HEX64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_HEX40 = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
_NAME = st.from_regex(r"[a-z][a-z0-9]{1,8}(-[a-z0-9]{1,5})?", fullmatch=True)
_NUMBER = r"(0|[1-9][0-9]{0,2})"
_VERSION = st.from_regex(rf"{_NUMBER}(\.{_NUMBER}){{0,2}}(\.post[0-9])?", fullmatch=True)
_DEB_VERSION = st.from_regex(r"([0-9]:)?[0-9]{1,3}\.[0-9]{1,2}(-[0-9a-z+~]{1,6})?", fullmatch=True)


@st.composite
def _pins(draw: st.DrawFn) -> list:
    pins: list = []
    for name in draw(st.lists(_NAME, unique=True, max_size=6)):
        version = draw(_VERSION)
        filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        pins.append(WheelPin(name, version, filename, draw(_HEX64), 1, ("py3-none-any",), (f"https://x.invalid/{filename}",)))
    for name in draw(st.lists(_NAME, unique=True, max_size=4)):
        pins.append(DebPin(f"{name}:arm64", name, draw(_DEB_VERSION), "arm64", draw(_HEX64), 1,
                           (f"https://deb.invalid/{name}.deb",)))
    if draw(st.booleans()):
        version = draw(_VERSION)
        pins.append(SdistPin("src-sdist", version, f"src-{version}.tar.gz", draw(_HEX64), 1,
                             (f"https://x.invalid/src-{version}.tar.gz",)))
    if draw(st.booleans()):
        url = draw(st.sampled_from(["https://github.com/vllm-project/vllm.git", "https://127.0.0.1:9418/vllm.git",
                                    "file:///srv/git/vllm.git"]))
        pins.append(GitPin("vllm-git", (url,), draw(_HEX40), draw(_HEX40), "sha256-" + "A" * 43 + "="))
    if draw(st.booleans()):
        urls = draw(st.sampled_from([(), ("https://files.example.com/lib.so",), ("https://localhost:8000/lib.so",)]))
        pins.append(FilePin("nccl-lib", draw(_HEX64), 1, urls, None if urls else "put it in inputs/"))
    return pins


_LICENSES = st.sampled_from([None, "MIT", "Apache-2.0 OR MIT", "LicenseRef-Vendor-Proprietary", "BSD-3-Clause AND Zlib"])


@given(pins=_pins(), licenses=st.lists(_LICENSES, min_size=12, max_size=12), digest=_HEX64,
       epoch=st.integers(min_value=0, max_value=2**31))
def test_any_composition_gives_a_valid_document(pins: list, licenses: list, digest: str, epoch: int) -> None:
    stated = {pin.name: sbom.StatedLicense(license, "") for pin, license in zip(pins, licenses, strict=False)}
    document = sbom.sbom_document(
        profile_name="p", image=sbom.ImageIdentity("localhost/img", "t", f"sha256:{digest}", "arm64"),
        pins=pins, source_date_epoch=epoch, tool_version="0", licenses=stated,
        patch_set=("patch-set:p", digest),
    )
    assert spdx_issues(document) == []
    assert len(document["packages"]) == len(pins) + 2
    assert len({p["SPDXID"] for p in document["packages"]}) == len(document["packages"])
    again = sbom.sbom_document(
        profile_name="p", image=sbom.ImageIdentity("localhost/img", "t", f"sha256:{digest}", "arm64"),
        pins=list(reversed(pins)), source_date_epoch=epoch, tool_version="0", licenses=stated,
        patch_set=("patch-set:p", digest),
    )
    assert readable_json_bytes(again) == readable_json_bytes(document)


@given(st.binary(max_size=2000))
def test_license_parser_never_raises_and_states_only_spdx(content: bytes) -> None:
    stated = license_from_metadata(content)
    if stated.declared is not None:
        assert canonicalize_license_expression(stated.declared) == stated.declared
    assert len(stated.statement) <= 200


@pytest.mark.parametrize(
    ("metadata", "declared"),
    [
        (b"Metadata-Version: 2.4\nLicense-Expression: mit OR apache-2.0\nLicense: ignored\n", "MIT OR Apache-2.0"),
        (b"Metadata-Version: 2.1\nLicense: BSD-3-Clause\n", "BSD-3-Clause"),
        (b"Metadata-Version: 2.1\nLicense: Apache 2.0\n", None),  # words, not an SPDX expression
        (b"Metadata-Version: 2.1\nClassifier: License :: OSI Approved :: MIT License\n", "MIT"),
        (b"Metadata-Version: 2.1\nClassifier: License :: OSI Approved :: BSD License\n", None),  # which BSD?
        (b"Metadata-Version: 2.1\nClassifier: License :: OSI Approved :: MIT License\n"
         b"Classifier: License :: OSI Approved :: Apache Software License\n", None),  # OR or AND?
        (b"Metadata-Version: 2.1\nLicense: UNKNOWN\n", None),
    ],
)
def test_license_sources_in_order_of_authority(metadata: bytes, declared: str | None) -> None:
    stated = license_from_metadata(metadata)
    assert stated.declared == declared
    if declared is None and b"License" in metadata and b"UNKNOWN" not in metadata:
        assert stated.statement  # the words are kept for the comment


@given(version=_DEB_VERSION, name=_NAME)
def test_deb_purl_round_trips_its_version(version: str, name: str) -> None:
    locator = sbom.purl(DebPin(f"{name}:arm64", name, version, "arm64", "0" * 64, 1, ("https://deb.invalid/x.deb",)))
    head, _, qualifiers = locator.partition("?")
    package, _, encoded = head.removeprefix("pkg:deb/debian/").partition("@")
    assert (package, urllib.parse.unquote(encoded), qualifiers) == (name, version, "arch=arm64")
    assert not set(encoded) & set("@?#/:+ ")


@given(content=st.binary(max_size=400))
def test_unreadable_artifacts_state_no_license(content: bytes) -> None:
    with tempfile.NamedTemporaryFile() as handle:
        handle.write(content)
        handle.flush()
        for read in (wheel_license, sdist_license):
            stated = read(Path(handle.name))
            assert stated.declared is None or canonicalize_license_expression(stated.declared) == stated.declared
