"""What an audit is held against (``Expectations``) and what it found (``AuditReport``: every
check, the digests re-derived from the bytes, the layers), in the record form it is written
as."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.check_result import FAIL, PASS, CheckList
from ..core.digest import is_digest
from ..core.errors import InputError

REPORT_SCHEMA = 1
EXPECT_KINDS = ("manifest", "config", "image-id", "index", "chain-id", "layer", "diff-id")
IN_IMAGE_RECEIPT_PATH = "etc/sparkflake/receipt.json"
DEFAULT_MAX_UNCOMPRESSED = 1 << 40


@dataclass(frozen=True)
class Expectations:
    """What the image must be, from the operator (``--expect``), an expected-digests file,
    a profile, a receipt and a lock. Everything optional."""

    digests: Sequence[tuple[str, str]] = ()
    expected_layers: Sequence[Mapping[str, Any]] | None = None
    # an expected-digests file's index: a docker-archive or a registry manifest has no
    # index.json, so there it is a skip; an explicit --expect …@index is not optional
    index_if_present: str | None = None
    platform: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    receipt: Mapping[str, Any] | None = None
    receipt_where: str = ""
    lock_digests: Mapping[str, str] | None = None
    lock_where: str = ""
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED


@dataclass(frozen=True)
class LayerFinding:
    digest: str | None
    diff_id: str | None
    size: int
    uncompressed_size: int
    media_type: str
    elf_machines: Mapping[str, int]


@dataclass
class AuditReport(CheckList):
    target: str
    source_kind: str
    manifest_digest: str | None = None
    index_digest: str | None = None
    config_digest: str | None = None
    chain_id: str | None = None
    engine_image_id: str | None = None
    platform: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    layers: list[LayerFinding] = field(default_factory=list)

    def judge(self, check_id: str, passed: bool, *, passed_detail: str, failed_detail: str,
              digest: str | None = None) -> None:
        """A comparison's check: pass or fail, each with what it found, the same digest named."""
        self.add(check_id, PASS if passed else FAIL, passed_detail if passed else failed_detail, digest)

    def as_record(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "kind": "sparkflake.audit",
            "target": self.target,
            "source": self.source_kind,
            "passed": self.exit_code == 0,
            "digests": {
                "manifest": {"kind": "manifest", "digest": self.manifest_digest},
                "index": {"kind": "index", "digest": self.index_digest},
                "config": {"kind": "config", "digest": self.config_digest},
                "image_id": {"kind": "config (local image ID)", "digest": self.engine_image_id or self.config_digest},
                "chain_id": {"kind": "chainID", "digest": self.chain_id},
            },
            "platform": self.platform,
            "labels": dict(sorted(self.labels.items())),
            "layers": [
                {
                    "digest": layer.digest,
                    "diff_id": layer.diff_id,
                    "size": layer.size,
                    "uncompressed_size": layer.uncompressed_size,
                    "media_type": layer.media_type,
                    "elf_machines": dict(sorted(layer.elf_machines.items())),
                }
                for layer in self.layers
            ],
            "checks": [c.as_record() for c in self.checks],
        }


def parse_expectation(text: str) -> tuple[str, str]:
    """``sha256:<hex>@KIND`` → (kind, digest), strict."""
    digest, at, kind = text.rpartition("@")
    if not at:
        raise InputError(f"--expect {text!r}: expected sha256:<64 lowercase hex>@KIND", check_id="digest.well-formed")
    if kind not in EXPECT_KINDS:
        raise InputError(f"--expect {text!r}: unknown kind {kind!r} (expected one of {', '.join(EXPECT_KINDS)})")
    if not is_digest(digest):
        raise InputError(
            f"--expect {text!r}: expected sha256:<64 lowercase hex digits>, got {digest!r}",
            check_id="digest.well-formed",
        )
    return ("config" if kind == "image-id" else kind, digest)
