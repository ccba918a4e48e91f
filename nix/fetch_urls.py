"""Builder of a locked file with several URLs (./fetch-locked.nix): try each URL in order and
keep the first whose bytes have the locked sha256, as `sparkflake fetch` does. Nix's built-in
fetcher takes one URL only. Nix checks the sha256 of $out again (a fixed-output derivation).

TLS certificates are verified when the build environment names a CA bundle (SSL_CERT_FILE or
NIX_SSL_CERT_FILE); otherwise, as nixpkgs' fetchurl does without cacert, the sha256 alone
vouches for the bytes.
"""

import base64
import hashlib
import os
import pathlib
import ssl
import sys
import urllib.request

name = os.environ["name"]
expected = os.environ["expectedSha256"]
out = pathlib.Path(os.environ["out"])
ca_file = os.environ.get("SSL_CERT_FILE") or os.environ.get("NIX_SSL_CERT_FILE")
context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl._create_unverified_context()

failures = []
for url in os.environ["urls"].split():
    partial = out.with_name(out.name + ".partial")
    try:
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=60, context=context) as response, open(partial, "wb") as file:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                file.write(chunk)
    except (OSError, ValueError) as exc:
        failures.append(f"{url}: {exc}")
        partial.unlink(missing_ok=True)
        continue
    found = digest.hexdigest()
    if expected.startswith("sha256-"):  # the SRI form of the lock's sha256
        found = "sha256-" + base64.b64encode(digest.digest()).decode()
    if found != expected:
        failures.append(f"{url}: sha256 {found}, the lock says {expected}")
        partial.unlink()
        continue
    partial.rename(out)
    print(f"{name}: fetched from {url}", file=sys.stderr)
    sys.exit(0)
sys.exit(f"{name}: no URL of the lock answered with its bytes:\n  " + "\n  ".join(failures))
