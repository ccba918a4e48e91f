"""The Debian archive's documents as the lock reads them (``lock.resolve_debian``,
``lock.debian_packages``): a suite's Release gives back the Packages.xz line and the
snapshot timestamp of its Date, a Packages stanza gives back its fields and relations as
written, and a stanza without a required field or with a Size that is no integer is
refused with ``InputError`` naming the source and the package. A Release's Size, hash or
Date that cannot be read is an ``InputError`` naming the Release (never a ValueError), and
its snapshot timestamp is the Date's UTC instant whatever offset the Date is written with."""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.lock.debian_packages import (
    ClosureResult,
    DebPackage,
    DebVersion,
    Relation,
    parse_paragraphs,
    parse_relations,
)
from sparkflake.lock.resolve_debian import (
    SNAPSHOT_ROOT,
    DebianSuite,
    parse_release,
    pins_from_closure,
    snapshot_timestamp,
)

pytestmark = pytest.mark.lock

SUITE = DebianSuite("https://deb.debian.org/debian", "bookworm", "debian")
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
_moments = st.datetimes(min_value=datetime(1995, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda moment: moment.replace(microsecond=0, tzinfo=UTC)
)
_architectures = st.sampled_from(["arm64", "amd64", "all"])
_other_paths = st.lists(st.sampled_from(["main/binary-armhf/Packages.xz", "contrib/binary-arm64/Packages.xz",
                                         "main/binary-arm64/Packages", "main/i18n/Translation-en.bz2"]),
                        unique=True, max_size=3)


def _release(date: str, lines: list[tuple[str, int, str]]) -> str:
    listed = "".join(f" {digest} {size:>16} {path}\n" for digest, size, path in lines)
    return f"Origin: Debian\nSuite: stable\nCodename: bookworm\nDate: {date}\nSHA256:\n{listed}"


@given(_moments, _architectures, HEX, st.integers(0, 1 << 40), _other_paths, st.randoms())
def test_a_release_gives_its_packages_line_and_snapshot_time(moment, architecture, digest, size, others, random) -> None:
    wanted = f"main/binary-{architecture}/Packages.xz"
    lines = [(("0" * 64), 1, path) for path in others] + [(digest, size, wanted)]
    random.shuffle(lines)
    date = email.utils.format_datetime(moment, usegmt=True)  # Debian's "Sat, 10 Jun 2023 08:55:33 UTC" form
    release = parse_release(_release(date.replace("GMT", "UTC"), lines), SUITE, architecture, source="R")
    assert (release.packages_path, release.packages_sha256, release.packages_size) == (wanted, digest, size)
    assert release.snapshot_timestamp == moment.strftime("%Y%m%dT%H%M%SZ")
    assert snapshot_timestamp(date) == release.snapshot_timestamp


@given(_moments, _architectures, _other_paths)
def test_a_release_without_the_wanted_index_is_refused_naming_it(moment, architecture, others) -> None:
    date = email.utils.format_datetime(moment, usegmt=True)
    wanted = f"main/binary-{architecture}/Packages.xz"
    lines = [("0" * 64, 1, path) for path in others if path != wanted]
    with pytest.raises(InputError, match=rf"^R: Release lists no SHA256 for {wanted}$"):
        parse_release(_release(date, lines), SUITE, architecture, source="R")


_names = st.from_regex(r"[a-z0-9][a-z0-9+.-]{0,15}", fullmatch=True)
_versions = st.from_regex(r"([1-9]:)?[0-9][0-9A-Za-z.+~-]{0,12}", fullmatch=True)
_relations = st.builds(
    lambda name, arch, constraint: Relation(name, *(constraint or (None, None)), arch_qualifier=arch),
    _names,
    st.none() | st.sampled_from(["any", "arm64", "native"]),
    st.none() | st.tuples(st.sampled_from(["<<", "<=", "=", ">=", ">>"]), _versions),
)
_groups = st.lists(st.lists(_relations, min_size=1, max_size=3).map(tuple), max_size=4).map(tuple)


def _relations_text(groups) -> str:
    return ", ".join(" | ".join(str(alternative) for alternative in group) for group in groups)


@given(_groups)
def test_relations_read_back_as_written(groups) -> None:
    assert tuple(tuple(group) for group in parse_relations(_relations_text(groups))) == groups


@given(name=_names, version=_versions, architecture=_architectures, sha256=HEX, size=st.integers(0, 1 << 40),
       depends=_groups, pre_depends=_groups, provides=st.lists(_relations, max_size=3).map(tuple),
       essential=st.booleans(), multi_arch=st.sampled_from(["", "same", "foreign", "allowed"]))
def test_a_packages_stanza_reads_back_as_written(name, version, architecture, sha256, size, depends, pre_depends,
                                                 provides, essential, multi_arch) -> None:
    expected = DebPackage(
        package=name, version=version, architecture=architecture,
        filename=f"pool/main/{name[0]}/{name}/{name}_{version.split(':', 1)[-1]}_{architecture}.deb",
        sha256=sha256, size=size, depends=depends, pre_depends=pre_depends, provides=provides,
        essential=essential, multi_arch=multi_arch, archive="A", suite="S",
    )
    fields = {
        "Package": name, "Version": version, "Architecture": architecture, "Filename": expected.filename,
        "SHA256": sha256, "Size": str(size), "Depends": _relations_text(depends),
        "Pre-Depends": _relations_text(pre_depends), "Provides": _relations_text((provides,)) if provides else "",
        "Essential": "yes" if essential else "no", "Multi-Arch": multi_arch,
    }
    text = "".join(f"{key}: {value}\n" for key, value in fields.items() if value)
    (paragraph,) = parse_paragraphs(text + "\n", source="P")
    assert DebPackage.from_paragraph(paragraph, archive="A", suite="S", source="P") == expected


@given(name=_names, missing=st.sampled_from(["Version", "Architecture", "Filename", "SHA256", "Size"]))
def test_a_stanza_without_a_required_field_is_refused_naming_it(name, missing) -> None:
    fields = {"Package": name, "Version": "1.0", "Architecture": "arm64", "Filename": "pool/x.deb",
              "SHA256": "0" * 64, "Size": "1"}
    del fields[missing]
    with pytest.raises(InputError, match=rf"^P: {re.escape(name)}: field {missing} missing$"):
        DebPackage.from_paragraph(fields, source="P")


def _no_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return True
    return False


@given(name=_names, size=st.text(max_size=8).filter(_no_integer))
def test_a_size_that_is_no_integer_is_refused_naming_the_package(name, size) -> None:
    fields = {"Package": name, "Version": "1.0", "Architecture": "arm64", "Filename": "pool/x.deb",
              "SHA256": "0" * 64, "Size": size}
    with pytest.raises(InputError, match=rf"^P: {re.escape(name)}: Size is not an integer: "):
        DebPackage.from_paragraph(fields, source="P")


# ---- a Release's lines that are no size, hash or date: InputError naming the Release, never
# a ValueError; and the snapshot timestamp is the Date's UTC instant whatever its offset

WANTED = "main/binary-arm64/Packages.xz"
DATE = "Sat, 10 Jun 2023 08:55:33 UTC"
_not_ascii_digits = st.text("0123456789x.-_+\u0661\u0662\u00b2", min_size=1, max_size=6).filter(
    lambda text: re.fullmatch(r"[0-9]+", text) is None
)


@given(_not_ascii_digits)
def test_a_release_size_that_is_no_ascii_number_is_refused_naming_it(size: str) -> None:
    text = f"Date: {DATE}\nSHA256:\n {'0' * 64} {size} {WANTED}\n"
    with pytest.raises(InputError, match=rf"^R: Release: {WANTED}: size {re.escape(repr(size))} is not a whole number"):
        parse_release(text, SUITE, "arm64", source="R")


@given(st.text("0123456789abcdefABCDEFxyz", min_size=1, max_size=70).filter(
    lambda text: re.fullmatch(r"[0-9a-f]{64}", text) is None))
def test_a_release_hash_that_is_no_sha256_is_refused_naming_it(digest: str) -> None:
    text = f"Date: {DATE}\nSHA256:\n {digest} 1 {WANTED}\n"
    with pytest.raises(InputError, match=rf"^R: Release: {WANTED}: sha256 .* is not 64 lowercase hex digits$"):
        parse_release(text, SUITE, "arm64", source="R")


@given(st.text("abcdefghijklmnopqrstuvwxyz ,:+-0123456789", min_size=1, max_size=20).filter(str.strip))
def test_a_release_date_that_is_no_date_is_refused_naming_it(date: str) -> None:
    try:
        snapshot_timestamp(date)
    except (TypeError, ValueError, OverflowError):
        pass
    else:
        return
    text = f"Date: {date}\nSHA256:\n {'0' * 64} 1 {WANTED}\n"
    with pytest.raises(InputError, match=r"^R: Release: Date .* is not an RFC 2822 date$"):
        parse_release(text, SUITE, "arm64", source="R")


@pytest.mark.parametrize("date", ["0", "Sat, 99 Jun 2023 08:55:33 UTC", "Fri, 31 Dec 9999 23:59:59 -0100"])
def test_examples_of_release_dates_that_are_no_date(date: str) -> None:
    with pytest.raises(InputError, match=r"^R: Release: Date .* is not an RFC 2822 date$"):
        parse_release(f"Date: {date}\nSHA256:\n {'0' * 64} 1 {WANTED}\n", SUITE, "arm64", source="R")


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)).map(
           lambda moment: moment.replace(microsecond=0)),
       st.integers(-14 * 60, 14 * 60))
def test_the_snapshot_timestamp_is_utc_whatever_the_dates_offset(moment: datetime, minutes: int) -> None:
    local = moment.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    expected = local.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    assert snapshot_timestamp(email.utils.format_datetime(local)) == expected
    text = f"Date: {email.utils.format_datetime(local)}\nSHA256:\n {'0' * 64} 1 {WANTED}\n"
    assert parse_release(text, SUITE, "arm64", source="R").snapshot_timestamp == expected


def test_the_snapshot_urls_name_the_releases_utc_instant() -> None:
    assert snapshot_timestamp("Sat, 01 Jan 2000 00:00:00 +0001") == "19991231T235900Z"
    assert snapshot_timestamp("Sat, 01 Jan 2000 00:00:00 -0000") == "20000101T000000Z"  # naive: UTC already
    release = parse_release(f"Date: Sat, 10 Jun 2023 10:55:33 +0200\nSHA256:\n {'0' * 64} 1 {WANTED}\n",
                            SUITE, "arm64", source="R")
    package = DebPackage(package="p", version="1.0", architecture="arm64", filename="pool/main/p/p_1.0_arm64.deb",
                         sha256="0" * 64, size=1, suite="bookworm", archive="https://deb.debian.org/debian")
    closure = ClosureResult(packages=(package,), reasons={"p": "seed"})
    (pin,) = pins_from_closure(closure, {"bookworm": release})
    assert pin["urls"][1] == f"{SNAPSHOT_ROOT}/debian/20230610T085533Z/pool/main/p/p_1.0_arm64.deb"


@given(name=_names, size=_not_ascii_digits)
def test_a_packages_size_that_is_no_ascii_number_is_refused(name, size) -> None:
    fields = {"Package": name, "Version": "1.0", "Architecture": "arm64", "Filename": "pool/x.deb",
              "SHA256": "0" * 64, "Size": size}
    with pytest.raises(InputError, match=rf"^P: {re.escape(name)}: Size is not an integer: "):
        DebPackage.from_paragraph(fields, source="P")


@pytest.mark.parametrize("version", ["\u0661:1.0", "\u00b2:1.0"])
def test_a_version_epoch_in_other_than_ascii_digits_is_refused(version: str) -> None:
    with pytest.raises(InputError, match="not a Debian version"):
        DebVersion.parse(version)
