"""An image in a registry, read over the OCI distribution API into an ``ImageReader``, so
that it is verified by the same code as a layout or an archive.

Manifests come from ``RegistryClient.get_manifest`` (OCI and Docker media types in Accept,
anonymous or bearer-token auth, the 4 MiB manifest limit, a digest reference checked
against the bytes served). The config and the layer blobs are streamed raw, so the
verifier hashes them itself and names a mismatch; a blob's size comes from a HEAD before
any byte is hashed.
"""

from __future__ import annotations

import io
from typing import BinaryIO

from ..core.errors import InputError
from .media_types import INDEX_MEDIA_TYPES
from .reader import ImageReader, checked_digest, reader_from_manifest, select_platform_manifest
from .registry_auth import Credentials
from .registry_http import ResponseBody
from .remote import RegistryClient, parse_reference
from .types import BlobRef


class RegistryFiles:
    """The blobs of one repository, named by their digests."""

    def __init__(self, client: RegistryClient, repository: str, location: str) -> None:
        self._client = client
        self._repository = repository
        self._location = location

    def describe(self, name: str) -> str:
        return f"{self._location} blob {name}"

    def size(self, name: str) -> int | None:
        return self._client.blob_size(self._repository, name)

    def open(self, name: str) -> BinaryIO:
        # the raw exchange: the client's own blob reads verify and raise, and here the
        # verifier hashes the bytes itself and names a mismatch in its own terms
        connection, response = self._client.blob_response(self._repository, name)
        body = ResponseBody(connection, response, seconds=self._client.timeout, what=self.describe(name))
        return io.BufferedReader(body, buffer_size=1 << 20)


def _registry_blob_name(digest: object, where: str) -> str:
    return checked_digest(digest, where)


def open_remote_image(
    target: str,
    *,
    platform: str | None,
    insecure: bool,
    credentials: tuple[str, str] | None = None,
) -> ImageReader:
    """``docker://HOST[:PORT]/REPO:TAG`` or ``…@sha256:…``; ``platform`` picks the
    manifest of an index by ``oci.types``' one rule."""
    try:
        reference = parse_reference(target.removeprefix("docker://"))
    except InputError as exc:
        raise InputError(exc.message, check_id="digest.well-formed" if "digest" in exc.message else "image.readable") from exc
    client = RegistryClient(
        reference.registry,
        insecure=insecure,
        credentials=Credentials(*credentials) if credentials else None,
    )
    repository = reference.repository
    files = RegistryFiles(client, repository, target)
    fetched = client.get_manifest(repository, reference.reference)
    index_bytes = None
    index_platform = None
    manifest_ref = BlobRef("manifest", fetched.digest, reference.digest, len(fetched.content), fetched.media_type)
    if fetched.media_type in INDEX_MEDIA_TYPES:
        index_bytes = fetched.content
        manifest_ref, index_platform = select_platform_manifest(
            fetched.document(), f"{target} (index {fetched.digest})", platform, _registry_blob_name
        )
        fetched = client.get_manifest(repository, manifest_ref.name)
    return reader_from_manifest(
        "registry", target, files, fetched.content, manifest_ref, _registry_blob_name,
        index_bytes=index_bytes, index_platform=index_platform,
    )
