"""Small encoders and parsers with one obvious reference each: the gzip trailer a layer's
stream ends with (``oci.compression.gzip_trailer``, against ``gzip``), a registry's
``Location`` (``oci.registry_http.http_url``/``redirect_target``, against ``urllib``)
and the md5sums of a .deb (``compose.debian_base.parse_md5sums``, as ``md5sum`` writes them)."""

from __future__ import annotations

import gzip
import hashlib
import urllib.parse
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.compose.debian_base import parse_md5sums
from sparkflake.core.errors import InputError
from sparkflake.oci.compression import gzip_trailer
from sparkflake.oci.registry_http import http_url, redirect_target

pytestmark = pytest.mark.oci


@given(st.binary(max_size=2000), st.integers(0, 3))
def test_the_gzip_trailer_is_the_one_gzip_writes(data: bytes, wraps: int) -> None:
    assert gzip_trailer(zlib.crc32(data), len(data)) == gzip.compress(data, mtime=0)[-8:]
    # ISIZE is the size modulo 2**32 (RFC 1952)
    assert gzip_trailer(zlib.crc32(data), len(data) + wraps * (1 << 32)) == gzip_trailer(zlib.crc32(data), len(data))


_hosts = st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z]{2,6}){0,2}", fullmatch=True),
                   st.sampled_from(["127.0.0.1", "[::1]", "[fe80::1]"]))
_paths = st.from_regex(r"(/[A-Za-z0-9._~%-]{0,10}){0,4}(\?[a-z=&0-9]{1,12})?", fullmatch=True)


@given(st.sampled_from(["http", "https"]), _hosts, st.none() | st.integers(0, 65535), _paths)
def test_an_http_url_reads_back_as_urllib_splits_it(scheme, host, port, path) -> None:
    text = f"{scheme}://{host}{'' if port is None else f':{port}'}{path}"
    url = http_url(text)
    assert url is not None and url == urllib.parse.urlsplit(text)
    assert url.port == port and url.geturl() == text


@given(st.one_of(
    st.text(max_size=30),
    st.builds(lambda host, port: f"http://{host}:{port}/", _hosts, st.integers(65536, 10**7)),
    st.builds(lambda host, text: f"https://{host}/{text}", _hosts, st.text(st.characters(min_codepoint=0x80), min_size=1, max_size=3)),
    st.builds(lambda host: f"ftp://{host}/x", _hosts),
    st.sampled_from(["http://[::1/", "http:///path", "https://h:x/", "http://h /x", "http://h/\x7f"]),
))
def test_anything_else_is_no_http_url(text: str) -> None:
    url = http_url(text)
    if url is None:
        return
    # what is accepted is a printable ASCII http(s) URL with a host and a valid port
    assert text.isascii() and text.isprintable() and " " not in text
    assert url.scheme in ("http", "https") and url.hostname and (url.port is None or 0 <= url.port <= 65535)


@given(_hosts, _paths, st.one_of(_paths.filter(bool), st.text(max_size=20)))
def test_a_redirect_leads_where_urljoin_says_or_is_refused_naming_it(host, base_path, location) -> None:
    base = f"https://{host}{base_path or '/'}"
    try:
        joined = urllib.parse.urljoin(base, location)
    except ValueError:
        joined = None
    expected = http_url(joined) if joined is not None else None
    if expected is None:
        with pytest.raises(InputError, match=r"^the blob: the registry pointed to "):
            redirect_target(base, location, "the blob")
    else:
        assert redirect_target(base, location, "the blob") == expected


# Debian's pool paths: no newline and none of the other line breaks a str knows
_deb_paths = st.from_regex(r"(usr|etc|lib)(/[A-Za-z0-9._+@:, -]{1,12}){1,4}", fullmatch=True)


@given(st.dictionaries(_deb_paths, st.binary(max_size=40), max_size=8), st.booleans())
def test_md5sums_read_back_as_md5sum_writes_them(files: dict[str, bytes], dotted: bool) -> None:
    sums = {path: hashlib.md5(content).hexdigest() for path, content in files.items()}
    text = "".join(f"{digest}  {'./' if dotted else ''}{path}\n" for path, digest in sums.items())
    assert parse_md5sums(text) == sums
