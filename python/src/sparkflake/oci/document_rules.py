"""What the image spec requires of a parsed index, manifest, config and descriptor beyond
being JSON, checked where ``reader`` reads them so that nothing an OCI or Go reader would
refuse is audited as an image (the JSON itself is read strictly by ``core.documents``).

- ``schemaVersion`` of an index and a manifest is 2 (image-spec manifest.md and
  image-index.md: a required property that must be 2); 1 is Docker's signed v1 schema,
  which none of the tools here reads as the image it audits.
- A descriptor's optional ``data`` (descriptor.md: the referenced content embedded as
  base64, its decoded bytes identical to that content, to be checked against the digest
  and size) is refused when it decodes to other bytes: a reader taking the embedded bytes
  would get content nobody verified.
- A config's ``rootfs.type`` is "layers" (config.md: required to be ``layers``, and an
  unknown value an error when an image is verified or unpacked).
- A docker-archive's ``RepoTags`` are strings (docker's manifest.json: ``[]string``).
- An index's and a manifest's ``mediaType`` is a string and their ``annotations`` a map of
  string to string (image-spec manifest.md, image-index.md, annotations.md); a config's
  ``config`` is an object and its ``Labels`` a map of string to string (config.md; Go's
  ``v1.ImageConfig`` decodes ``Labels`` as ``map[string]string``). A Go reader refuses
  any other type there; a null is Go's nil, taken as absent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from ..core.errors import InputError

SCHEMA_VERSION = 2
ROOTFS_TYPE = "layers"


def _refusal(where: str, problem: str) -> InputError:
    return InputError(f"{where}: {problem}", check_id="document.parse")


def require_schema_version(document: dict[str, Any], where: str) -> None:
    version = document.get("schemaVersion")
    if "schemaVersion" not in document:
        raise _refusal(where, f"schemaVersion: missing (the image spec requires {SCHEMA_VERSION})")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise _refusal(where, f"schemaVersion: expected {SCHEMA_VERSION}, got {version!r}")


def require_consistent_data(record: dict[str, Any], where: str) -> None:
    """A descriptor's embedded ``data``, where it has one, is the content it describes."""
    if "data" not in record:
        return
    data = record["data"]
    if not isinstance(data, str):
        raise _refusal(where, "data: expected base64 text")
    try:
        content = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _refusal(where, "data: not base64 (RFC 4648 §4, padded)") from None
    if len(content) != record.get("size"):
        raise _refusal(where, f"data: holds {len(content)} bytes, the descriptor's size is {record.get('size')!r}")
    actual = "sha256:" + hashlib.sha256(content).hexdigest()
    if actual != record.get("digest"):
        raise _refusal(where, f"data: hashes to {actual}, the descriptor's digest is {record.get('digest')!r}")


def require_layers_rootfs(config: dict[str, Any], where: str) -> None:
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict):
        raise _refusal(where, "rootfs: expected an object with type and diff_ids")
    if rootfs.get("type") != ROOTFS_TYPE:
        raise _refusal(where, f"rootfs.type: expected {ROOTFS_TYPE!r}, got {rootfs.get('type')!r}")


def require_descriptor_fields(document: dict[str, Any], where: str) -> None:
    """An index's or a manifest's own ``mediaType`` and ``annotations``."""
    media_type = document.get("mediaType")
    if media_type is not None and not isinstance(media_type, str):
        raise _refusal(where, f"mediaType: expected a string, got {media_type!r}")
    _require_string_map(document.get("annotations"), where, "annotations")


def require_config_fields(config: dict[str, Any], where: str) -> None:
    """A config's ``config`` object, its ``Labels`` and its ``Env``."""
    execution = config.get("config")
    if execution is None:
        return
    if not isinstance(execution, dict):
        raise _refusal(where, f"config: expected an object, got {type(execution).__name__}")
    _require_string_map(execution.get("Labels"), where, "config.Labels")
    env = execution.get("Env")
    if env is not None and not isinstance(env, list):
        raise _refusal(where, f"config.Env: expected an array of strings, got {type(env).__name__}")
    for position, item in enumerate(env or []):
        if not isinstance(item, str):
            raise _refusal(where, f"config.Env[{position}]: expected a string, got {item!r}")


def _require_string_map(value: object, where: str, place: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise _refusal(where, f"{place}: expected an object of strings, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise _refusal(where, f"{place}.{key}: expected a string, got {item!r}")


def docker_repo_tags(entry: dict[str, Any], where: str) -> list[str]:
    """The ``RepoTags`` of a docker-archive's manifest.json entry (absent or null: none)."""
    tags = entry.get("RepoTags")
    if tags is None:
        return []
    if not isinstance(tags, list):
        raise _refusal(where, "RepoTags: expected a list of strings")
    for position, tag in enumerate(tags):
        if not isinstance(tag, str):
            raise _refusal(where, f"RepoTags[{position}]: expected a string, got {tag!r}")
    return list(tags)
