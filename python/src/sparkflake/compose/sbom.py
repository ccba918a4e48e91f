"""The image's SBOM: an SPDX 2.3 JSON document made from the lock and the assembly.

One package for the image (purpose CONTAINER, its checksum the manifest digest), one per
input the composition builds from (each wheel and Debian package: the image CONTAINS it;
the vLLM source, an sdist or a git commit, whose patched files the image contains: CONTAINS;
the patch set: the image is GENERATED_FROM it). Each input package has its name, version,
purl, download location, file name and SHA-256 from the lock, the layer it went into (from
the assembly's grouping), and the license the artifact states (package_license): Debian
packages state theirs in free-form copyright files, so theirs is NOASSERTION.

Deterministic: the same lock and image give the same bytes. ``created`` is the image's
SOURCE_DATE_EPOCH (the build's fixed epoch, the same instant as the image config's
``created``), never the wall clock; ``documentNamespace`` is derived from the profile and
the manifest digest. Field names and values: SPDX 2.3 spec, clauses 6-7 and 11 (checked by
spdx-tools' validator in the tests); purls: package-url spec (pypi names lowercase with
``-``; versions and qualifier values percent-encoded).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.digest import digest_hex
from ..core.timestamps import rfc3339
from ..lock.pins import DebPin, FilePin, GitPin, OciPin, Pin, SdistPin, WheelPin
from .package_license import (
    METADATA_LIMIT,
    StatedLicense,
    license_from_metadata,
    sdist_license,
    wheel_license,
)

SPDX_MEDIA_TYPE = "application/spdx+json"
SPDX_VERSION = "SPDX-2.3"
NAMESPACE_BASE = "https://sparkflake.dev/spdx"
IMAGE_ID = "SPDXRef-Image"
NOASSERTION = "NOASSERTION"
_ID_CHARS = re.compile(r"[^A-Za-z0-9.-]+")
_LICENSE_REF = re.compile(r"LicenseRef-[A-Za-z0-9.-]+")


@dataclass(frozen=True)
class ImageIdentity:
    repository: str  # e.g. localhost/sparkflake
    tag: str
    manifest_digest: str
    architecture: str  # OCI architecture, e.g. arm64


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _qualifiers(values: Mapping[str, str]) -> str:
    present = sorted((key, value) for key, value in values.items() if value)
    return ("?" + "&".join(f"{key}={_quote(value)}" for key, value in present)) if present else ""


def purl(pin: Pin, architecture: str = "") -> str:
    if isinstance(pin, WheelPin):
        return f"pkg:pypi/{pin.name.lower().replace('_', '-')}@{_quote(pin.version)}" + _qualifiers(
            {"file_name": pin.filename})
    if isinstance(pin, SdistPin):
        return f"pkg:pypi/{pin.distribution.lower().replace('_', '-')}@{_quote(pin.version)}" + _qualifiers(
            {"file_name": pin.filename})
    if isinstance(pin, DebPin):
        return f"pkg:deb/debian/{_quote(pin.package)}@{_quote(pin.version)}" + _qualifiers({"arch": pin.architecture})
    if isinstance(pin, GitPin):
        return f"pkg:generic/{_quote(pin.name)}@{pin.rev}" + _qualifiers({"vcs_url": f"git+{pin.urls[0]}@{pin.rev}"})
    if isinstance(pin, FilePin):
        return f"pkg:generic/{_quote(pin.name)}" + _qualifiers(
            {"checksum": f"sha256:{pin.sha256}", "download_url": pin.urls[0] if pin.urls else ""})
    if isinstance(pin, OciPin):
        digest = pin.manifest_digest or pin.index_digest or ""
        name = pin.repository.rsplit("/", 1)[-1]
        return f"pkg:oci/{_quote(name)}@{_quote(digest)}" + _qualifiers(
            {"arch": architecture, "repository_url": pin.repository})
    raise TypeError(f"no purl for a {type(pin).__name__}")


def image_purl(image: ImageIdentity) -> str:
    name = image.repository.rsplit("/", 1)[-1]
    return f"pkg:oci/{_quote(name)}@{_quote(image.manifest_digest)}" + _qualifiers(
        {"arch": image.architecture, "repository_url": image.repository, "tag": image.tag})


def _source_url(pin: Pin) -> str | None:
    urls = getattr(pin, "urls", ())
    return urls[0] if urls else None


def _names_a_public_host(url: str) -> bool:
    """A URL others can download from: a DNS name, not an IP literal, localhost or a
    file path (a local mirror is where this build fetched, not a download location)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(host) and host != "localhost" and "." in host
    return False


def _download_location(pin: Pin) -> str:
    url = _source_url(pin)
    if url is None or not _names_a_public_host(url):
        return NOASSERTION
    return f"git+{url}@{pin.rev}" if isinstance(pin, GitPin) else url


def _version(pin: Pin) -> str | None:
    if isinstance(pin, GitPin):
        return pin.rev
    if isinstance(pin, OciPin):
        return pin.manifest_digest or pin.index_digest
    return getattr(pin, "version", None)


def _package_name(pin: Pin) -> str:
    if isinstance(pin, DebPin):
        return pin.package
    if isinstance(pin, SdistPin):
        return pin.distribution
    return pin.name


_PURPOSE = {"wheel": "LIBRARY", "deb": "LIBRARY", "sdist": "SOURCE", "git": "SOURCE", "file": "FILE", "oci": "CONTAINER"}


def _package(pin: Pin, spdx_id: str, stated: StatedLicense, layer: str | None, role: str | None,
             architecture: str) -> dict[str, object]:
    package: dict[str, object] = {
        "SPDXID": spdx_id,
        "name": _package_name(pin),
        "downloadLocation": _download_location(pin),
        "filesAnalyzed": False,
        "primaryPackagePurpose": _PURPOSE[pin.kind],
        "licenseConcluded": NOASSERTION,
        "licenseDeclared": stated.declared or NOASSERTION,
        "copyrightText": NOASSERTION,
        "externalRefs": [
            {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl(pin, architecture)}
        ],
    }
    version = _version(pin)
    if version:
        package["versionInfo"] = version
    filename = getattr(pin, "filename", None)
    if filename:
        package["packageFileName"] = filename
    sha256 = getattr(pin, "sha256", None)
    if sha256:
        package["checksums"] = [{"algorithm": "SHA256", "checksumValue": sha256}]
    if isinstance(pin, GitPin):
        package["sourceInfo"] = f"git commit {pin.rev}, tree {pin.tree}, NAR {pin.nar_hash}"
    if stated.statement:
        package["licenseComments"] = f"the package's metadata states: {stated.statement}"
    notes = [f"lock input {pin.name} ({pin.kind})"]
    url = _source_url(pin)
    if url is not None and package["downloadLocation"] == NOASSERTION:
        notes.append(f"fetched from {url}")
    if role:
        notes.append(f"role {role}")
    if layer:
        notes.append(f"image layer {layer}")
    package["comment"] = "; ".join(notes)
    return package


def stated_licenses(pins: Sequence[Pin], paths: Mapping[str, Path],
                    installed_metadata: Mapping[str, Path] | None = None) -> dict[str, StatedLicense]:
    """The license each wheel and sdist states (input name -> license): from the METADATA
    file the assembly installed (``installed_metadata``, input name -> path; a small file
    read), else from the fetched artifact (``paths``; a wheel's zip directory is read, which
    for torch's thousands of members costs more)."""
    installed_metadata = installed_metadata or {}
    found: dict[str, StatedLicense] = {}
    for pin in pins:
        installed = installed_metadata.get(pin.name)
        if isinstance(pin, WheelPin) and installed is not None and installed.is_file():
            found[pin.name] = license_from_metadata(installed.read_bytes()[:METADATA_LIMIT])
            continue
        path = paths.get(pin.name)
        if path is None:
            continue
        if isinstance(pin, WheelPin):
            found[pin.name] = wheel_license(path)
        elif isinstance(pin, SdistPin):
            found[pin.name] = sdist_license(path)
    return found


def dist_info_name(wheel: WheelPin) -> str:
    """The wheel's ``.dist-info`` directory, as its file name spells the distribution and
    version (the wheel spec, "File name convention"; installers keep the name)."""
    distribution, version = wheel.filename.split("-")[:2]
    return f"{distribution}-{version}.dist-info"


def sbom_document(
    *,
    profile_name: str,
    image: ImageIdentity,
    pins: Sequence[Pin],
    source_date_epoch: int,
    tool_version: str,
    licenses: Mapping[str, StatedLicense] | None = None,
    layer_of: Mapping[str, str] | None = None,
    roles: Mapping[str, str] | None = None,
    patch_set: tuple[str, str] | None = None,
    source_name: str | None = None,
) -> dict[str, object]:
    """The SPDX document; ``pins`` are the inputs in the image, ``layer_of`` and ``roles``
    map input names to the layer they went into and their role in the profile,
    ``patch_set`` is (name, sha256) and ``source_name`` the input whose patched files
    form the top layer."""
    licenses = licenses or {}
    layer_of = layer_of or {}
    roles = roles or {}
    image_package: dict[str, object] = {
        "SPDXID": IMAGE_ID,
        "name": image.repository,
        "versionInfo": image.tag,
        "downloadLocation": NOASSERTION,
        "filesAnalyzed": False,
        "primaryPackagePurpose": "CONTAINER",
        "checksums": [{"algorithm": "SHA256", "checksumValue": digest_hex(image.manifest_digest)}],
        "licenseConcluded": NOASSERTION,
        "licenseDeclared": NOASSERTION,
        "copyrightText": NOASSERTION,
        "externalRefs": [
            {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": image_purl(image)}
        ],
        "comment": f"OCI image manifest {image.manifest_digest} of profile {profile_name}",
    }
    packages = [image_package]
    relationships = [
        {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": IMAGE_ID}
    ]
    used: set[str] = {IMAGE_ID}
    for pin in sorted(pins, key=lambda p: (p.kind, p.name)):
        base = f"SPDXRef-{pin.kind}-" + _ID_CHARS.sub("-", pin.name).strip("-")
        spdx_id, counter = base, 1
        while spdx_id in used:
            counter += 1
            spdx_id = f"{base}-{counter}"
        used.add(spdx_id)
        packages.append(_package(pin, spdx_id, licenses.get(pin.name, StatedLicense.none()),
                                 layer_of.get(pin.name), roles.get(pin.name), image.architecture))
        relationships.append({"spdxElementId": IMAGE_ID, "relationshipType": "CONTAINS", "relatedSpdxElement": spdx_id})
        if pin.name == source_name:
            packages[-1]["comment"] = f"{packages[-1]['comment']}; its patched package files are the top layer"
    if patch_set is not None:
        name, sha256 = patch_set
        packages.append({
            "SPDXID": "SPDXRef-patch-set",
            "name": name,
            "downloadLocation": NOASSERTION,
            "filesAnalyzed": False,
            "primaryPackagePurpose": "SOURCE",
            "checksums": [{"algorithm": "SHA256", "checksumValue": sha256}],
            "licenseConcluded": NOASSERTION,
            "licenseDeclared": NOASSERTION,
            "copyrightText": NOASSERTION,
            "comment": "the anchored patches applied to the vLLM source (patch-set sha256, docs/inputs.md)",
        })
        relationships.append(
            {"spdxElementId": IMAGE_ID, "relationshipType": "GENERATED_FROM", "relatedSpdxElement": "SPDXRef-patch-set"}
        )
    document: dict[str, object] = {
        "spdxVersion": SPDX_VERSION,
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"sparkflake-{profile_name}",
        "documentNamespace": f"{NAMESPACE_BASE}/{_quote(profile_name)}/{digest_hex(image.manifest_digest)}",
        "creationInfo": {
            "created": rfc3339(source_date_epoch),
            "creators": [f"Tool: sparkflake-{tool_version}"],
            "comment": "created is the image's SOURCE_DATE_EPOCH, not the time of the build",
        },
        "packages": packages,
        "relationships": relationships,
    }
    extracted = _extracted_licenses(packages)
    if extracted:
        document["hasExtractedLicensingInfos"] = extracted
    return document


def _extracted_licenses(packages: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """A LicenseRef- a package declares (PEP 639 allows them) must be defined in the
    document (SPDX 2.3, clause 10); its text is not in the metadata, so the definition
    says who declares it."""
    declaring: dict[str, list[str]] = {}
    for package in packages:
        for ref in _LICENSE_REF.findall(str(package.get("licenseDeclared", ""))):
            declaring.setdefault(ref, []).append(str(package["name"]))
    return [
        {
            "licenseId": ref,
            "name": ref.removeprefix("LicenseRef-"),
            "extractedText": f"{ref}: declared in the core metadata (License-Expression) of "
            f"{', '.join(names)}; the metadata carries no license text",
        }
        for ref, names in sorted(declaring.items())
    ]
