"""Hypothesis strategies for valid lock records, shared by the lock and profile tests."""

from __future__ import annotations

import base64
import itertools

from hypothesis import strategies as st

from sparkflake.lock.pins import (
    DebPin,
    FilePin,
    GitPin,
    Lock,
    OciPin,
    SdistPin,
    Target,
    WheelPin,
    sdist_input_name,
)

hex64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
hex40 = st.binary(min_size=20, max_size=20).map(bytes.hex)
sri_sha256 = st.binary(min_size=32, max_size=32).map(
    lambda raw: "sha256-" + base64.b64encode(raw).decode("ascii")
)
oci_digest = hex64.map(lambda digest: f"sha256:{digest}")
sizes = st.integers(min_value=0, max_value=2**63 - 1)

# URL paths: any printable character that is not whitespace (percent-encoding is the
# fetcher's business; the lock keeps the string), so the writer's escaping is exercised
_url_char = st.characters(
    blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="\x85\xa0"
)
_host = st.from_regex(r"[a-z0-9]{1,12}(\.[a-z0-9]{1,8}){0,2}", fullmatch=True)
https_url = st.builds(
    lambda host, path: f"https://{host}/{path}",
    _host,
    st.text(_url_char, max_size=40).filter(lambda text: not any(c.isspace() for c in text)),
)
file_url = st.text(_url_char, min_size=1, max_size=20).filter(
    lambda text: not any(c.isspace() for c in text)
).map(lambda path: f"file:///{path}")
url = st.one_of(https_url, file_url)
urls = st.lists(url, min_size=1, max_size=3, unique=True).map(tuple)

distribution = st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,4}){0,2}", fullmatch=True)
version = st.builds(
    lambda parts, suffix: ".".join(str(part) for part in parts) + suffix,
    st.lists(st.integers(0, 300), min_size=1, max_size=4),
    st.sampled_from(["", "rc1", "a2", ".post1", ".dev3", "b4.post2"]),
)

_PY_ABI = [("cp311", "cp311"), ("cp38", "abi3"), ("py3", "none"), ("cp311", "none")]
_PLATFORMS = ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "any"]


@st.composite
def wheels(draw: st.DrawFn) -> WheelPin:
    name = draw(distribution)
    ver = draw(version)
    py, abi = draw(st.sampled_from(_PY_ABI))
    pythons = [py] if py != "py3" or not draw(st.booleans()) else ["py2", "py3"]
    platforms = draw(st.lists(st.sampled_from(_PLATFORMS), min_size=1, max_size=2, unique=True))
    filename = (
        f"{name.replace('-', '_')}-{ver}-{'.'.join(pythons)}-{abi}-{'.'.join(platforms)}.whl"
    )
    tags = [f"{p}-{abi}-{plat}" for p, plat in itertools.product(pythons, platforms)]
    tags = draw(st.permutations(tags))
    return WheelPin(
        name=name,
        version=ver,
        filename=filename,
        sha256=draw(hex64),
        size=draw(sizes),
        tags=tuple(tags),
        urls=draw(urls),
    )


@st.composite
def sdists(draw: st.DrawFn) -> SdistPin:
    name = draw(distribution)
    ver = draw(version)
    extension = draw(st.sampled_from([".tar.gz", ".zip"]))
    return SdistPin(
        name=sdist_input_name(name),
        version=ver,
        filename=f"{name.replace('-', '_')}-{ver}{extension}",
        sha256=draw(hex64),
        size=draw(sizes),
        urls=draw(urls),
    )


@st.composite
def debs(draw: st.DrawFn) -> DebPin:
    package = draw(st.from_regex(r"[a-z0-9][a-z0-9.+-]{1,20}", fullmatch=True))
    architecture = draw(st.sampled_from(["arm64", "all", "amd64"]))
    deb_version = draw(st.from_regex(r"([0-9]{1,2}:)?[0-9][A-Za-z0-9.+~]{0,10}(-[0-9a-z.+~]{1,8})?", fullmatch=True))
    return DebPin(
        name=f"{package}:{architecture}",
        package=package,
        version=deb_version,
        architecture=architecture,
        sha256=draw(hex64),
        size=draw(sizes),
        urls=draw(urls),
    )


plain_name = st.from_regex(r"[a-z0-9][a-z0-9._+-]{0,30}", fullmatch=True)

git_url = st.one_of(
    url,
    st.from_regex(r"(git|ssh|http)://[a-z0-9.]{1,12}(:[0-9]{1,5})?/[a-z0-9/._-]{0,20}", fullmatch=True),
)
gits = st.builds(
    GitPin,
    name=plain_name,
    urls=st.lists(git_url, min_size=1, max_size=3, unique=True).map(tuple),
    rev=hex40,
    tree=hex40,
    nar_hash=st.one_of(st.none(), sri_sha256),
    source_sha256=st.one_of(st.none(), hex64),
    archive_urls=st.lists(st.one_of(https_url, file_url), max_size=2, unique=True).map(tuple),
)

_repository = st.sampled_from(
    [
        "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache",
        "localhost:5000/sparkflake/glm53",
        "docker.io/library/debian",
        "registry.example/a__b/c-d",
    ]
)
_tag = st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True))


@st.composite
def ocis(draw: st.DrawFn) -> OciPin:
    repository = draw(_repository)
    tag = draw(_tag)
    index, manifest = draw(
        st.sampled_from([(True, False), (False, True), (True, True)])
    )
    return OciPin(
        name=draw(plain_name),
        reference=repository if tag is None else f"{repository}:{tag}",
        index_digest=draw(oci_digest) if index else None,
        manifest_digest=draw(oci_digest) if manifest else None,
        config_digest=draw(st.one_of(st.none(), oci_digest)),
    )


# free text (notes for people): any character TOML can carry, control characters included
free_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60)


@st.composite
def files(draw: st.DrawFn) -> FilePin:
    file_urls = draw(st.lists(url, max_size=2, unique=True).map(tuple))
    note = draw(free_text) if not file_urls else draw(st.one_of(st.none(), free_text))
    return FilePin(
        name=draw(plain_name),
        sha256=draw(hex64),
        size=draw(sizes),
        urls=file_urls,
        how_to_supply=note,
    )


pins = st.one_of(wheels(), sdists(), debs(), gits, ocis(), files())

targets = st.builds(
    Target,
    platform=st.sampled_from(["linux/arm64", "linux/amd64", "linux/arm64/v8"]),
    python=st.sampled_from(["3.11", "3.11.2", "3.12"]),
    glibc=st.sampled_from(["2.36", "2.28", "2.17"]),
)

locks = st.builds(
    Lock,
    target=targets,
    inputs=st.lists(pins, max_size=8, unique_by=lambda pin: pin.name).map(tuple),
)


# The strategies themselves: every generated record is valid and survives its dict form.

from hypothesis import given  # noqa: E402

from sparkflake.lock.lock_file import pin_from_dict, pin_to_dict  # noqa: E402


@given(pins)
def test_generated_pin_survives_its_dict_form(pin) -> None:
    document = pin_to_dict(pin)
    assert document["kind"] == pin.kind
    assert list(document)[:2] == ["kind", "name"]
    rebuilt = pin_from_dict({k: v for k, v in document.items()}, "inputs[0]")
    assert rebuilt == pin


@given(targets)
def test_target_tags_prefer_the_newest_manylinux(target) -> None:
    tags = target.supported_tags()
    assert len(tags) == len(set(tags))
    assert tags[0] == f"{target.python_tag}-{target.python_tag}-{target.manylinux}_{target.wheel_architecture}"
    assert tags[-1].endswith("-none-any")
