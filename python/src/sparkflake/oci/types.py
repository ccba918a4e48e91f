"""The OCI vocabulary every medium shares (layout, archives, registry): the platform an image
is for and the one rule that picks a platform's manifest out of an index; a descriptor as a
document is written with (``Descriptor``) and a blob reference as a reader found it
(``BlobRef``: a docker-archive names files, not digests).

The rule is the image-index spec's platform matching with containerd's normalization: an
arm64 platform without a variant is arm64/v8, so ``linux/arm64`` and ``linux/arm64/v8`` are
one platform; otherwise os, architecture and variant must be equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError

# The platforms an image is built for, and the variant each implies.
_BUILD_VARIANTS = {"arm64": "v8", "amd64": None}
_IMPLIED_VARIANTS = {"arm64": "v8"}


@dataclass(frozen=True)
class Platform:
    os: str = "linux"
    architecture: str = "arm64"
    variant: str | None = None

    def __post_init__(self) -> None:
        if self.variant is None and self.architecture in _IMPLIED_VARIANTS:
            object.__setattr__(self, "variant", _IMPLIED_VARIANTS[self.architecture])

    @classmethod
    def parse(cls, text: str) -> Platform:
        """A platform sparkflake builds: ``linux/arm64`` (variant v8 implied),
        ``linux/arm64/v8`` or ``linux/amd64``."""
        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) not in (2, 3) or parts[0] != "linux" or parts[1] not in _BUILD_VARIANTS:
            raise InputError(
                f"platform {text!r}: expected linux/arm64, linux/arm64/v8 or linux/amd64"
            )
        variant = _BUILD_VARIANTS[parts[1]]
        if len(parts) == 3 and parts[2] != variant:
            raise InputError(f"platform {text!r}: {parts[1]} supports variant {variant}")
        return cls(os=parts[0], architecture=parts[1], variant=variant)

    @classmethod
    def parse_any(cls, text: str) -> Platform:
        """Any ``OS/ARCH[/VARIANT]``: what a registry index or an audited image may hold."""
        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) not in (2, 3) or not all(parts):
            raise InputError(f"platform: expected OS/ARCH[/VARIANT], got {text!r}")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> Platform | None:
        """The platform of a config or a descriptor's ``platform`` object, or None where
        it names no os and architecture."""
        os_name, architecture = record.get("os"), record.get("architecture")
        if not isinstance(os_name, str) or not isinstance(architecture, str) or not os_name or not architecture:
            return None
        variant = record.get("variant")
        return cls(os_name, architecture, variant if isinstance(variant, str) and variant else None)

    def matches(self, other: Platform | None) -> bool:
        return other is not None and self == other

    def as_record(self) -> dict[str, str]:
        record = {"architecture": self.architecture, "os": self.os}
        if self.variant:
            record["variant"] = self.variant
        return record

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


def record_platform(record: object) -> Platform | None:
    """The platform of an index entry (``{"platform": {...}}``), None where it has none."""
    platform = record.get("platform") if isinstance(record, Mapping) else None
    return Platform.of_record(platform) if isinstance(platform, Mapping) else None


def matching_entries(manifests: Sequence[object], platform: Platform) -> list[Any]:
    """The entries of an index's ``manifests`` that are for ``platform``, in index order."""
    return [entry for entry in manifests if platform.matches(record_platform(entry))]


def platform_text(record: Mapping[str, Any]) -> str:
    """``os/architecture[/variant]`` as a config or descriptor spells it (no normalization:
    what the document says, for messages and reports)."""
    parts = [record.get("os"), record.get("architecture"), record.get("variant")]
    return "/".join(str(p) for p in parts if p)


# The cluster's hosts (NVIDIA GB10, linux/arm64): what a multi-platform index is read for
# where no platform is named.
CLUSTER_PLATFORM = Platform("linux", "arm64", "v8")


def select_index_entry(manifests: Sequence[object], platform: str | None, where: str) -> Any:
    """The entry of an index's ``manifests`` an image is read from: the first for
    ``platform`` (``OS/ARCH[/VARIANT]``) where one is named; else the only entry, or the
    first for the cluster's platform."""
    if platform is not None:
        try:
            wanted: Platform | None = Platform.parse_any(platform)
        except InputError:
            wanted = None
        found = matching_entries(manifests, wanted) if wanted is not None else []
        if not found:
            raise InputError(f"{where}: no manifest for platform {platform}", check_id="platform.index")
        return found[0]
    if len(manifests) == 1:
        return manifests[0]
    found = matching_entries(manifests, CLUSTER_PLATFORM)
    if not found:
        raise InputError(
            f"{where}: index lists {len(manifests)} manifests, none for {CLUSTER_PLATFORM}; name the platform",
            check_id="image.readable",
        )
    return found[0]


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] | None = None
    platform: Platform | None = None

    def as_record(self) -> dict[str, object]:
        record: dict[str, object] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.platform is not None:
            record["platform"] = self.platform.as_record()
        if self.annotations:
            record["annotations"] = dict(sorted(self.annotations.items()))
        return record


@dataclass(frozen=True)
class BlobRef:
    """A blob as referenced by a document: its digest (None when a docker-archive names
    a file rather than a digest), the member/file name, the expected size if known."""

    role: str
    name: str
    digest: str | None
    size: int | None
    media_type: str
