"""An image in a registry, read over the OCI distribution API for the audit.

Manifests and the config come from ``sparkflake.oci.remote`` (OCI and Docker media types in
Accept, anonymous or bearer-token auth, the 4 MiB manifest limit, a digest reference
verified against the bytes served). Layer blobs are streamed raw, so the audit itself
hashes them and names a mismatch; the size comes from a HEAD before any byte is hashed.
"""

from __future__ import annotations

from typing import BinaryIO

from ..core.errors import InputError
from ..oci.remote import INDEX_TYPES, Credentials, RegistryClient, parse_reference
from .sources import (
    BlobRef,
    ImageSource,
    refuse_unreadable_mismatch,
    select_platform_manifest,
    source_from_manifest,
)


def open_registry_source(
    target: str,
    *,
    platform: str | None,
    insecure: bool,
    credentials: tuple[str, str] | None = None,
) -> ImageSource:
    text = target.removeprefix("docker://")
    try:
        reference = parse_reference(text)
    except InputError as exc:
        raise InputError(exc.message, check_id="digest.well-formed" if "digest" in exc.message else "image.readable") from exc
    client = RegistryClient(
        reference.registry,
        insecure=insecure,
        credentials=Credentials(*credentials) if credentials else None,
    )
    repository = reference.repository
    fetched = client.get_manifest(repository, reference.reference)
    index_bytes = None
    index_platform = None
    descriptor = BlobRef(role="manifest", name=fetched.digest, digest=reference.digest, size=len(fetched.content), media_type=fetched.media_type)
    if fetched.media_type in INDEX_TYPES:
        index_bytes = fetched.content
        descriptor, index_platform = select_platform_manifest(
            fetched.document(), f"{target} (index {fetched.digest})", platform, lambda digest: digest
        )
        fetched = client.get_manifest(repository, descriptor.digest or "")
    refuse_unreadable_mismatch(fetched.content, descriptor, target)

    def blob_size(blob: BlobRef) -> int | None:
        return client.blob_size(repository, blob.name)

    def open_blob(blob: BlobRef) -> BinaryIO:
        connection, response = client._request(  # the audit hashes the raw bytes itself
            "GET", f"/v2/{repository}/blobs/{blob.name}", scope=f"repository:{repository}:pull",
            what=f"blob {reference.registry}/{repository}@{blob.name}",
        )
        response.close = _closing(connection, response.close)  # type: ignore[method-assign]  # closing the body closes its connection
        return response

    def read_config(blob: BlobRef) -> bytes:
        with open_blob(blob) as handle:
            content = handle.read((4 << 20) + 1)
        if len(content) > 4 << 20:
            raise InputError(f"{target}: config {blob.digest} is larger than 4 MiB", check_id="document.size")
        return content

    return source_from_manifest(
        "registry",
        target,
        fetched.content,
        descriptor,
        blob_size,
        open_blob,
        read_config,
        locate=lambda digest: digest,
        index_bytes=index_bytes,
        index_platform=index_platform,
    )


def _closing(connection, close):
    def close_both() -> None:
        close()
        connection.close()

    return close_both
