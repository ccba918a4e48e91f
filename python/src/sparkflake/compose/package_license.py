"""The license a Python distribution states about itself, for the SBOM.

Read from the core metadata (packaging.python.org, core-metadata): a wheel's
``*.dist-info/METADATA``, an sdist's top-level ``PKG-INFO``. In order of authority:

1. ``License-Expression`` (metadata 2.4, PEP 639): an SPDX expression;
2. ``License``, when its text is itself a valid SPDX expression ("MIT", "Apache-2.0");
3. the ``License ::`` trove classifiers, when exactly one names a license with an SPDX id
   (several classifiers do not say whether they are alternatives or all apply).

An expression is accepted only as packaging.licenses canonicalizes it (the SPDX license list
packaging ships). What states no SPDX license gives ``declared = None`` and the stated text,
cut short, as ``statement``: the SBOM says NOASSERTION and carries the words in a comment.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

from .wheel_archive import WHEEL_ARCHIVE_ERRORS

METADATA_LIMIT = 1024 * 1024
STATEMENT_LIMIT = 200
_SDIST_SCAN_MEMBERS = 64  # PKG-INFO is among the first members of an sdist built by any backend

# Trove license classifiers with exactly one SPDX id (pypi.org/classifiers, SPDX license list).
CLASSIFIER_SPDX = {
    "License :: OSI Approved :: Apache Software License": "Apache-2.0",
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: MIT No Attribution License (MIT-0)": "MIT-0",
    "License :: OSI Approved :: BSD License": None,  # which BSD is not said
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.0-or-later",
    "License :: OSI Approved :: GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "License :: OSI Approved :: GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "License :: OSI Approved :: GNU General Public License v2 (GPLv2)": "GPL-2.0-only",
    "License :: OSI Approved :: GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "License :: OSI Approved :: GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "License :: OSI Approved :: GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "License :: OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
    "License :: OSI Approved :: zlib/libpng License": "Zlib",
    "License :: OSI Approved :: Historical Permission Notice and Disclaimer (HPND)": "HPND",
    "License :: OSI Approved :: Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "License :: OSI Approved :: Academic Free License (AFL)": None,
    "License :: OSI Approved :: Eclipse Public License 2.0 (EPL-2.0)": "EPL-2.0",
    "License :: OSI Approved :: Universal Permissive License (UPL)": "UPL-1.0",
    "License :: CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
}


@dataclass(frozen=True)
class StatedLicense:
    declared: str | None  # a canonical SPDX license expression
    statement: str  # what the metadata says, short (for a comment), "" if nothing

    @classmethod
    def none(cls) -> StatedLicense:
        return cls(None, "")


def _spdx(text: str) -> str | None:
    try:
        return str(canonicalize_license_expression(text.strip()))
    except (InvalidLicenseExpression, ValueError):
        return None


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= STATEMENT_LIMIT else flat[: STATEMENT_LIMIT - 1] + "…"


def license_from_metadata(content: bytes) -> StatedLicense:
    """The license of one core-metadata document (METADATA or PKG-INFO bytes)."""
    # the headers end at the first empty line; the body (the long description, often
    # most of the file) is not parsed
    head = content[:METADATA_LIMIT].replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
    headers = BytesHeaderParser().parsebytes(head + b"\n\n")
    expression = headers.get("License-Expression")
    if expression:
        declared = _spdx(str(expression))
        return StatedLicense(declared, "" if declared else _short(f"License-Expression: {expression}"))
    text = str(headers.get("License") or "").strip()
    if text and text.upper() not in ("UNKNOWN", "NONE"):
        declared = _spdx(text) if len(text) <= STATEMENT_LIMIT else None
        if declared:
            return StatedLicense(declared, "")
    classifiers = [str(c).strip() for c in headers.get_all("Classifier") or () if str(c).startswith("License ::")]
    ids = {CLASSIFIER_SPDX.get(classifier) for classifier in classifiers}
    if len(classifiers) == 1 and None not in ids:
        return StatedLicense(ids.pop(), "")
    stated = [f"License: {text}"] if text and text.upper() not in ("UNKNOWN", "NONE") else []
    stated += classifiers
    return StatedLicense(None, _short("; ".join(stated)))


def wheel_license(path: Path) -> StatedLicense:
    """From the wheel's ``<name>-<version>.dist-info/METADATA`` (the only top-level dist-info)."""
    return _stated_license(_wheel_metadata, path)


def sdist_license(path: Path) -> StatedLicense:
    """From the sdist's ``<name>-<version>/PKG-INFO``, reading the stream only as far as it."""
    return _stated_license(_sdist_metadata, path)


def _stated_license(read_metadata: Callable[[Path], bytes | None], path: Path) -> StatedLicense:
    """The license of the metadata ``read_metadata`` finds in the artifact at ``path`` (None:
    it holds no such document)."""
    try:
        metadata = read_metadata(path)
    except (tarfile.TarError, *WHEEL_ARCHIVE_ERRORS) as exc:
        # the build's other stages refuse an unreadable artifact by name; the SBOM says so
        return StatedLicense(None, _short(f"metadata unreadable: {exc}"))
    return StatedLicense.none() if metadata is None else license_from_metadata(metadata)


def _wheel_metadata(path: Path) -> bytes | None:
    with zipfile.ZipFile(path) as archive:
        candidates = [
            info for info in archive.infolist()
            if info.filename.count("/") == 1 and info.filename.endswith(".dist-info/METADATA")
        ]
        if len(candidates) != 1 or candidates[0].file_size > METADATA_LIMIT:
            return None
        with archive.open(candidates[0]) as handle:
            return handle.read(METADATA_LIMIT)


def _sdist_metadata(path: Path) -> bytes | None:
    with tarfile.open(path, "r:*") as archive:
        for _ in range(_SDIST_SCAN_MEMBERS):
            member = archive.next()
            if member is None:
                break
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "PKG-INFO" and member.isfile() and member.size <= METADATA_LIMIT:
                handle = archive.extractfile(member)
                if handle is not None:
                    return handle.read(METADATA_LIMIT)
    return None
