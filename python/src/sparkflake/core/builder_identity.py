"""Who built an image, besides the lock: this tool's version and the versions of the
interpreter and libraries whose code decides image bytes (the layer compressors, the wheel
installer) or check results (packaging's version rules).

``sparkflake version`` prints it; the receipt written next to the image records it as the
builder (``runDetails.builder.version``). The receipt inside the image does not: its bytes
are part of a layer, and the image digests must not depend on the builder's interpreter.
"""

from __future__ import annotations

import importlib.metadata
import platform
import zlib

import zstandard

from .. import __version__

# Distributions whose versions are recorded; python/uv.lock pins each.
LIBRARIES = ("deflate", "installer", "packaging", "zstandard")


def builder_identity() -> dict[str, str]:
    versions = {
        "sparkflake": __version__,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        # zlib compresses layers with --gzip-implementation zlib; zstd is bundled in zstandard
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
        "zstd": ".".join(map(str, zstandard.ZSTD_VERSION)),
    }
    for name in LIBRARIES:
        versions[name] = importlib.metadata.version(name)
    return versions
