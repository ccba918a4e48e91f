"""Debian package indices as data: deb822 paragraphs, version order, relations, closure.

The closure follows Pre-Depends and Depends only (what dpkg needs unpacked for a package
to work); Recommends and Suggests are not followed, Conflicts and Breaks are not consulted
because the seed set is small and coherent (one suite). Alternatives (``a | b``) take the
first alternative a real package satisfies, then the first one some package provides;
an alternative already satisfied by a selected package wins over both.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.counts import ascii_count
from ..core.errors import InputError

# ---------------------------------------------------------------------------------------
# deb822


def parse_paragraphs(text: str, *, source: str = "<packages>") -> Iterator[dict[str, str]]:
    """deb822 paragraphs: ``Field: value`` lines, continuation lines start with space/tab.

    Field names keep their case as written; lookups use the canonical Debian spelling.
    """
    current: dict[str, str] = {}
    last_key: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            if current:
                yield current
            current, last_key = {}, None
            continue
        if line.startswith("#"):
            continue
        if line[0] in " \t":
            if last_key is None:
                raise InputError(f"{source}:{number}: continuation line before any field")
            current[last_key] += "\n" + line[1:]
            continue
        key, sep, value = line.partition(":")
        if not sep or not key or " " in key:
            raise InputError(f"{source}:{number}: expected 'Field: value', got {line[:60]!r}")
        current[key] = value.strip()
        last_key = key
    if current:
        yield current


# ---------------------------------------------------------------------------------------
# Versions (dpkg's algorithm, deb-version(7))

_VERSION_RE = re.compile(r"^(?:([0-9]+):)?([A-Za-z0-9.+~:-]+?)(?:-([A-Za-z0-9.+~]+))?$")


@dataclass(frozen=True)
class DebVersion:
    epoch: int
    upstream: str
    revision: str

    @classmethod
    def parse(cls, text: str) -> DebVersion:
        match = _VERSION_RE.match(text.strip())
        if not match or not match.group(2) or not match.group(2)[0].isdigit():
            raise InputError(f"not a Debian version: {text!r}")
        return cls(int(match.group(1) or 0), match.group(2), match.group(3) or "")

    def __str__(self) -> str:
        epoch = f"{self.epoch}:" if self.epoch else ""
        revision = f"-{self.revision}" if self.revision else ""
        return f"{epoch}{self.upstream}{revision}"

    def __lt__(self, other: DebVersion) -> bool:
        return compare_versions(self, other) < 0

    def __le__(self, other: DebVersion) -> bool:
        return compare_versions(self, other) <= 0

    def __gt__(self, other: DebVersion) -> bool:
        return compare_versions(self, other) > 0

    def __ge__(self, other: DebVersion) -> bool:
        return compare_versions(self, other) >= 0


def _char_order(char: str) -> int:
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_fragment(left: str, right: str) -> int:
    i = j = 0
    while i < len(left) or j < len(right):
        # Non-digit prefix, compared with dpkg's character order ('~' before the end).
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            lc = _char_order(left[i]) if i < len(left) and not left[i].isdigit() else 0
            rc = _char_order(right[j]) if j < len(right) and not right[j].isdigit() else 0
            if lc != rc:
                return -1 if lc < rc else 1
            i += 1
            j += 1
        start_i = i
        while i < len(left) and left[i].isdigit():
            i += 1
        start_j = j
        while j < len(right) and right[j].isdigit():
            j += 1
        ln = int(left[start_i:i] or "0")
        rn = int(right[start_j:j] or "0")
        if ln != rn:
            return -1 if ln < rn else 1
    return 0


def compare_versions(left: DebVersion | str, right: DebVersion | str) -> int:
    a = left if isinstance(left, DebVersion) else DebVersion.parse(left)
    b = right if isinstance(right, DebVersion) else DebVersion.parse(right)
    if a.epoch != b.epoch:
        return -1 if a.epoch < b.epoch else 1
    result = _compare_fragment(a.upstream, b.upstream)
    if result:
        return result
    return _compare_fragment(a.revision, b.revision)


# ---------------------------------------------------------------------------------------
# Relations

_RELATION_RE = re.compile(
    r"^\s*(?P<name>[a-z0-9][a-z0-9+.-]*)(?::(?P<arch>[a-z0-9-]+))?\s*"
    r"(?:\(\s*(?P<op><<|<=|=|>=|>>|<|>)\s*(?P<version>[0-9A-Za-z][^)\s]*)\s*\))?\s*"
    r"(?:\[[^\]]*\])?\s*(?:<[^>]*>\s*)*$"
)


@dataclass(frozen=True)
class Relation:
    name: str
    op: str | None = None
    version: str | None = None
    arch_qualifier: str | None = None

    def allows(self, version: str) -> bool:
        if self.op is None or self.version is None:
            return True
        result = compare_versions(version, self.version)
        return {
            "<<": result < 0,
            "<": result <= 0,  # deprecated spelling of <=
            "<=": result <= 0,
            "=": result == 0,
            ">=": result >= 0,
            ">": result >= 0,  # deprecated spelling of >=
            ">>": result > 0,
        }[self.op]

    def __str__(self) -> str:
        arch = f":{self.arch_qualifier}" if self.arch_qualifier else ""
        constraint = f" ({self.op} {self.version})" if self.op else ""
        return f"{self.name}{arch}{constraint}"


def parse_relations(text: str, *, source: str = "<relation>") -> list[list[Relation]]:
    """``a (>= 1) | b, c:any`` → [[a>=1, b], [c]]; empty text → []."""
    groups: list[list[Relation]] = []
    for group_text in text.split(","):
        if not group_text.strip():
            continue
        alternatives = []
        for alternative in group_text.split("|"):
            match = _RELATION_RE.match(alternative.replace("\n", " "))
            if not match:
                raise InputError(f"{source}: cannot parse relation {alternative.strip()!r}")
            alternatives.append(
                Relation(
                    name=match.group("name"),
                    op=match.group("op"),
                    version=match.group("version"),
                    arch_qualifier=match.group("arch"),
                )
            )
        groups.append(alternatives)
    return groups


# ---------------------------------------------------------------------------------------
# Index and closure


@dataclass(frozen=True)
class DebPackage:
    """One binary package stanza of a Packages index."""

    package: str
    version: str
    architecture: str
    filename: str  # pool path relative to the archive root
    sha256: str
    size: int
    depends: tuple[tuple[Relation, ...], ...] = ()
    pre_depends: tuple[tuple[Relation, ...], ...] = ()
    provides: tuple[Relation, ...] = ()
    essential: bool = False
    multi_arch: str = ""
    archive: str = ""  # the archive root URL this stanza came from
    suite: str = ""

    @classmethod
    def from_paragraph(cls, fields: Mapping[str, str], *, archive: str = "", suite: str = "", source: str = "") -> DebPackage:
        where = f"{source}: {fields.get('Package', '?')}"
        try:
            name = fields["Package"]
            version = fields["Version"]
            architecture = fields["Architecture"]
            filename = fields["Filename"]
            sha256 = fields["SHA256"]
            size_text = fields["Size"]
        except KeyError as exc:
            raise InputError(f"{where}: field {exc.args[0]} missing") from exc
        size = ascii_count(size_text)
        if size is None:
            raise InputError(f"{where}: Size is not an integer: {size_text!r} (expected a byte count in ASCII digits)")
        provides = tuple(
            alt
            for group in parse_relations(fields.get("Provides", ""), source=where)
            for alt in group
        )
        return cls(
            package=name,
            version=version,
            architecture=architecture,
            filename=filename,
            sha256=sha256,
            size=size,
            depends=tuple(tuple(g) for g in parse_relations(fields.get("Depends", ""), source=where)),
            pre_depends=tuple(tuple(g) for g in parse_relations(fields.get("Pre-Depends", ""), source=where)),
            provides=provides,
            essential=fields.get("Essential", "no") == "yes",
            multi_arch=fields.get("Multi-Arch", ""),
            archive=archive,
            suite=suite,
        )


@dataclass
class PackageIndex:
    """Every candidate per package name, plus who provides each virtual name."""

    architecture: str = "arm64"
    packages: dict[str, list[DebPackage]] = field(default_factory=dict)
    providers: dict[str, list[tuple[DebPackage, Relation]]] = field(default_factory=dict)

    def add(self, package: DebPackage) -> None:
        if package.architecture not in (self.architecture, "all"):
            return
        self.packages.setdefault(package.package, []).append(package)
        for provided in package.provides:
            self.providers.setdefault(provided.name, []).append((package, provided))

    def add_paragraphs(self, paragraphs: Iterable[Mapping[str, str]], *, archive: str = "", suite: str = "", source: str = "") -> None:
        for fields in paragraphs:
            self.add(DebPackage.from_paragraph(fields, archive=archive, suite=suite, source=source))

    def best(self, relation: Relation) -> DebPackage | None:
        """Highest version of a real package named by ``relation`` that satisfies it."""
        candidates = [p for p in self.packages.get(relation.name, ()) if relation.allows(p.version)]
        if not candidates:
            return None
        return max(candidates, key=lambda p: _version_sort_key(p.version))

    def newest(self, name: str) -> DebPackage | None:
        return self.best(Relation(name))


_version_sort_key = functools.cmp_to_key(compare_versions)


@dataclass(frozen=True)
class ClosureResult:
    packages: tuple[DebPackage, ...]  # sorted by name
    reasons: Mapping[str, str]  # package -> what pulled it in


def _satisfied_by(relation: Relation, selected: Mapping[str, DebPackage]) -> bool:
    chosen = selected.get(relation.name)
    if chosen is not None and relation.allows(chosen.version):
        return True
    for package in selected.values():
        for provided in package.provides:
            if provided.name != relation.name:
                continue
            # A versioned relation is satisfied only by a versioned Provides (Debian policy 7.5).
            if relation.op is None or (provided.version is not None and relation.allows(provided.version)):
                return True
    return False


def resolve_closure(
    index: PackageIndex,
    seeds: Sequence[str],
    *,
    prefer: Mapping[str, str] | None = None,
    exclude: Iterable[str] = (),
) -> ClosureResult:
    """The Depends/Pre-Depends closure of ``seeds``; deterministic for a given index.

    ``prefer`` maps a virtual name to the provider to use; ``exclude`` names packages that
    must never be selected (an unsatisfiable group then fails loudly).
    """
    prefer = dict(prefer or {})
    excluded = set(exclude)
    selected: dict[str, DebPackage] = {}
    reasons: dict[str, str] = {}
    queue: list[DebPackage] = []
    for seed_text in seeds:
        relation = parse_relations(seed_text, source="seed")[0][0]
        package = index.best(relation)
        if package is None:
            raise InputError(f"seed package {seed_text!r} is not in the index for {index.architecture}")
        if package.package not in selected:
            selected[package.package] = package
            reasons[package.package] = "seed"
            queue.append(package)
    while queue:
        package = queue.pop(0)
        for group in package.pre_depends + package.depends:
            if any(_satisfied_by(alt, selected) for alt in group):
                continue
            choice = _choose(index, group, prefer, excluded)
            if choice is None:
                raise InputError(
                    f"{package.package} {package.version}: dependency "
                    f"{' | '.join(str(a) for a in group)} cannot be satisfied from the index",
                    check_id="deb-closure",
                )
            if choice.package in selected:
                raise InputError(
                    f"{package.package} {package.version}: needs {' | '.join(str(a) for a in group)} "
                    f"but {choice.package} {selected[choice.package].version} is already selected",
                    check_id="deb-closure",
                )
            selected[choice.package] = choice
            reasons[choice.package] = f"{package.package}: {' | '.join(str(a) for a in group)}"
            queue.append(choice)
    ordered = tuple(selected[name] for name in sorted(selected))
    return ClosureResult(packages=ordered, reasons=reasons)


def _choose(
    index: PackageIndex,
    group: Sequence[Relation],
    prefer: Mapping[str, str],
    excluded: set[str],
) -> DebPackage | None:
    for relation in group:
        if relation.name in excluded:
            continue
        real = index.best(relation)
        if real is not None:
            return real
    for relation in group:
        providers = [
            p
            for p, provided in index.providers.get(relation.name, ())
            if p.package not in excluded
            and (relation.op is None or (provided.version is not None and relation.allows(provided.version)))
        ]
        if not providers:
            continue
        wanted = prefer.get(relation.name)
        if wanted is not None:
            chosen = [p for p in providers if p.package == wanted]
            if chosen:
                return max(chosen, key=lambda p: _version_sort_key(p.version))
        names = sorted({p.package for p in providers})
        return index.best(Relation(names[0])) or providers[0]
    return None
