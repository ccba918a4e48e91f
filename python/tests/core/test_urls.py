"""The one URL check of pinned inputs: credentials, option-like hosts, invisible characters
and dot steps refused; ordinary forge, PyPI, Debian and file URLs accepted."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.urls import redacted, url_problem

pytestmark = pytest.mark.nix_sandbox

GIT = ("https", "http", "git", "ssh", "file")
FILE = ("https", "file")

_host = st.from_regex(r"[a-z0-9]{1,12}(\.[a-z0-9]{1,8}){0,2}", fullmatch=True)
_path = st.from_regex(r"[A-Za-z0-9_+~%-]{1,12}(/[A-Za-z0-9_.+~%-]{1,12}){0,3}", fullmatch=True).filter(
    lambda path: not any(step in (".", "..") for step in path.split("/"))
)
_secret = st.from_regex(r"[A-Za-z0-9_]{6,20}", fullmatch=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://files.pythonhosted.org/packages/aa/vllm-0.33.0.tar.gz",
        "https://snapshot.debian.org/archive/debian/20260711T101637Z/pool/main/b/base-files/b_12.4+deb12u15_arm64.deb",
        "https://github.com/vllm-project/vllm.git",
        "ssh://git@github.com/vllm-project/vllm.git",
        "git://127.0.0.1:9418/repo.git",
        "http://[::1]:8080/repo.git",
        "file:///srv/mirror/libnccl.so.2",
    ],
)
def test_ordinary_urls_pass(url: str) -> None:
    assert url_problem(url, GIT) is None


@pytest.mark.parametrize(
    ("url", "schemes", "problem"),
    [
        ("https://user:token@example.org/f.whl", FILE, "carries a credential (user:password@)"),
        ("https://token@example.org/f.whl", FILE, "carries a credential (user@)"),
        ("https://u:t@example.org/r.git", GIT, "credentials never go in a lock"),
        ("ssh://git:tok@example.org/r.git", GIT, "carries a credential (user:password@)"),
        ("ssh://-oProxyCommand=touch%20x/r.git", GIT, "would be read as an option"),
        ("ssh://-oProxyCommand=x@example.org/r.git", GIT, "is not letters, digits"),
        ("https://example.org/\u202egnp.exe", FILE, "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("https://exa\u200bmple.org/f", FILE, "U+200B ZERO WIDTH SPACE"),
        ("file:///etc/../../root/.ssh/id_ed25519", FILE, "'.' or '..' steps"),
        ("file:///srv/%2e%2e/etc/shadow", FILE, "'.' or '..' steps"),
        ("file://host/srv/f", FILE, "names no host"),
        ("https:///nohost", FILE, "no host"),
        ("https://example.org:99999/f", FILE, "not a URL"),
        ("https://h.example/f.whl?token=ghs_x", FILE, "query or fragment"),
        ("https://h.example/f.tar.gz?X-Amz-Signature=ab&X-Amz-Credential=AKIA", FILE, "query or fragment"),
        ("https://h.example/f.whl#sha256=ab", FILE, "query or fragment"),
        ("https://h.example/f.whl?", FILE, "query or fragment"),
        ("git://h.example/r.git?private_token=x", GIT, "credentials never go in a lock"),
        ("https://exa_mple.org$/f", FILE, "is not a host name"),
        ("ext::sh -c touch% /tmp/pwned", GIT, "spaces, control"),
        ("ftp://example.org/f", FILE, "unsupported scheme"),
        ("https://example.org", FILE, "no absolute path"),
    ],
)
def test_hostile_urls_are_refused_with_the_reason(url: str, schemes: tuple[str, ...], problem: str) -> None:
    found = url_problem(url, schemes)
    assert found is not None and problem in found


@given(st.sampled_from(["https", "http", "git", "ssh"]), st.from_regex(r"[a-z0-9._-]{1,12}", fullmatch=True),
       _secret, _host, _path)
def test_a_password_is_refused_in_every_scheme_and_never_shown(
    scheme: str, user: str, secret: str, host: str, path: str
) -> None:
    url = f"{scheme}://{user}:{secret}@{host}/{path}"
    problem = url_problem(url, GIT)
    assert problem is not None and "credential" in problem
    # the whole shown form, not "secret not in it": a secret may equal the host or the path
    assert redacted(url) == f"{scheme}://***@{host}/{path}"


@given(st.sampled_from(["https", "http", "git", "ssh"]), _host, _path)
def test_a_plain_url_passes_and_is_shown_unchanged(scheme: str, host: str, path: str) -> None:
    url = f"{scheme}://{host}/{path}"
    assert url_problem(url, GIT) is None
    assert redacted(url) == url


@given(st.sampled_from(["https", "ssh", "git"]), st.from_regex(r"-[A-Za-z0-9=%]{0,20}", fullmatch=True), _path)
def test_an_option_like_host_is_refused(scheme: str, host: str, path: str) -> None:
    problem = url_problem(f"{scheme}://{host}/{path}", GIT)
    assert problem is not None


_invisible = st.characters(categories=("Cc", "Cf", "Co", "Zs", "Zl", "Zp"))


@given(_host, _path, _invisible, st.integers(0, 30))
def test_an_invisible_character_anywhere_is_refused_by_its_name(host: str, path: str, char: str, at: int) -> None:
    url = f"https://{host}/{path}"
    at = min(at, len(url))
    problem = url_problem(url[:at] + char + url[at:], FILE)
    assert problem is not None and f"U+{ord(char):04X}" in problem
    assert unicodedata.name(char, "a control character") in problem


@given(_path, st.sampled_from([".", "..", "%2e", "%2E%2e"]), _path)
def test_a_dot_step_is_refused(before: str, step: str, after: str) -> None:
    assert "'..' steps" in (url_problem(f"file:///{before}/{step}/{after}", FILE) or "")


_query = st.from_regex(r"[A-Za-z0-9_=&%.@/?#-]{0,30}", fullmatch=True)


@given(st.sampled_from(["https", "http", "git", "ssh", "file"]), _host, _path, st.sampled_from("?#"), _secret, _query)
def test_a_query_or_fragment_is_refused_and_never_shown(
    scheme: str, host: str, path: str, mark: str, secret: str, tail: str
) -> None:
    authority = "" if scheme == "file" else host
    url = f"{scheme}://{authority}/{path}{mark}{secret}{tail}"
    problem = url_problem(url, GIT)
    assert problem is not None and "query or fragment" in problem
    shown = redacted(url)
    # the whole shown form (the secret may equal the host or the path, as above): the text up
    # to the mark, or nothing past the scheme where an "@" of the query could be the user's
    assert shown in (f"{scheme}://{authority}/{path}{mark}***", f"{scheme}://***")
    assert shown == f"{scheme}://***" or "@" not in f"{secret}{tail}"


@given(st.sampled_from(["https", "http", "git", "ssh"]), st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
       st.from_regex(r"[A-Za-z0-9_/?#:%]{1,20}", fullmatch=True), _host, _path)
def test_a_password_of_any_characters_is_never_shown(
    scheme: str, user: str, secret: str, host: str, path: str
) -> None:
    # "https://alice:S3cr/etPW@host" once showed the password whole: urllib reads "S3cr" as the
    # port and quoted it in its error, and the redaction cut the authority at the first "/"
    url = f"{scheme}://{user}:{secret}@{host}/{path}"
    problem = url_problem(url, GIT)
    # refused, or read as a port and a path ("https://u:8080/x@h/p" is a URL without user
    # information); a refusal quotes nothing of the URL (its quoted parts are user and host)
    assert problem is None or "'" not in problem
    shown = redacted(url)
    assert shown in (f"{scheme}://***@{host}/{path}", f"{scheme}://***")
