"""A client for the OCI distribution API (the CNCF distribution registry, ghcr.io, ...).

Pushes are digest-preserving: our blobs and our exact manifest bytes go up, and the digest
the registry answers (``Docker-Content-Digest``) must equal the sha256 of those bytes, so
the manifest digest known at build time is the one the registry serves. Pulls verify every
byte against its digest before anything is written under its final name.

Limits, on purpose: a manifest or index is at most 4 MiB (the distribution spec's own
guidance), read in full only up to that limit; blobs stream. Plain HTTP (``insecure``) is
allowed only to a loopback registry; anything else is HTTPS, optionally with a private CA.
Anonymous access first; on a 401 the ``WWW-Authenticate`` challenge is answered with a
bearer token from the realm (with Basic credentials if given) or with Basic credentials.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import ssl
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.digest import is_digest
from ..core.documents import parse_json_object
from ..core.errors import CheckFailed, InputError
from ..core.progress import ProgressCallback
from ..core.records import describe
from .media_types import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    INDEX_MEDIA_TYPES,
    MANIFEST_MEDIA_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    TAG_PATTERN,
)
from .registry_auth import Credentials, RegistryAuth, is_loopback, tls_context
from .registry_http import READ_ERRORS, ResponseBody, describe_error, get_response, redirect_target

if TYPE_CHECKING:  # imported where used: `verify` needs none of them (bench/bench_sign.py)
    from pathlib import Path

    from .types import Platform

MANIFEST_LIMIT = 4 * 1024 * 1024
CHUNK = 1 << 20

# Image manifests first, then indexes.
ACCEPT = ", ".join((OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_MANIFEST_LIST))

_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,18})")
# matched whole (``fullmatch``: ``$`` would let a trailing newline through)
_REGISTRY = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?|\[[0-9a-fA-F:]+\](?::[0-9]{1,5})?")
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


# ---- references -------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """``REGISTRY/REPOSITORY[:TAG][@sha256:HEX]``; the registry part is required (no implied
    docker.io: the operator always names where an image lives)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What goes in ``/v2/<repo>/manifests/<reference>``: the digest when pinned."""
        if self.digest:
            return self.digest
        return self.tag or "latest"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str) -> Reference:
    """Parse ``REGISTRY/REPO[:TAG][@sha256:HEX]``; a leading ``docker://`` is accepted."""
    remainder, digest = text.removeprefix("docker://"), None
    if "@" in remainder:
        remainder, digest = remainder.split("@", 1)
        if not is_digest(digest):
            raise InputError(f"{text}: digest: expected sha256: and 64 lowercase hex digits, got {digest!r}",
                             check_id="registry.digest")
    if "/" not in remainder:
        raise InputError(f"{text}: expected REGISTRY/REPOSITORY[:TAG][@DIGEST]")
    registry, path = remainder.split("/", 1)
    if not registry or not _REGISTRY.fullmatch(registry):
        raise InputError(f"{text}: registry: expected HOST[:PORT], got {registry!r}")
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
        if not TAG_PATTERN.fullmatch(tag):
            raise InputError(f"{text}: tag: expected [A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}, got {tag!r}")
    if not _REPOSITORY.fullmatch(path):
        raise InputError(f"{text}: repository: expected lowercase path components, got {path!r}")
    return Reference(registry=registry, repository=path, tag=tag, digest=digest)


def _split_host(registry: str) -> tuple[str, int | None]:
    if registry.startswith("["):
        host, _, rest = registry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    host, _, port = registry.partition(":")
    return host, int(port) if port else None


# ---- results ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Manifest:
    """A manifest or index as the registry served it, its bytes checked against ``digest``."""

    media_type: str
    digest: str
    content: bytes

    def document(self) -> dict[str, Any]:
        return json_object(self.content, self.digest)


# ---- the client -------------------------------------------------------------------------
class RegistryClient:
    def __init__(
        self,
        registry: str,
        *,
        insecure: bool = False,
        ca_file: str | None = None,
        credentials: Credentials | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.registry = registry
        self.host, self.port = _split_host(registry)
        if insecure and not is_loopback(self.host):
            raise InputError(
                f"{registry}: plain HTTP is allowed only to a loopback registry; use HTTPS "
                "(--ca-file for a private CA)"
            )
        self.insecure = insecure
        self.timeout = timeout
        self._tls = None if insecure else tls_context(ca_file)
        self.auth = RegistryAuth(registry, credentials, self._connection, seconds=timeout)

    # -- transport
    def _connection(self, host: str, port: int | None, secure: bool) -> http.client.HTTPConnection:
        if secure:
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._tls, blocksize=CHUNK)
        return http.client.HTTPConnection(host, port, timeout=self.timeout, blocksize=CHUNK)

    def _request(
        self,
        method: str,
        path_or_url: str,
        *,
        scope: str,
        headers: dict[str, str] | None = None,
        body: Callable[[], Any] | None = None,
        expect: tuple[int, ...] = (200,),
        what: str,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """One exchange, answering at most one auth challenge and following redirects;
        ``body`` is a factory so a retried request re-reads its body from the start."""
        own_base = f"{'http' if self.insecure else 'https'}://{_netloc(self.host, self.port)}/"
        url = path_or_url
        authorized = False
        for _ in range(6):
            # a path of ours, or a URL the registry gave (a redirect, an upload's Location)
            parsed = redirect_target(own_base, url, what)
            host, port = parsed.hostname or "", parsed.port
            secure = parsed.scheme == "https"
            target = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
            own = (host, port) == (self.host.lower(), self.port)
            if not secure and not is_loopback(host):
                raise InputError(f"{what}: refusing a plain HTTP redirect to {host}")
            request_headers = dict(headers or {})
            if own:
                request_headers.update(self.auth.headers(scope))
            connection = self._connection(host, port, secure)
            try:
                connection.request(method, target, body=body() if body else None, headers=request_headers)
                response = get_response(connection, self.timeout, what)
            except ssl.SSLError as exc:
                connection.close()
                hint = ""
                if exc.reason == "WRONG_VERSION_NUMBER":  # the server answered without TLS
                    hint = (f"; {self.registry} speaks plain HTTP: pass --insecure "
                            "(--insecure-registry for fanout), allowed for loopback registries")
                raise InputError(f"{what}: TLS with {self.registry} failed: {exc.reason or exc}{hint}") from exc
            except READ_ERRORS as exc:
                connection.close()
                raise InputError(f"{what}: cannot reach registry {self.registry}: {describe_error(exc)}") from exc
            if response.status in expect:
                return connection, response
            detail = self._error_detail(connection, response, what)
            if response.status == 401 and own and not authorized:
                self.auth.answer_challenge(response.headers.get("WWW-Authenticate", ""), scope, what)
                authorized = True
                continue
            if response.status in (301, 302, 303, 307, 308) and response.headers.get("Location"):
                here = f"{'https' if secure else 'http'}://{_netloc(host, port)}{target}"
                url = redirect_target(here, response.headers["Location"], what).geturl()
                if response.status == 303:
                    method, body = "GET", None
                continue
            if response.status == 401:
                raise InputError(f"{what}: {self.registry} refused the credentials (401): {detail}")
            if response.status == 403:
                raise InputError(f"{what}: {self.registry} denied access (403): {detail}")
            if response.status == 404:
                raise CheckFailed(f"{what}: not found in {self.registry} (404): {detail}", check_id="registry.not-found")
            raise CheckFailed(f"{what}: {self.registry} answered HTTP {response.status}: {detail}",
                              check_id="registry.http")
        raise InputError(f"{what}: too many redirects from {self.registry}")

    def _error_detail(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
                      what: str) -> str:
        """What an error answer says (its first 64 KiB, read within the time-out), or its reason."""
        try:
            with ResponseBody(connection, response, seconds=self.timeout, what=what) as served:
                raw = served.read(65536)
        except InputError:
            return response.reason
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            document = None
        errors = document.get("errors") if isinstance(document, dict) else None
        if isinstance(errors, list) and errors:
            return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
        return raw.decode("utf-8", "replace")[:300]

    # -- API
    def blob_size(self, repository: str, digest: str) -> int | None:
        """HEAD a blob: its size if the registry has it, else None."""
        what = f"HEAD {self.registry}/{repository}@{digest}"
        connection, response = self._request(
            "HEAD", f"/v2/{repository}/blobs/{digest}", scope=_scope(repository, "pull"),
            expect=(200, 404), what=what,
        )
        connection.close()  # one exchange per connection: a body (a 303 made it a GET) is not read
        if response.status == 404:
            return None
        return _required_length(response, what)

    def push_blob(self, repository: str, digest: str, size: int, path: Path) -> bool:
        """Upload one blob monolithically unless the registry already has it; True if sent."""
        check_digest(digest)
        if self.blob_size(repository, digest) == size:
            return False
        scope = _scope(repository, "pull,push")
        what = f"push {self.registry}/{repository}@{digest}"
        connection, response = self._request(
            "POST", f"/v2/{repository}/blobs/uploads/", scope=scope, expect=(202,),
            headers={"Content-Length": "0"}, what=what,
        )
        connection.close()
        location = response.headers.get("Location")
        if not location:
            raise CheckFailed(f"{what}: the registry started an upload without a Location")
        separator = "&" if "?" in location else "?"
        opened: list[Any] = []

        def body() -> Any:
            for handle in opened:
                handle.close()
            handle = open(path, "rb")  # noqa: SIM115 - closed below, reopened on a retry
            opened.append(handle)
            return handle

        try:
            connection, response = self._request(
                "PUT", f"{location}{separator}digest={urllib.parse.quote(digest)}", scope=scope,
                expect=(201,), body=body,
                headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
                what=what,
            )
            connection.close()
        finally:
            for handle in opened:
                handle.close()
        answered = _one_header(response, "Docker-Content-Digest", what)
        if answered and answered != digest:
            raise CheckFailed(f"{what}: the registry stored the blob as {answered}", check_id="registry.blob-digest")
        return True

    def push_small_blob(self, repository: str, content: bytes) -> str:
        """Upload a blob made in memory (a signature payload, an SBOM); returns its digest."""
        import tempfile
        from pathlib import Path

        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        with tempfile.TemporaryDirectory(prefix="sparkflake-blob.") as scratch:
            path = Path(scratch) / "blob"
            path.write_bytes(content)
            self.push_blob(repository, digest, len(content), path)
        return digest

    def referrers(self, repository: str, digest: str) -> dict[str, Any] | None:
        """The index the OCI 1.1 referrers API answers for ``digest``, or None when the
        registry has no referrers API (404; distribution 2.x), so the caller falls back to
        the ``sha256-<hex>`` tag (distribution-spec, "Referrers Tag Schema")."""
        check_digest(digest)
        what = f"referrers {self.registry}/{repository}@{digest}"
        connection, response = self._request(
            "GET", f"/v2/{repository}/referrers/{digest}", scope=_scope(repository, "pull"),
            headers={"Accept": OCI_INDEX}, expect=(200, 404), what=what,
        )
        with ResponseBody(connection, response, seconds=self.timeout, what=what) as served:
            content = served.read_whole(MANIFEST_LIMIT)
        if response.status == 404:
            return None
        if len(content) > MANIFEST_LIMIT:
            raise CheckFailed(f"{what}: more than {MANIFEST_LIMIT} bytes", check_id="registry.manifest-limit")
        return json_object(content, what)

    def push_manifest(self, repository: str, reference: str, content: bytes, media_type: str) -> str:
        """PUT our exact manifest bytes; returns the digest, which must be sha256(content)."""
        ours = "sha256:" + hashlib.sha256(content).hexdigest()
        what = f"push manifest {self.registry}/{repository}:{reference}"
        if len(content) > MANIFEST_LIMIT:
            raise InputError(f"{what}: {len(content)} bytes exceeds the {MANIFEST_LIMIT}-byte manifest limit")
        connection, response = self._request(
            "PUT", f"/v2/{repository}/manifests/{reference}", scope=_scope(repository, "pull,push"),
            expect=(201,), body=lambda: content,
            headers={"Content-Type": media_type, "Content-Length": str(len(content))}, what=what,
        )
        connection.close()
        answered = _one_header(response, "Docker-Content-Digest", what)
        if answered is not None and answered != ours:
            raise CheckFailed(
                f"{what}: the registry answered digest {answered}, our manifest bytes are {ours}",
                check_id="registry.manifest-digest",
            )
        return ours

    def head_manifest(self, repository: str, reference: str) -> tuple[str, str, int | None] | None:
        """(digest, media type, size) of a manifest, or None if the registry lacks it; the
        digest is "" and the size None when the registry does not say them (each a SHOULD of
        the distribution spec)."""
        what = f"HEAD {self.registry}/{repository}:{reference}"
        connection, response = self._request(
            "HEAD", f"/v2/{repository}/manifests/{reference}", scope=_scope(repository, "pull"),
            headers={"Accept": ACCEPT}, expect=(200, 404), what=what,
        )
        connection.close()
        if response.status == 404:
            return None
        digest = _one_header(response, "Docker-Content-Digest", what) or ""
        if digest and not is_digest(digest):
            raise CheckFailed(f"{what}: Docker-Content-Digest {digest!r} is not sha256: and 64 lowercase hex digits",
                              check_id="registry.manifest-digest")
        return digest, response.headers.get("Content-Type", ""), _content_length(response, what)

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        what = f"manifest {self.registry}/{repository}{'@' if reference.startswith('sha256:') else ':'}{reference}"
        connection, response = self._request(
            "GET", f"/v2/{repository}/manifests/{reference}", scope=_scope(repository, "pull"),
            headers={"Accept": ACCEPT}, what=what,
        )
        with ResponseBody(connection, response, seconds=self.timeout, what=what) as served:
            declared = _content_length(response, what)
            if declared is not None and declared > MANIFEST_LIMIT:
                raise CheckFailed(f"{what}: {declared} bytes exceeds the {MANIFEST_LIMIT}-byte manifest limit",
                                  check_id="registry.manifest-limit")
            content = served.read_whole(MANIFEST_LIMIT)
        if len(content) > MANIFEST_LIMIT:
            raise CheckFailed(f"{what}: more than {MANIFEST_LIMIT} bytes", check_id="registry.manifest-limit")
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise CheckFailed(f"{what}: the bytes served hash to {digest}", check_id="registry.manifest-digest")
        answered = _one_header(response, "Docker-Content-Digest", what)
        if answered and answered != digest:
            raise CheckFailed(f"{what}: Docker-Content-Digest {answered} but the bytes hash to {digest}",
                              check_id="registry.manifest-digest")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        document = json_object(content, what)
        declared_type = document.get("mediaType")
        if declared_type is not None and not isinstance(declared_type, str):
            raise CheckFailed(f"{what}: $.mediaType: expected a string, got {describe(declared_type)}",
                              check_id="registry.media-type")
        media_type = declared_type or media_type
        if media_type not in MANIFEST_MEDIA_TYPES | INDEX_MEDIA_TYPES:
            raise CheckFailed(f"{what}: unsupported media type {media_type!r}", check_id="registry.media-type")
        return Manifest(media_type=media_type, digest=digest, content=content)

    def read_blob(self, repository: str, digest: str, *, limit: int = MANIFEST_LIMIT) -> bytes:
        """A small blob (a config) in memory, verified."""
        chunks = list(self._blob_chunks(repository, digest, limit=limit))
        return b"".join(chunks)

    def fetch_blob(self, repository: str, digest: str, destination: Path, *, size: int,
                   progress: ProgressCallback | None = None) -> int:
        """Stream a blob of ``size`` bytes (its descriptor's) to ``destination`` (atomic):
        nothing lands there unless it verified, and never more than ``size`` bytes."""
        from ..core.atomic_write import atomic_file

        written = 0
        with atomic_file(destination) as sink:
            for chunk in self._blob_chunks(repository, digest, size=size):
                sink.write(chunk)
                written += len(chunk)
                if progress:
                    progress(written, size, digest)
        return written

    def blob_response(self, repository: str, digest: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """A blob as the registry serves it, unchecked, for a reader that hashes the bytes
        itself (the audit's verifier); the caller closes the connection."""
        what = f"blob {self.registry}/{repository}@{digest}"
        return self._request("GET", f"/v2/{repository}/blobs/{digest}", scope=_scope(repository, "pull"), what=what)

    def _blob_chunks(self, repository: str, digest: str, *, size: int | None = None,
                     limit: int | None = None) -> Iterator[bytes]:
        check_digest(digest)
        what = f"blob {self.registry}/{repository}@{digest}"
        connection, response = self.blob_response(repository, digest)
        hasher = hashlib.sha256()
        received = 0
        with ResponseBody(connection, response, seconds=self.timeout, what=what) as served:
            while chunk := served.read(CHUNK):
                received += len(chunk)
                if limit is not None and received > limit:
                    raise CheckFailed(f"{what}: more than {limit} bytes", check_id="registry.blob-limit")
                if size is not None and received > size:
                    raise CheckFailed(f"{what}: more than the {size} bytes its descriptor says",
                                      check_id="registry.blob-size")
                hasher.update(chunk)
                yield chunk
        if size is not None and received != size:
            raise CheckFailed(f"{what}: {received} bytes, its descriptor says {size}", check_id="registry.blob-size")
        found = "sha256:" + hasher.hexdigest()
        if found != digest:
            raise CheckFailed(f"{what}: the bytes hash to {found}", check_id="registry.blob-digest")


# ---- manifests and platforms --------------------------------------------------------------
def select_platform(index: dict[str, Any], platform: Platform, where: str) -> dict[str, Any]:
    """The one manifest descriptor of an index for ``platform`` (``oci.types``' rule: arm64
    without a variant is v8)."""
    from .types import matching_entries, platform_text

    manifests = index.get("manifests")
    if not isinstance(manifests, list):
        raise CheckFailed(f"{where}: an index without a manifests array")
    matches: list[dict[str, Any]] = matching_entries(manifests, platform)
    if not matches:
        available = [
            platform_text(d["platform"]) for d in manifests if isinstance(d, dict) and isinstance(d.get("platform"), dict)
        ]
        raise CheckFailed(f"{where}: no manifest for {platform} (index has {available})", check_id="registry.platform")
    return matches[0]


def descriptor_fields(raw: Any, where: str) -> tuple[str, str, int]:
    if not isinstance(raw, dict):
        raise CheckFailed(f"{where}: expected a descriptor object")
    digest, media_type, size = raw.get("digest"), raw.get("mediaType"), raw.get("size")
    if not is_digest(digest):
        raise CheckFailed(f"{where}.digest: expected sha256:<64 hex>, got {digest!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CheckFailed(f"{where}.size: expected a non-negative integer, got {size!r}")
    return digest, media_type if isinstance(media_type, str) else "", size


def image_blobs(manifest: dict[str, Any], where: str) -> list[tuple[str, str, int]]:
    """(digest, media type, size) of the config and every layer of an image manifest."""
    blobs = [descriptor_fields(manifest.get("config"), f"{where}.config")]
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise CheckFailed(f"{where}.layers: expected an array")
    blobs += [descriptor_fields(layer, f"{where}.layers[{i}]") for i, layer in enumerate(layers)]
    return blobs


# ---- small pieces -----------------------------------------------------------------------
def _scope(repository: str, actions: str) -> str:
    return f"repository:{repository}:{actions}"


def _netloc(host: str, port: int | None) -> str:
    bracketed = f"[{host}]" if ":" in host else host
    return f"{bracketed}:{port}" if port else bracketed


def check_digest(digest: str) -> None:
    if not is_digest(digest):
        raise InputError(f"digest: expected sha256: and 64 lowercase hex digits, got {digest!r}",
                         check_id="registry.digest")


def _required_length(response: http.client.HTTPResponse, what: str) -> int:
    declared = _content_length(response, what)
    if declared is None:
        raise CheckFailed(f"{what}: no Content-Length in the registry's answer", check_id="registry.http")
    return declared


def _content_length(response: http.client.HTTPResponse, what: str) -> int | None:
    """The answer's Content-Length, if it has one: decimal digits that fit 63 bits (what
    http.client would take of "-1", "1e3" or "+5" is not a size)."""
    declared = _one_header(response, "Content-Length", what)
    if declared is None:
        return None
    if not _DECIMAL.fullmatch(declared):
        raise CheckFailed(f"{what}: Content-Length {declared!r} is not a byte count", check_id="registry.http")
    return int(declared)


def _one_header(response: http.client.HTTPResponse, name: str, what: str) -> str | None:
    """The one value of header ``name`` (None: absent); two that differ are refused, where
    ``headers.get`` would take the first."""
    values = {value.strip(" \t") for value in response.headers.get_all(name) or []}  # RFC 9112 5: OWS around it
    if len(values) > 1:
        raise CheckFailed(f"{what}: the registry answered {len(values)} different {name} headers",
                          check_id="registry.http")
    return values.pop() if values else None


def json_object(content: bytes, where: str) -> dict[str, Any]:
    """A document the registry served: one that is not a JSON object fails the check."""
    return parse_json_object(content, where, refusal=CheckFailed)


