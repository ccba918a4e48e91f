"""How the registry client is trusted and how it proves who it is: the TLS trust (the
system's, or a private CA read with a bound), plain HTTP only to a loopback host, the
operator's credentials file, and the answer to a registry's ``WWW-Authenticate`` challenge
(distribution's token authentication: a bearer token from the realm, fetched with Basic
credentials if given; or Basic credentials on every request)."""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import re
import ssl
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from ..core.documents import read_json_file, read_regular_file
from ..core.errors import InputError
from .registry_http import READ_ERRORS, ResponseBody, describe_error, get_response, http_url

MAX_CREDENTIALS_BYTES = 64 << 10  # {"username", "password"}, a token at most a few KiB
MAX_CA_BYTES = 1 << 20  # a CA bundle (the system one is ~200 KiB)
TOKEN_RESPONSE_LIMIT = 4 * 1024 * 1024  # the token service's answer, bounded as a manifest is

_CHALLENGE_PARAM = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
# RFC 6750 section 2.1: b64token, the characters an Authorization: Bearer header carries
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")

# (host, port, secure) -> a connection not yet opened: the client's, with its timeout and TLS.
Connect = Callable[[str, int | None, bool], http.client.HTTPConnection]


def is_loopback(host: str) -> bool:
    bare = host.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str


def load_credentials(path: str | os.PathLike[str]) -> Credentials:
    """The --auth-file: a bounded read of a regular file (a FIFO or /dev/zero is refused)."""
    document = read_json_file(path, "registry credentials", MAX_CREDENTIALS_BYTES)
    if not isinstance(document, dict) or set(document) != {"username", "password"} or not all(
        isinstance(value, str) for value in document.values()
    ):
        raise InputError(f"{path}: expected {{\"username\": \"...\", \"password\": \"...\"}}")
    return Credentials(document["username"], document["password"])


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The system's trust, or the PEM certificates of ``ca_file`` read with a bound from a
    regular file (given as ``cafile``, ssl would open a FIFO and wait without end)."""
    if ca_file is None:
        return ssl.create_default_context()
    pem = read_regular_file(ca_file, "CA certificates (PEM)", MAX_CA_BYTES)
    try:
        return ssl.create_default_context(cadata=pem.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError) as exc:
        raise InputError(f"{ca_file}: not PEM certificates: {exc}") from None


class RegistryAuth:
    """The ``Authorization`` a client sends to one registry: none until the registry asks;
    then, per scope, the bearer token its challenge led to, or Basic credentials."""

    def __init__(self, registry: str, credentials: Credentials | None, connect: Connect, *, seconds: float) -> None:
        self.registry = registry
        self.credentials = credentials
        self._connect = connect
        self._seconds = seconds  # how long the token service may take to answer, and each read of it
        self._tokens: dict[str, str] = {}
        self._basic = False

    def headers(self, scope: str) -> dict[str, str]:
        if scope in self._tokens:
            return {"Authorization": f"Bearer {self._tokens[scope]}"}
        if self._basic and self.credentials:
            return {"Authorization": _basic_header(self.credentials)}
        return {}

    def answer_challenge(self, challenge: str, scope: str, what: str) -> None:
        """Take a 401's ``WWW-Authenticate`` header: Basic turns the credentials on; Bearer
        fetches a token for ``scope`` from the realm (plain HTTP only on loopback)."""
        scheme, _, params_text = challenge.strip().partition(" ")
        params = dict(_CHALLENGE_PARAM.findall(params_text))
        if scheme.lower() == "basic":
            if not self.credentials:
                raise InputError(f"{what}: {self.registry} requires credentials (401 Basic) and none were given")
            self._basic = True
            return
        if scheme.lower() != "bearer" or "realm" not in params:
            raise InputError(f"{what}: {self.registry} answered 401 with an unusable challenge {challenge!r}")
        realm = http_url(params["realm"])
        if realm is None:
            raise InputError(f"{what}: token realm {params['realm']!r} is not an http(s) URL of printable ASCII "
                             "with a host and a port")
        if realm.scheme == "http" and not is_loopback(realm.hostname or ""):
            raise InputError(f"{what}: refusing a plain HTTP token realm {params['realm']}")
        query = {"service": params["service"]} if "service" in params else {}
        query["scope"] = params.get("scope", scope)
        target = realm.path or "/"
        joined = "&".join(filter(None, [realm.query, urllib.parse.urlencode(query)]))
        headers = {"Accept": "application/json"}
        if self.credentials:
            headers["Authorization"] = _basic_header(self.credentials)
        asking = f"{what}: token service {params['realm']}"
        connection = self._connect(realm.hostname or "", realm.port, realm.scheme == "https")
        try:
            connection.request("GET", f"{target}?{joined}", headers=headers)
            response = get_response(connection, self._seconds, asking)
        except READ_ERRORS as exc:
            connection.close()
            raise InputError(f"{what}: cannot reach token service {params['realm']}: {describe_error(exc)}") from exc
        with ResponseBody(connection, response, seconds=self._seconds, what=asking) as served:
            payload = served.read_whole(TOKEN_RESPONSE_LIMIT)
        if response.status != 200:
            raise InputError(f"{what}: token service {params['realm']} answered HTTP {response.status} "
                             f"(credentials {'given' if self.credentials else 'not given'})")
        try:
            document = json.loads(payload)
            token = document.get("token") or document.get("access_token")
        except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, nested past the parser
            token = None
        if not isinstance(token, str) or not token:
            raise InputError(f"{what}: token service {params['realm']} returned no token")
        if not _BEARER_TOKEN.fullmatch(token):  # what an Authorization header can carry
            raise InputError(f"{what}: token service {params['realm']} returned a token that is not a bearer "
                             "token (RFC 6750 b64token)")
        self._tokens[scope] = token


def _basic_header(credentials: Credentials) -> str:
    raw = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()
