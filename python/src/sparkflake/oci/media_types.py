"""OCI and Docker media types, the layer media type for each compression, and the names
the specs give a grammar (tags)."""

from __future__ import annotations

import re

# A tag as the distribution spec's grammar has it ("Pulling manifests"), matched whole.
TAG_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

OCI_LAYOUT_VERSION = "1.0.0"

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
# The config of an artifact (image-spec 1.1): the two bytes ``{}``
OCI_EMPTY = "application/vnd.oci.empty.v1+json"

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_LAYER_TAR = "application/vnd.docker.image.rootfs.diff.tar"

LAYER_MEDIA_TYPES = {
    "none": OCI_LAYER_TAR,
    "gzip": OCI_LAYER_GZIP,
    "zstd": OCI_LAYER_ZSTD,
}

# What each layer media type says the blob is compressed with; the layer types an OCI and
# a Docker image manifest may list.
COMPRESSION_OF_LAYER_TYPE = {
    OCI_LAYER_TAR: "none",
    OCI_LAYER_GZIP: "gzip",
    OCI_LAYER_ZSTD: "zstd",
    DOCKER_LAYER_TAR: "none",
    DOCKER_LAYER_GZIP: "gzip",
}
OCI_LAYER_TYPES = frozenset({OCI_LAYER_TAR, OCI_LAYER_GZIP, OCI_LAYER_ZSTD})
DOCKER_LAYER_TYPES = frozenset({DOCKER_LAYER_TAR, DOCKER_LAYER_GZIP})

INDEX_MEDIA_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
MANIFEST_MEDIA_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})

REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
# The full reference (repository:tag), as Docker 25+ `docker save` writes it: containerd,
# docker and podman name an image loaded from an OCI archive by it.
IMAGE_NAME_ANNOTATION = "io.containerd.image.name"
CREATED_ANNOTATION = "org.opencontainers.image.created"
COMPRESSION_ANNOTATION = "io.sparkflake.layer.compression"
