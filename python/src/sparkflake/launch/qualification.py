"""Qualification is data: a launch is qualified only with exactly the qualified settings.

The qualified configuration is the profile's ``[qualified]`` table resolved with the same
site values and rank; every non-site resolved value must be equal. Site values
(addresses, paths) never change a claim. A research-only profile stays research-only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.canonical_json import canonical_json_bytes
from ..core.errors import InputError
from ..core.status import UNQUALIFIED_CONFIGURATION
from ..profile.settings_catalog import CATALOG, render_value
from .contract import LaunchContract
from .envfile import EnvAssignment
from .resolution import Resolution, resolve

RESEARCH_ONLY = "research-only"


@dataclass(frozen=True)
class Qualification:
    status: str
    settings_hash: str
    differences: tuple[str, ...]  # "KEY: qualified X, resolved Y"
    image_matches: bool

    def as_record(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "settings_hash": self.settings_hash,
            "differences": list(self.differences),
            "image_matches_pin": self.image_matches,
        }


def qualification_values(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in sorted(values.items()) if not CATALOG[key].site}


def settings_hash(values: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json_bytes(qualification_values(values), ascii_only=True)).hexdigest()


def qualify(resolution: Resolution, contract: LaunchContract, image_id: str | None) -> Qualification:
    resolved = qualification_values(resolution.values)
    digest = settings_hash(resolution.values)
    image_matches = image_id is not None and image_id == contract.image_id
    if contract.status == RESEARCH_ONLY:
        return Qualification(RESEARCH_ONLY, digest, (), image_matches)
    if not contract.qualified:
        return Qualification(UNQUALIFIED_CONFIGURATION, digest, ("profile has no qualified configuration",), image_matches)
    site = [
        EnvAssignment(key, render_value(value), 0)
        for key, value in resolution.values.items()
        if CATALOG[key].site and value not in ("", None)
    ]
    qualified_assignments = [EnvAssignment(k, v, 0) for k, v in contract.qualified.items()]
    try:
        expected = qualification_values(
            resolve(site + qualified_assignments, contract, resolution.rank, f"profile {contract.profile} [qualified]").values
        )
    except InputError as exc:
        return Qualification(UNQUALIFIED_CONFIGURATION, digest, (f"qualified configuration not applicable: {exc}",), image_matches)
    differences = tuple(
        f"{key}: qualified {render_value(expected.get(key))}, resolved {render_value(resolved.get(key))}"
        for key in sorted(set(expected) | set(resolved))
        if expected.get(key) != resolved.get(key)
    )
    if contract.status == "qualified" and not image_matches:
        differences += (f"image {image_id} is not the profile's pinned image {contract.image_id}",)
    status = contract.status if not differences else UNQUALIFIED_CONFIGURATION
    return Qualification(status, digest, differences, image_matches)
