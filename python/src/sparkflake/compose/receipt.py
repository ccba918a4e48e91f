"""Build receipts: in-toto Statement v1 with a SLSA provenance v1 predicate.

Two statements are made per image, because a file inside an image cannot name the digest
of the manifest that contains it (the manifest hashes the layer that holds the file):

- the *in-image receipt* (``/etc/sparkflake/receipt.json``, top layer) has as subjects
  the diffIDs of every layer below the top layer, and as byproducts both manifests and
  the patch set; it binds everything the image is built from except its own layer, whose
  content the overlay manifest describes file by file;
- the *full receipt* (``receipt.json`` next to the image) is the same predicate with the
  image manifest digest as subject and, added to the byproducts, every layer's diffID and
  blob digest, the config digest, the manifest digest and the sha256 of the in-image
  receipt, so it can be re-checked against an image (``sparkflake receipt verify``).

Labels live in the config, so neither the labels nor the in-image receipt contain the
config digest; the full receipt does.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.canonical_json import readable_json_bytes
from ..core.digest import is_digest
from ..core.documents import objects_of_array, parse_json_object, read_regular_file
from ..core.errors import InputError
from ..oci.media_types import OCI_CONFIG, OCI_MANIFEST
from .sbom import SPDX_MEDIA_TYPE

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://sparkflake.dev/build/runtime-composition/v1"
BUILDER_ID = "https://sparkflake.dev/builder/sparkflake-build"

# byproduct names (stable: receipt verification looks them up by name)
RETAINED_NATIVE = "retained-native-manifest"
OVERLAY = "source-overlay-manifest"
PATCH_SET = "patch-set"
IN_IMAGE_RECEIPT = "in-image-receipt"
CONFIG = "image-config"
MANIFEST = "image-manifest"
LAYER_PREFIX = "layer"
SBOM = "sbom"  # the SPDX document written beside the image
SBOM_ARTIFACT = "sbom-artifact-manifest"  # the OCI artifact carrying it, subject = the image
# what `sparkflake runtime check` found, added to the full receipt after the build
# (runtime/receipt_record.py): never part of the in-image statement
RUNTIME_CAPABILITIES = "runtime-capabilities"


@dataclass(frozen=True)
class ResolvedDependency:
    """One input of the build with its digest(s), e.g. ``{"sha256": "…"}``."""

    name: str
    uri: str
    digest: Mapping[str, str]
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def as_descriptor(self) -> dict[str, Any]:
        descriptor: dict[str, Any] = {"name": self.name, "digest": dict(sorted(self.digest.items()))}
        if self.uri:
            descriptor["uri"] = self.uri
        if self.annotations:
            descriptor["annotations"] = dict(self.annotations)
        return descriptor


RECEIPT_LIMIT = 16 * 1024 * 1024


def load_receipt(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A receipt file given on the command line (bounded, a JSON object)."""
    content = read_regular_file(path, "a receipt (JSON)", RECEIPT_LIMIT)
    return parse_json_object(content, os.fspath(path), "an in-toto statement object")


@dataclass(frozen=True)
class Byproduct:
    """One ``predicate.runDetails.byproducts`` item of a full receipt: its name, its sha256
    (hex) and, as read, the whole item (``annotations`` an object where present)."""

    name: str
    sha256: str
    item: Mapping[str, Any]


@dataclass(frozen=True)
class BuildReceipt:
    """A full receipt as read (``read_build_receipt``): every field its readers use checked
    once, with the JSON path of what is wrong. ``statement`` is the document as read, from
    which the in-image statement is derived."""

    where: str
    statement: dict[str, Any]
    subject_digests: tuple[str, ...]  # "sha256:<hex>", the first the image manifest's
    byproducts: tuple[Byproduct, ...]
    labels: Mapping[str, str]

    def byproduct(self, name: str) -> Byproduct | None:
        return next((item for item in self.byproducts if item.name == name), None)

    def layers(self) -> tuple[Byproduct, ...]:
        """The ``layer[N]`` byproducts, bottom layer first."""
        return tuple(item for item in self.byproducts if item.name.startswith(f"{LAYER_PREFIX}["))


def read_build_receipt(path: str | os.PathLike[str]) -> BuildReceipt:
    """OUT/receipt.json of a build, or an ``InputError`` naming the file and the JSON path."""
    where = os.fspath(path)
    statement = load_receipt(path)
    for key, wanted in (("_type", STATEMENT_TYPE), ("predicateType", PREDICATE_TYPE)):
        if statement.get(key) != wanted:
            raise InputError(f"{where}: $.{key}: expected {wanted}, got {statement.get(key)!r}")
    subjects = [item for _, item in objects_of_array(statement.get("subject"), where, "$.subject")]
    if not subjects:
        raise InputError(f"{where}: $.subject: expected the image manifest digest, got an empty array")
    predicate = _object(statement.get("predicate"), where, "$.predicate")
    run_details = _object(predicate.get("runDetails"), where, "$.predicate.runDetails")
    byproducts = []
    for at, item in objects_of_array(run_details.get("byproducts"), where, "$.predicate.runDetails.byproducts"):
        name = item.get("name")
        if not isinstance(name, str):
            raise InputError(f"{where}: {at}.name: expected a string, got {name!r}")
        _object(item.get("annotations", {}), where, f"{at}.annotations")
        byproducts.append(Byproduct(name, _sha256_of(item, where, at), item))
    for index, layer in enumerate(item for item in byproducts if item.name.startswith(f"{LAYER_PREFIX}[")):
        diff_id = layer.item.get("annotations", {}).get("diff_id")
        if layer.name != f"{LAYER_PREFIX}[{index}]" or not is_digest(diff_id):
            raise InputError(f"{where}: byproduct {layer.name!r}: expected {LAYER_PREFIX}[{index}] with "
                             f"annotations.diff_id sha256:<64 lowercase hex digits>, got {diff_id!r}")
    build_definition = _object(predicate.get("buildDefinition"), where, "$.predicate.buildDefinition")
    internal = _object(build_definition.get("internalParameters"), where, "$.predicate.buildDefinition.internalParameters")
    labels = _object(internal.get("labels"), where, "$.predicate.buildDefinition.internalParameters.labels")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise InputError(f"{where}: $.predicate.buildDefinition.internalParameters.labels[{key!r}]: "
                             f"expected a string, got {value!r}")
    return BuildReceipt(
        where, statement,
        tuple(f"sha256:{_sha256_of(item, where, f'$.subject[{index}]')}" for index, item in enumerate(subjects)),
        tuple(byproducts), labels,
    )


def _object(value: object, where: str, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: {at}: expected an object, got {type(value).__name__}")
    return value


def _sha256_of(item: Mapping[str, Any], where: str, at: str) -> str:
    digest = _object(item.get("digest"), where, f"{at}.digest")
    value = digest.get("sha256")
    if not isinstance(value, str) or not is_digest(f"sha256:{value}"):
        raise InputError(f"{where}: {at}.digest.sha256: expected 64 lowercase hex digits, got {value!r}")
    return value


def sha256_hex(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def provenance_predicate(
    *,
    external_parameters: Mapping[str, Any],
    internal_parameters: Mapping[str, Any],
    resolved_dependencies: Sequence[ResolvedDependency],
    byproducts: Sequence[Mapping[str, Any]],
    builder_version: str,
) -> dict[str, Any]:
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": dict(external_parameters),
            "internalParameters": dict(internal_parameters),
            "resolvedDependencies": [dep.as_descriptor() for dep in resolved_dependencies],
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": {"sparkflake": builder_version}},
            "byproducts": [dict(item) for item in byproducts],
        },
    }


def in_image_statement(
    *, lower_diff_ids: Sequence[str], predicate: Mapping[str, Any]
) -> dict[str, Any]:
    """The statement stored inside the image: subjects are the lower layers' diffIDs."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": f"{LAYER_PREFIX}[{index}].diff_id", "digest": {"sha256": diff_id.removeprefix("sha256:")}}
            for index, diff_id in enumerate(lower_diff_ids)
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": copy.deepcopy(dict(predicate)),
    }


def full_statement(
    in_image: Mapping[str, Any],
    *,
    image_name: str,
    manifest_digest: str,
    config_digest: str,
    layers: Sequence[Mapping[str, Any]],
    builder_versions: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The statement written next to the image; subject = the image manifest digest.

    ``builder_versions`` (``builder_identity``: sparkflake, the interpreter, the libraries
    that decide image bytes) becomes ``runDetails.builder.version`` here only: the in-image
    statement names sparkflake's version alone, since its bytes are part of a layer and the
    digests must not depend on the builder's interpreter."""
    predicate = copy.deepcopy(dict(in_image["predicate"]))
    if builder_versions is not None:
        predicate["runDetails"]["builder"]["version"] = dict(builder_versions)
    byproducts = predicate["runDetails"]["byproducts"]
    byproducts.append(
        {
            "name": IN_IMAGE_RECEIPT,
            "uri": "file:///etc/sparkflake/receipt.json",
            "digest": {"sha256": sha256_hex(readable_json_bytes(in_image))},
        }
    )
    for index, layer in enumerate(layers):
        byproducts.append(
            {
                "name": f"{LAYER_PREFIX}[{index}]",
                "digest": {"sha256": str(layer["digest"]).removeprefix("sha256:")},
                "mediaType": layer["media_type"],
                "annotations": {
                    "diff_id": layer["diff_id"],
                    "size": layer["size"],
                },
            }
        )
    byproducts.append(
        {
            "name": CONFIG,
            "digest": {"sha256": config_digest.removeprefix("sha256:")},
            "mediaType": OCI_CONFIG,
        }
    )
    byproducts.append(
        {
            "name": MANIFEST,
            "digest": {"sha256": manifest_digest.removeprefix("sha256:")},
            "mediaType": OCI_MANIFEST,
        }
    )
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image_name, "digest": {"sha256": manifest_digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def add_sbom_byproducts(full: Mapping[str, Any], sbom: bytes, artifact_manifest_digest: str, file_name: str) -> None:
    """Record the SBOM's sha256 and its artifact manifest's digest in a full receipt (only
    there: the SBOM names the manifest digest, which the in-image receipt cannot know)."""
    byproducts = full["predicate"]["runDetails"]["byproducts"]
    byproducts.append(
        {"name": SBOM, "uri": file_name, "digest": {"sha256": sha256_hex(sbom)}, "mediaType": SPDX_MEDIA_TYPE}
    )
    byproducts.append(
        {
            "name": SBOM_ARTIFACT,
            "digest": {"sha256": artifact_manifest_digest.removeprefix("sha256:")},
            "mediaType": OCI_MANIFEST,
        }
    )


def byproduct(statement: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The byproduct named ``name`` of a statement we made or extend (full or in-image), or
    None; an item that is not an object names nothing."""
    items: object = statement
    for key in ("predicate", "runDetails", "byproducts"):
        items = items.get(key) if isinstance(items, dict) else None
    found = (item for item in items if isinstance(item, dict) and item.get("name") == name) if isinstance(items, list) else ()
    return next(iter(found), None)


def in_image_from_full(full: Mapping[str, Any]) -> dict[str, Any]:
    """Re-derive the in-image statement from a full one (drop what only the full adds).

    The subjects of the in-image statement are the lower layers' diffIDs, taken from the
    layer byproducts (all but the last layer).
    """
    predicate = copy.deepcopy(dict(full["predicate"]))
    added = {IN_IMAGE_RECEIPT, CONFIG, MANIFEST, SBOM, SBOM_ARTIFACT, RUNTIME_CAPABILITIES}
    layers = []
    kept = []
    for item in predicate["runDetails"]["byproducts"]:
        name = str(item.get("name", ""))
        if name.startswith(f"{LAYER_PREFIX}["):
            layers.append(item)
        elif name not in added:
            kept.append(item)
    predicate["runDetails"]["byproducts"] = kept
    # The chain's results are added to the full receipt only (they are made after the
    # in-image receipt is written into the top layer).
    predicate["runDetails"].pop("metadata", None)
    # ... and so is the builder identity beyond sparkflake's own version (full_statement).
    builder = predicate["runDetails"].get("builder")
    if isinstance(builder, dict) and isinstance(builder.get("version"), dict):
        builder["version"] = {key: value for key, value in builder["version"].items() if key == "sparkflake"}
    lower = [str(item["annotations"]["diff_id"]) for item in layers[:-1]]
    return in_image_statement(lower_diff_ids=lower, predicate=predicate)
