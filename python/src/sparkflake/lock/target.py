"""The target an image runs on, as the resolvers and installers need it.

Debian 12 (bookworm) arm64: glibc 2.36, CPython 3.11. The manylinux level is the highest
glibc the base provides, so wheels tagged manylinux_2_17 … manylinux_2_36 for aarch64 fit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag


@dataclass(frozen=True)
class InstallTarget:
    platform: str = "linux/arm64"
    machine: str = "aarch64"
    debian_architecture: str = "arm64"
    python_version: tuple[int, int] = (3, 11)
    python_full_version: str = "3.11.2"
    glibc: tuple[int, int] = (2, 36)

    @property
    def python_tag(self) -> str:
        return f"cp{self.python_version[0]}{self.python_version[1]}"

    @property
    def python_minor(self) -> str:
        return f"{self.python_version[0]}.{self.python_version[1]}"

    @property
    def uv_python_platform(self) -> str:
        return f"{self.machine}-manylinux_{self.glibc[0]}_{self.glibc[1]}"

    def platform_tags(self) -> list[str]:
        """manylinux platform tags the base's glibc accepts, most specific first."""
        major, top = self.glibc
        tags = [f"manylinux_{major}_{minor}_{self.machine}" for minor in range(top, 16, -1)]
        tags.append(f"manylinux2014_{self.machine}")
        return tags

    @cached_property
    def supported_tags(self) -> tuple[Tag, ...]:
        """Every wheel tag that installs on the target, in preference order."""
        platforms = self.platform_tags()
        return tuple(
            list(cpython_tags(self.python_version, abis=[self.python_tag, "abi3", "none"], platforms=platforms))
            + list(compatible_tags(self.python_version, self.python_tag, platforms=platforms))
        )

    @cached_property
    def tag_rank(self) -> dict[Tag, int]:
        return {tag: rank for rank, tag in enumerate(self.supported_tags)}

    def wheel_rank(self, tags: Iterable[Tag]) -> int | None:
        """Best (lowest) preference rank of any of a wheel's tags; None if none fits."""
        ranks = [self.tag_rank[tag] for tag in tags if tag in self.tag_rank]
        return min(ranks) if ranks else None

    def marker_environment(self) -> dict[str, str]:
        return {
            "implementation_name": "cpython",
            "implementation_version": self.python_full_version,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": self.python_full_version,
            "python_version": self.python_minor,
            "sys_platform": "linux",
        }


DEBIAN_BOOKWORM_ARM64 = InstallTarget()


def wheel_tags(filename: str) -> frozenset[Tag]:
    """The tag set a wheel filename declares (``name-ver[-build]-py-abi-plat.whl``)."""
    stem = filename[: -len(".whl")] if filename.endswith(".whl") else filename
    parts = stem.split("-")
    if len(parts) < 5:
        raise ValueError(f"not a wheel filename: {filename!r}")
    return frozenset(parse_tag("-".join(parts[-3:])))
