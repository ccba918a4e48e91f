"""Resolution pieces offline: Debian versions (against dpkg itself), relations, deb822,
closures with alternatives and virtual packages, the Release chain, wheel selection."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.lock.debian_packages import (
    DebPackage,
    PackageIndex,
    compare_versions,
    parse_paragraphs,
    parse_relations,
    resolve_closure,
)
from sparkflake.lock.pylock import resolved_pins
from sparkflake.lock.resolve import python_pins
from sparkflake.lock.resolve_debian import (
    BOOKWORM_SUITES,
    DEFAULT_KEYRING,
    parse_release,
    snapshot_timestamp,
    verify_inrelease,
)
from sparkflake.lock.target import InstallTarget, wheel_tags

_fragment = st.text(alphabet="0123456789abcz.+~", min_size=1, max_size=6)
_upstream = st.builds(lambda d, rest: d + rest, st.sampled_from("0123456789"), st.text(alphabet="0123456789az.+~", max_size=6))
_version = st.builds(
    lambda epoch, upstream, revision: (f"{epoch}:" if epoch else "") + upstream + (f"-{revision}" if revision else ""),
    st.integers(min_value=0, max_value=3),
    _upstream,
    st.one_of(st.just(""), _fragment),
)


def _dpkg_compare(left: str, right: str) -> int:
    for op, result in (("lt", -1), ("eq", 0), ("gt", 1)):
        if subprocess.run(["dpkg", "--compare-versions", left, op, right], check=False).returncode == 0:
            return result
    raise AssertionError((left, right))


@settings(max_examples=40)
@given(left=_version, right=_version)
def test_version_order_matches_dpkg(left: str, right: str) -> None:
    ours = compare_versions(left, right)
    assert (ours > 0) - (ours < 0) == _dpkg_compare(left, right)


@given(left=_version, right=_version)
def test_version_order_is_antisymmetric(left: str, right: str) -> None:
    a, b = compare_versions(left, right), compare_versions(right, left)
    assert (a > 0) - (a < 0) == -((b > 0) - (b < 0))
    assert compare_versions(left, left) == 0


_field_name = st.from_regex(r"[A-Z][a-z]{1,8}(-[A-Z][a-z]{1,6})?", fullmatch=True)
_line = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)
_value = st.lists(_line, min_size=1, max_size=3).map("\n".join)


def deb822_paragraph(fields: dict[str, str]) -> str:
    """A deb822 paragraph of ``fields`` (values without empty continuation lines)."""
    lines = []
    for key, value in fields.items():
        first, *rest = value.split("\n")
        lines.append(f"{key}: {first}".rstrip())
        lines.extend(" " + part for part in rest)
    return "\n".join(lines) + "\n"


@given(st.dictionaries(_field_name, _value, min_size=1, max_size=6))
def test_deb822_round_trip(fields: dict[str, str]) -> None:
    text = deb822_paragraph(fields)
    assert list(parse_paragraphs(text + "\n" + text)) == [fields, fields]


@given(st.binary(max_size=300))
def test_deb822_parser_never_crashes(raw: bytes) -> None:
    try:
        list(parse_paragraphs(raw.decode("latin-1")))
    except InputError:
        pass


def test_relations() -> None:
    groups = parse_relations("libc6 (>= 2.34), python3.11:any (>= 3.11.2-1~) | python3-foo, debconf (>= 0.5) | debconf-2.0")
    assert [[str(r) for r in g] for g in groups] == [
        ["libc6 (>= 2.34)"],
        ["python3.11:any (>= 3.11.2-1~)", "python3-foo"],
        ["debconf (>= 0.5)", "debconf-2.0"],
    ]
    assert groups[0][0].allows("2.36-9") and not groups[0][0].allows("2.31")
    with pytest.raises(InputError, match="cannot parse relation"):
        parse_relations("libc6 (>= )")


def _pkg(name: str, version: str = "1.0", depends: str = "", pre: str = "", provides: str = "", arch: str = "arm64", suite: str = "bookworm") -> DebPackage:
    groups = parse_relations(depends)
    return DebPackage(
        package=name,
        version=version,
        architecture=arch,
        filename=f"pool/main/{name}_{version}_{arch}.deb",
        sha256="0" * 64,
        size=1,
        depends=tuple(tuple(g) for g in groups),
        pre_depends=tuple(tuple(g) for g in parse_relations(pre)),
        provides=tuple(r for g in parse_relations(provides) for r in g),
        suite=suite,
    )


def test_closure_alternatives_virtuals_versions() -> None:
    index = PackageIndex()
    for package in [
        _pkg("app", depends="libfoo (>= 2), awk, mailer | exim4, shared:any", pre="libc6"),
        _pkg("libfoo", "1.0"),
        _pkg("libfoo", "2.1", suite="bookworm-security", depends="libc6 (>= 2.30)"),
        _pkg("libc6", "2.36-9"),
        _pkg("mawk", provides="awk"),
        _pkg("gawk", provides="awk"),
        _pkg("exim4"),
        _pkg("shared", arch="all"),
        _pkg("otherarch", arch="amd64"),
    ]:
        index.add(package)
    closure = resolve_closure(index, ["app"], prefer={"awk": "mawk"})
    chosen = {p.package: p.version for p in closure.packages}
    assert chosen == {"app": "1.0", "libfoo": "2.1", "libc6": "2.36-9", "mawk": "1.0", "exim4": "1.0", "shared": "1.0"}
    assert closure.reasons["exim4"] == "app: mailer | exim4"
    assert [p.package for p in closure.packages] == sorted(chosen)
    assert "otherarch" not in index.packages


def test_closure_refuses_unsatisfiable() -> None:
    index = PackageIndex()
    index.add(_pkg("app", depends="libmissing (>= 3)"))
    with pytest.raises(InputError, match=r"app 1.0: dependency libmissing \(>= 3\) cannot be satisfied"):
        resolve_closure(index, ["app"])
    with pytest.raises(InputError, match="seed package 'nothing'"):
        resolve_closure(index, ["nothing"])


RELEASE = """Origin: Debian
Suite: oldstable
Codename: bookworm
Date: Sat, 11 Jul 2026 10:16:37 UTC
SHA256:
 c7c883a61f348283050d3a754e7c8119117c4019bf65da804c78fdae315866f1 49434864 main/binary-arm64/Packages
 2ddb1737692e8c45c53e8d57c0ce4cd21c78c5703b830c3226b1423566a06c00  8689464 main/binary-arm64/Packages.xz
"""


def test_release_parsing_and_snapshot_timestamp() -> None:
    release = parse_release(RELEASE, BOOKWORM_SUITES[0], "arm64", source="InRelease")
    assert release.packages_sha256.startswith("2ddb1737") and release.packages_size == 8689464
    assert release.snapshot_timestamp == "20260711T101637Z" == snapshot_timestamp(release.date)
    with pytest.raises(InputError, match="no SHA256 for main/binary-riscv64/Packages.xz"):
        parse_release(RELEASE, BOOKWORM_SUITES[0], "riscv64", source="InRelease")


def test_unsigned_or_forged_release_is_refused() -> None:
    forged = b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n" + RELEASE.encode() + (
        b"-----BEGIN PGP SIGNATURE-----\n\niQIzBAEBCAAdFiEE\n=abcd\n-----END PGP SIGNATURE-----\n"
    )
    for signed in (RELEASE.encode(), forged):
        with pytest.raises(CheckFailed, match="signature not valid"):
            verify_inrelease(signed, DEFAULT_KEYRING, source="InRelease")
    with pytest.raises(InputError, match="keyring"):
        verify_inrelease(forged, Path("/nonexistent.gpg"), source="InRelease")


def _pylock(*packages: dict) -> dict:
    return {"lock-version": "1.0", "created-by": "uv", "packages": list(packages)}


def _wheel(filename: str, digest: str = "a") -> dict:
    return {"url": f"https://files.example/{filename}", "size": 10, "hashes": {"sha256": digest * 64}}


def _wheels(pylock: dict) -> list:
    return resolved_pins(pylock, "pylock.toml", target=InstallTarget(), sdist_names=())


def test_resolution_prefers_the_target_tags() -> None:
    pins = _wheels(
        _pylock(
            {
                "name": "cryptography",
                "version": "50.0.2",
                "wheels": [
                    _wheel("cryptography-50.0.2-cp39-abi3-manylinux_2_28_aarch64.whl", "b"),
                    _wheel("cryptography-50.0.2-cp311-abi3-manylinux_2_34_aarch64.whl", "c"),
                    _wheel("cryptography-50.0.2-cp311-abi3-manylinux_2_39_aarch64.whl", "d"),
                    _wheel("cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl", "e"),
                ],
            },
            {"name": "pure", "version": "1", "wheels": [_wheel("pure-1-py3-none-any.whl")]},
            {"name": "winonly", "version": "1", "marker": "sys_platform == 'win32'", "wheels": [_wheel("winonly-1-py3-none-win_amd64.whl")]},
            {"name": "armonly", "version": "1", "marker": "platform_machine == 'aarch64'", "wheels": [_wheel("armonly-1-py3-none-any.whl")]},
        )
    )
    assert [(p.name, p.filename) for p in pins] == [
        ("armonly", "armonly-1-py3-none-any.whl"),
        ("cryptography", "cryptography-50.0.2-cp311-abi3-manylinux_2_34_aarch64.whl"),
        ("pure", "pure-1-py3-none-any.whl"),
    ]


def test_resolution_refuses_sdist_only_and_foreign() -> None:
    with pytest.raises(CheckFailed, match=r"no wheel fits linux/arm64 .* for: onlysdist 1, foreign 2"):
        _wheels(
            _pylock(
                {"name": "onlysdist", "version": "1", "sdist": {"url": "https://x/onlysdist-1.tar.gz", "size": 1, "hashes": {"sha256": "a" * 64}}},
                {"name": "foreign", "version": "2", "wheels": [_wheel("foreign-2-cp311-cp311-manylinux_2_17_x86_64.whl")]},
            )
        )


@given(st.sampled_from(InstallTarget().platform_tags()), st.sampled_from(["cp311-cp311", "cp38-abi3", "py3-none"]))
def test_every_target_platform_tag_is_accepted(platform: str, interpreter: str) -> None:
    assert InstallTarget().wheel_rank(wheel_tags(f"x-1-{interpreter}-{platform}.whl")) is not None
    foreign = platform.replace("aarch64", "x86_64")
    assert InstallTarget().wheel_rank(wheel_tags(f"x-1-{interpreter}-{foreign}.whl")) is None


def test_resolution_takes_sizes_and_hashes_only_as_pylock_types_them() -> None:
    # a size as text was read with int() ("1_0" gave 10), a missing hashes table was a KeyError
    sized_as_text = dict(_wheel("pure-1-py3-none-any.whl"), size="1_0")
    with pytest.raises(InputError, match=r"^pylock.toml: packages\[0\]\.wheels\[0\]\.size: expected a non-negative integer"):
        _wheels(_pylock({"name": "pure", "version": "1", "wheels": [sized_as_text]}))
    sdist_without_hashes = {"url": "https://files.example/pure-1.tar.gz", "size": 1}
    with pytest.raises(InputError, match=r"^pylock.toml: packages\[0\]\.sdist: missing required key 'hashes'|hashes"):
        resolved_pins(
            _pylock({"name": "pure", "version": "1", "wheels": [_wheel("pure-1-py3-none-any.whl")], "sdist": sdist_without_hashes}),
            "pylock.toml", target=InstallTarget(), sdist_names=("pure-sdist",),
        )
    with pytest.raises(InputError, match=r"uv's pylock.toml: not TOML"):
        python_pins("[[packages]\n", InstallTarget(), ())


def test_resolution_adds_the_sdists_asked_for() -> None:
    sdist = {"url": "https://files.example/pure-1.tar.gz", "size": 7, "hashes": {"sha256": "b" * 64}}
    document = _pylock({"name": "pure", "version": "1", "wheels": [_wheel("pure-1-py3-none-any.whl")], "sdist": sdist})
    pins = resolved_pins(document, "pylock.toml", target=InstallTarget(), sdist_names=("pure-sdist",))
    assert [(p.kind, p.name, p.size) for p in pins] == [("wheel", "pure", 10), ("sdist", "pure-sdist", 7)]
    with pytest.raises(InputError, match="no sdist on the index for: other-sdist"):
        resolved_pins(document, "pylock.toml", target=InstallTarget(), sdist_names=("other-sdist",))
