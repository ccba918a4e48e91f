"""Evidence records and the status of a profile's images.

One status vocabulary for every claim: ``qualified``, ``implemented``, ``research-only``,
``unsupported``. A status is only ever carried by an evidence record, and a record binds it
to an exact image (manifest digest + config digest) and an exact configuration (the hash of
the resolved launch settings). A claim transfers to an image only when both digests are
equal; to a launch only when the settings hash is equal too. A rebuilt image with any other
digest keeps the profile's own declared status (normally ``implemented``), never the claim.

Record format (JSON, ``schema = 1``)::

    {
      "schema": 1,
      "kind": "sparkflake.evidence",
      "profile": "glm53-dflash7",
      "status": "qualified",
      "origin": "local" | "external",
      "image": {"manifest_digest": "sha256:…", "config_digest": "sha256:…",
                "reference": "optional registry reference"},
      "settings_hash": "sha256:…" | null,      # null: the claim is about the image alone
      "measured": [{"what": "…", "value": …, "unit": "…"}],
      "recorded": "YYYY-MM-DD",
      "source": "where the claim comes from (document, run id)"
    }
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.canonical_json import readable_json_bytes
from ..core.digest import is_digest
from ..core.documents import objects_of_array, parse_json, read_regular_file
from ..core.errors import InputError
from ..core.status import STATUSES
from ..oci.digests_file import RecordedDigests, read_digests_file

SCHEMA_VERSION = 1
RECORD_KIND = "sparkflake.evidence"
ORIGINS = ("local", "external")

_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_RECORD_KEYS = {
    "schema",
    "kind",
    "profile",
    "status",
    "origin",
    "image",
    "settings_hash",
    "measured",
    "recorded",
    "source",
}
_IMAGE_KEYS = {"manifest_digest", "config_digest", "reference"}
_MEASUREMENT_KEYS = {"what", "value", "unit"}


@dataclass(frozen=True)
class Measurement:
    what: str
    value: str | int | float | bool
    unit: str = ""


@dataclass(frozen=True)
class EvidenceRecord:
    profile: str
    status: str
    origin: str
    manifest_digest: str
    config_digest: str
    settings_hash: str | None
    measured: tuple[Measurement, ...]
    recorded: str
    source: str
    reference: str = ""
    path: str = field(default="", compare=False)

    def as_record(self) -> dict[str, Any]:
        image: dict[str, str] = {
            "config_digest": self.config_digest,
            "manifest_digest": self.manifest_digest,
        }
        if self.reference:
            image["reference"] = self.reference
        return {
            "schema": SCHEMA_VERSION,
            "kind": RECORD_KIND,
            "profile": self.profile,
            "status": self.status,
            "origin": self.origin,
            "image": image,
            "settings_hash": self.settings_hash,
            "measured": [
                {"what": m.what, "value": m.value, "unit": m.unit} for m in self.measured
            ],
            "recorded": self.recorded,
            "source": self.source,
        }


def dump_record(record: EvidenceRecord) -> bytes:
    return readable_json_bytes(record.as_record())


def parse_record(text: str | bytes, where: str) -> EvidenceRecord:
    """Parse and validate one evidence record; ``where`` names the file in errors."""
    document = parse_json(text, where)  # strict and bounded as every document we are handed
    if not isinstance(document, dict):
        raise InputError(f"{where}: $: expected a JSON object, got {_type_name(document)}")
    _refuse_unknown(document, _RECORD_KEYS, where, "$")
    if document.get("schema") != SCHEMA_VERSION:
        raise InputError(
            f"{where}: $.schema: expected {SCHEMA_VERSION}, got {document.get('schema')!r}"
        )
    if document.get("kind") != RECORD_KIND:
        raise InputError(f"{where}: $.kind: expected {RECORD_KIND!r}, got {document.get('kind')!r}")
    profile = _string(document, "profile", where, "$")
    status = _string(document, "status", where, "$")
    if status not in STATUSES:
        raise InputError(f"{where}: $.status: expected one of {', '.join(STATUSES)}, got {status!r}")
    origin = _string(document, "origin", where, "$")
    if origin not in ORIGINS:
        raise InputError(f"{where}: $.origin: expected one of {', '.join(ORIGINS)}, got {origin!r}")
    image = document.get("image")
    if not isinstance(image, dict):
        raise InputError(f"{where}: $.image: expected an object, got {_type_name(image)}")
    _refuse_unknown(image, _IMAGE_KEYS, where, "$.image")
    manifest_digest = _digest(image, "manifest_digest", where, "$.image")
    config_digest = _digest(image, "config_digest", where, "$.image")
    reference = image.get("reference", "")
    if not isinstance(reference, str):
        raise InputError(f"{where}: $.image.reference: expected a string")
    settings_hash = document.get("settings_hash")
    if settings_hash is not None and (
        not is_digest(settings_hash)
    ):
        raise InputError(
            f"{where}: $.settings_hash: expected null or sha256:<64 lowercase hex>, "
            f"got {settings_hash!r}"
        )
    measured = []
    for place, entry in objects_of_array(document.get("measured", []), where, "$.measured"):
        _refuse_unknown(entry, _MEASUREMENT_KEYS, where, place)
        what = _string(entry, "what", where, place)
        value = entry.get("value")
        if isinstance(value, (dict, list)) or value is None:
            raise InputError(f"{where}: {place}.value: expected a string, number or boolean")
        unit = entry.get("unit", "")
        if not isinstance(unit, str):
            raise InputError(f"{where}: {place}.unit: expected a string")
        measured.append(Measurement(what, value, unit))
    recorded = _string(document, "recorded", where, "$")
    if not _DATE.fullmatch(recorded):
        raise InputError(f"{where}: $.recorded: expected YYYY-MM-DD, got {recorded!r}")
    source = _string(document, "source", where, "$")
    return EvidenceRecord(
        profile=profile,
        status=status,
        origin=origin,
        manifest_digest=manifest_digest,
        config_digest=config_digest,
        settings_hash=settings_hash,
        measured=tuple(measured),
        recorded=recorded,
        source=source,
        reference=reference,
        path=where,
    )


def load_evidence_dir(directory: str | Path) -> list[EvidenceRecord]:
    """Every ``*.json`` record in ``directory`` (sorted by name); a missing dir has none."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        text = read_regular_file(path, "an evidence record")
        records.append(parse_record(text, str(path)))
    return records


@dataclass(frozen=True)
class ClaimAssessment:
    """Whether an evidence record's claim transfers to the image built here, and if not why."""

    record: EvidenceRecord
    applies: bool
    reason: str


@dataclass(frozen=True)
class ProfileStatus:
    """A profile's declared status and the status its built image has given the evidence
    records here (``profile_status``), with each record's assessment."""

    profile: str
    declared_status: str
    effective_status: str
    built: RecordedDigests | None
    assessments: tuple[ClaimAssessment, ...]

    def as_record(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "declared_status": self.declared_status,
            "effective_status": self.effective_status,
            "built": None
            if self.built is None
            else {
                "manifest_digest": self.built.manifest_digest,
                "config_digest": self.built.config_digest,
                "where": self.built.where,
            },
            "evidence": [
                {
                    "path": a.record.path,
                    "status": a.record.status,
                    "origin": a.record.origin,
                    "manifest_digest": a.record.manifest_digest,
                    "config_digest": a.record.config_digest,
                    "settings_hash": a.record.settings_hash,
                    "applies": a.applies,
                    "reason": a.reason,
                }
                for a in self.assessments
            ],
        }


_STATUS_RANK = {"unsupported": 0, "research-only": 1, "implemented": 2, "qualified": 3}


def assess_claim(
    record: EvidenceRecord, built: RecordedDigests | None, settings_hash: str | None = None
) -> ClaimAssessment:
    """Does ``record``'s claim transfer to ``built`` (and to a launch with ``settings_hash``)?"""
    if built is None:
        return ClaimAssessment(record, False, "no image of this profile has been built here")
    if record.manifest_digest != built.manifest_digest:
        return ClaimAssessment(
            record,
            False,
            f"manifest digest differs: evidence {record.manifest_digest}, "
            f"built {built.manifest_digest}",
        )
    if record.config_digest != built.config_digest:
        return ClaimAssessment(
            record,
            False,
            f"config digest (image ID) differs: evidence {record.config_digest}, "
            f"built {built.config_digest}",
        )
    if record.settings_hash is not None and settings_hash is not None:
        if record.settings_hash != settings_hash:
            return ClaimAssessment(
                record,
                False,
                f"resolved settings differ: evidence {record.settings_hash}, "
                f"launch {settings_hash}",
            )
    return ClaimAssessment(record, True, "manifest and config digests equal")


def profile_status(
    profile: str,
    declared_status: str,
    built: RecordedDigests | None,
    records: Iterable[EvidenceRecord],
    settings_hash: str | None = None,
) -> ProfileStatus:
    """The effective status of ``profile``'s built image given the evidence.

    The declared status (from the profile) is the floor for our own build; a record raises it
    only when its claim applies; a ``research-only`` or ``unsupported`` profile is never
    raised above its declaration by evidence about another profile.
    """
    if declared_status not in STATUSES:
        raise InputError(
            f"profile {profile}: status: expected one of {', '.join(STATUSES)}, "
            f"got {declared_status!r}"
        )
    assessments = []
    for record in records:
        if record.profile != profile:
            continue
        assessments.append(assess_claim(record, built, settings_hash))
    effective = declared_status
    for assessment in assessments:
        if assessment.applies and _STATUS_RANK[assessment.record.status] > _STATUS_RANK[effective]:
            effective = assessment.record.status
    return ProfileStatus(profile, declared_status, effective, built, tuple(assessments))


def load_built_image(digests_json: str | Path) -> RecordedDigests | None:
    """The digests of a build output (``digests.json``), or None when there is no build."""
    path = Path(digests_json)
    if not path.is_file():
        return None
    recorded = read_digests_file(path)
    recorded.manifest()  # a launch and a claim name the image by its manifest digest too
    return recorded


def _refuse_unknown(mapping: Mapping[str, Any], known: set[str], where: str, place: str) -> None:
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise InputError(
            f"{where}: {place}.{unknown[0]}: unknown key (expected one of {', '.join(sorted(known))})"
        )


def _string(mapping: Mapping[str, Any], key: str, where: str, place: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: {place}.{key}: expected a non-empty string, got {value!r}")
    return value


def _digest(mapping: Mapping[str, Any], key: str, where: str, place: str) -> str:
    value = mapping.get(key)
    if not is_digest(value):
        raise InputError(
            f"{where}: {place}.{key}: expected sha256:<64 lowercase hex digits>, got {value!r}"
        )
    return value


def _type_name(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"
