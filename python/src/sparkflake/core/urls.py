"""The one check of a URL that a pinned input is fetched from.

A lock (and everything that takes URLs into a record: pylock files, git mirrors) is
published: its URLs are copied into the SBOM, the receipt, the image config and a layer. So
a URL must never carry a credential, must not be read by a tool as an option (a host
``-oProxyCommand=...`` for ssh), must read the same to a person as to a program (no control,
format or bidirectional characters: a right-to-left override hides what the URL says), and a
``file:`` URL names its file without ``.`` or ``..`` steps. A query or fragment is refused too:
it is where a token or a presigned URL's signature travels (``?token=``,
``?X-Amz-Signature=``), and a pinned file is named by its path, its bytes by the lock's hash.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse

# where a credential belongs instead: the fetchers read none from the lock, and git runs
# with a private HOME and no credential helper (fetch/git.py); what authenticates is the
# caller's SSH agent (ssh:// git URLs), or the operator fetches privately and hands over
CREDENTIALS_ELSEWHERE = (
    "credentials never go in a lock, which is published in the SBOM, the receipt and the "
    "image: import a privately fetched file with `sparkflake fetch --from DIR` (the lock "
    "binds its sha256), reach a private git repository over ssh:// with a key the SSH agent "
    "holds, or give a local copy with --git-mirror NAME=file:///PATH"
)

# control, format (the bidirectional overrides, zero-width characters), separators, private
# use, unassigned and surrogate code points: what makes a URL read otherwise than it is
_INVISIBLE = {"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp", "Zs"}
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


def url_problem(text: str, schemes: tuple[str, ...]) -> str | None:
    """Why ``text`` is not a safe URL of one of ``schemes`` (e.g. ``("https", "file")``), or
    None. ``ssh`` allows a user name (``git@host``, what forges require), never a password."""
    for char in text:
        if char.isspace() or unicodedata.category(char) in _INVISIBLE:
            name = unicodedata.name(char, "a control character")
            return f"a URL may not hold spaces, control or formatting characters, found U+{ord(char):04X} {name}"
    scheme, separator, _ = text.partition("://")
    if not separator or scheme not in schemes:
        return "unsupported scheme"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        # not urllib's words: they quote the text it could not read, which may be a password
        # ("https://user:pa/ss@host" reads "pa" as the port)
        return "not a URL: its host or port cannot be read"
    if scheme == "file":
        if parts.netloc:
            return "a file: URL names no host (file:///absolute/path)"
    else:
        problem = _authority_problem(scheme, parts.netloc, port)
        if problem:
            return problem
    if "?" in text or "#" in text:
        return f"the URL has a query or fragment (?..., #...), where tokens and signatures travel: {CREDENTIALS_ELSEWHERE}"
    if not parts.path.startswith("/"):
        return "no absolute path after the host"
    segments = urllib.parse.unquote(parts.path).split("/")
    if any(segment in (".", "..") for segment in segments):
        return "the path has '.' or '..' steps (name the file itself)"
    return None


def _authority_problem(scheme: str, netloc: str, port: int | None) -> str | None:
    userinfo, at, hostport = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        if colon or scheme != "ssh":
            return f"the URL carries a credential ({'user:password' if colon else 'user'}@): {CREDENTIALS_ELSEWHERE}"
        if not _SSH_USER.fullmatch(user):
            return f"the ssh user name {user!r} is not letters, digits and ._- (an option?)"
    host = hostport
    if port is not None:
        host = hostport.rsplit(":", 1)[0]
    elif hostport.endswith(":"):
        host = hostport[:-1]
    if not host:
        return "no host"
    if host.startswith("-"):
        return f"the host {host!r} would be read as an option"
    if not _HOST.fullmatch(host):
        return f"{host!r} is not a host name or [IPv6] address"
    return None


def redacted(text: str) -> str:
    """``text`` as it may be shown: everything up to the last ``@`` after the scheme (the
    user information, whatever characters a password holds) replaced by ``***``, and a query
    or fragment by ``?***`` / ``#***``, so a refusal does not print the credential it
    refuses. An ``@`` of a path hides the host too: shown less, never a secret."""
    scheme, separator, rest = text.partition("://")
    if not separator:
        return text
    user_end = rest.rfind("@")
    query = min((at for at in (rest.find("?"), rest.find("#")) if at >= 0), default=len(rest))
    if query < user_end:  # a password with "?" or "#", or a query with "@": which is which is unknowable
        return f"{scheme}://***"
    if user_end >= 0:
        rest, query = "***@" + rest[user_end + 1:], query - user_end + 3
    return f"{scheme}://{rest[:query + 1]}***" if query < len(rest) else f"{scheme}://{rest}"
