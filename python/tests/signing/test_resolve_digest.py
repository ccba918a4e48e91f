"""The digest a signature or a verification is made for (``signing/cosign.resolve_digest``):
the registry's answer to a HEAD, or, when the registry does not say it there (a SHOULD of the
distribution spec), the hash of the manifest bytes it serves."""

from __future__ import annotations

import hashlib
import json

import pytest
from fixtures.raw_http import answer, raw_server

from sparkflake.core.errors import CheckFailed
from sparkflake.oci.media_types import OCI_MANIFEST
from sparkflake.oci.remote import RegistryClient, parse_reference
from sparkflake.signing.cosign import resolve_digest

MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


def registry(head_digest: str | None):
    def respond(method, path, headers, out):
        said = (("Docker-Content-Digest", head_digest),) if head_digest else ()
        length = (("Content-Length", str(len(MANIFEST))), ("Content-Type", OCI_MANIFEST))
        out.write(answer("200 OK", length + said, b"" if method == "HEAD" else MANIFEST))
    return raw_server(respond)


@pytest.mark.parametrize("head_digest", [DIGEST, None])
def test_the_digest_is_the_heads_or_else_the_served_bytes(head_digest):
    # before: a HEAD without Docker-Content-Digest read as "no such image"
    with registry(head_digest) as address:
        client = RegistryClient(address, insecure=True, timeout=5)
        assert resolve_digest(client, parse_reference(f"{address}/repo:tag")) == DIGEST
        other = "sha256:" + "1" * 64
        with pytest.raises(CheckFailed, match=f"(the registry answers digest|the bytes served hash to) {DIGEST}"):
            resolve_digest(client, parse_reference(f"{address}/repo@{other}"))
