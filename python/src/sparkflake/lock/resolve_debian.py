"""Debian arm64 packages of the OS base: signed indices → dependency closure → pins.

Chain of trust: ``InRelease`` is verified with ``gpgv`` against the Debian archive keyring
(``/usr/share/keyrings/debian-archive-keyring.gpg``) and only the text gpgv vouches for is
parsed; each ``Packages.xz`` is fetched as a content-addressed input whose sha256 and size
come from that signed Release, so every package's ``SHA256`` is anchored in a signature.

Every pinned package gets two URLs: the live mirror, then a dated snapshot.debian.org URL
(the Release ``Date`` of the index it was resolved from) for when it leaves the archive.
"""

from __future__ import annotations

import email.utils
import lzma
import os
import subprocess
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from ..core.blob_cache import Artifact, BlobCache, fetch_artifact
from ..core.counts import ascii_count
from ..core.digest import is_sha256_hex
from ..core.errors import CheckFailed, InputError
from .debian_packages import (
    ClosureResult,
    PackageIndex,
    parse_paragraphs,
    resolve_closure,
)

DEFAULT_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SNAPSHOT_ROOT = "https://snapshot.debian.org/archive"


@dataclass(frozen=True)
class DebianSuite:
    archive_url: str  # e.g. https://deb.debian.org/debian
    suite: str  # e.g. bookworm
    snapshot_archive: str  # the snapshot.debian.org archive name: debian, debian-security
    component: str = "main"


BOOKWORM_SUITES: tuple[DebianSuite, ...] = (
    DebianSuite("https://deb.debian.org/debian", "bookworm", "debian"),
    DebianSuite("https://deb.debian.org/debian", "bookworm-updates", "debian"),
    DebianSuite("https://deb.debian.org/debian-security", "bookworm-security", "debian-security"),
)

# The seed set of the glm53 OS base: what `python3 -c "import ssl, sqlite3"` needs to run
# in a container, with certificates, time zones and the passwd/group masters.
BASE_SEEDS: tuple[str, ...] = (
    "base-files",
    "base-passwd",
    "libc6",
    "libstdc++6",
    "libgcc-s1",
    "python3",
    "python3.11",
    "libpython3.11-stdlib",
    "libssl3",
    "libsqlite3-0",
    "ca-certificates",
    "tzdata",
    "netbase",
)

# Virtual names with several providers: the one a minimal Debian system has.
BASE_PREFERENCES: dict[str, str] = {"awk": "mawk", "debconf-2.0": "debconf"}


@dataclass(frozen=True)
class ReleaseIndex:
    suite: DebianSuite
    date: str  # RFC 2822 date from Release
    snapshot_timestamp: str  # YYYYMMDDTHHMMSSZ
    packages_path: str  # e.g. main/binary-arm64/Packages.xz
    packages_sha256: str
    packages_size: int


def snapshot_timestamp(release_date: str) -> str:
    """The UTC instant of an RFC 2822 ``release_date`` as snapshot.debian.org names it; a
    numeric offset is applied (a naive result, from ``-0000``, is UTC already)."""
    parsed = email.utils.parsedate_to_datetime(release_date)
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC)
    return parsed.strftime("%Y%m%dT%H%M%SZ")


def verify_inrelease(signed: bytes, keyring: Path, *, source: str) -> str:
    """The text of an InRelease file that gpgv verified against ``keyring``."""
    if not keyring.is_file():
        raise InputError(f"{source}: keyring {keyring} not found (install debian-archive-keyring)")
    with tempfile.TemporaryDirectory(prefix="sparkflake-gpgv-") as scratch:
        signed_path = Path(scratch) / "InRelease"
        signed_path.write_bytes(signed)
        verified_path = Path(scratch) / "Release"
        result = subprocess.run(
            ["gpgv", "--keyring", str(keyring), "--output", str(verified_path), str(signed_path)],
            capture_output=True,
            encoding="utf-8", errors="replace",
            check=False,
        )
        if result.returncode != 0:
            raise CheckFailed(
                f"{source}: signature not valid for keyring {keyring}: {result.stderr.strip()[-400:]}",
                check_id="deb-release-signature",
            )
        return verified_path.read_text(encoding="utf-8")


def parse_release(text: str, suite: DebianSuite, architecture: str, *, source: str) -> ReleaseIndex:
    paragraphs = list(parse_paragraphs(text, source=source))
    if not paragraphs:
        raise InputError(f"{source}: empty Release")
    release = paragraphs[0]
    wanted = f"{suite.component}/binary-{architecture}/Packages.xz"
    for line in release.get("SHA256", "").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == wanted:
            date = release.get("Date", "")
            if not date:
                raise InputError(f"{source}: Release has no Date")
            try:
                snapshot = snapshot_timestamp(date)
            except (TypeError, ValueError, OverflowError):
                raise InputError(f"{source}: Release: Date {date!r} is not an RFC 2822 date") from None
            if not is_sha256_hex(fields[0]):
                raise InputError(f"{source}: Release: {wanted}: sha256 {fields[0]!r} is not 64 lowercase hex digits")
            if ascii_count(fields[1]) is None:
                raise InputError(f"{source}: Release: {wanted}: size {fields[1]!r} is not a whole number")
            return ReleaseIndex(
                suite=suite,
                date=date,
                snapshot_timestamp=snapshot,
                packages_path=wanted,
                packages_sha256=fields[0],
                packages_size=int(fields[1]),
            )
    raise InputError(f"{source}: Release lists no SHA256 for {wanted}")


def load_suite_index(
    suite: DebianSuite,
    architecture: str,
    cache: BlobCache,
    index: PackageIndex,
    *,
    keyring: Path = DEFAULT_KEYRING,
    timeout: float = 60.0,
) -> ReleaseIndex:
    """Verify the suite's InRelease, fetch its Packages.xz by hash, add it to ``index``."""
    url = f"{suite.archive_url}/dists/{suite.suite}/InRelease"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            signed = response.read()
    except OSError as exc:
        raise InputError(f"{url}: cannot fetch: {exc}", check_id="deb-release") from exc
    text = verify_inrelease(signed, keyring, source=url)
    release = parse_release(text, suite, architecture, source=url)
    artifact = Artifact(
        name=f"debian-index:{suite.suite}/{release.packages_path}",
        filename=f"{suite.suite}_{release.packages_path.replace('/', '_')}",
        sha256=release.packages_sha256,
        size=release.packages_size,
        urls=(
            f"{suite.archive_url}/dists/{suite.suite}/{release.packages_path}",
            f"{SNAPSHOT_ROOT}/{suite.snapshot_archive}/{release.snapshot_timestamp}/dists/{suite.suite}/{release.packages_path}",
        ),
    )
    try:
        fetch_artifact(artifact, cache, timeout=timeout)
    except Exception as exc:  # _MissingInput carries the tried URLs
        raise InputError(f"{artifact.name}: cannot fetch the Packages index: {exc}") from exc
    with lzma.open(cache.verified_path(artifact)) as compressed:
        packages_text = compressed.read().decode("utf-8")
    index.add_paragraphs(
        parse_paragraphs(packages_text, source=artifact.urls[0]),
        archive=suite.archive_url,
        suite=suite.suite,
        source=artifact.urls[0],
    )
    return release


def pins_from_closure(
    closure: ClosureResult, releases: dict[str, ReleaseIndex]
) -> list[dict[str, object]]:
    pins: list[dict[str, Any]] = []
    for package in closure.packages:
        release = releases[package.suite]
        pins.append(
            {
                "package": package.package,
                "version": package.version,
                "architecture": package.architecture,
                "filename": os.path.basename(package.filename),
                "sha256": package.sha256,
                "size": package.size,
                "suite": package.suite,
                "urls": [
                    f"{package.archive}/{package.filename}",
                    f"{SNAPSHOT_ROOT}/{release.suite.snapshot_archive}/{release.snapshot_timestamp}/{package.filename}",
                ],
                "required_by": closure.reasons[package.package],
            }
        )
    return pins


@dataclass(frozen=True)
class DebianResolution:
    pins: list[dict[str, Any]]
    releases: list[ReleaseIndex]


def resolve_debian(
    seeds: Sequence[str] = BASE_SEEDS,
    *,
    suites: Sequence[DebianSuite] = BOOKWORM_SUITES,
    architecture: str = "arm64",
    cache: BlobCache | None = None,
    keyring: Path = DEFAULT_KEYRING,
    prefer: dict[str, str] | None = None,
) -> DebianResolution:
    """Resolve ``seeds`` against the signed indices of ``suites`` (newest version wins)."""
    cache = cache or BlobCache()
    index = PackageIndex(architecture=architecture)
    releases: dict[str, ReleaseIndex] = {}
    for suite in suites:
        releases[suite.suite] = load_suite_index(suite, architecture, cache, index, keyring=keyring)
    closure = resolve_closure(index, seeds, prefer=BASE_PREFERENCES if prefer is None else prefer)
    return DebianResolution(pins=pins_from_closure(closure, releases), releases=list(releases.values()))
