"""Builder: a Python distribution provided by the host venv, checked to be installed there.

The stand-in's python3Packages.<name> are these records; the interpreter that builds and runs
everything is the host venv's, so the distribution itself is already on its path.
"""

import importlib.metadata
import os
import pathlib
import sys

distribution_name = os.environ["distribution"]
try:
    distribution = importlib.metadata.distribution(distribution_name)
except importlib.metadata.PackageNotFoundError:
    sys.exit(
        f"host venv {sys.prefix} has no distribution {distribution_name!r}: "
        "run ./bin/test, which installs it from python/uv.lock"
    )
support = pathlib.Path(os.environ["out"]) / "nix-support"
support.mkdir(parents=True)
(support / "host-python-distribution").write_text(
    f"{distribution.metadata['Name']} {distribution.version} {sys.prefix}\n",
    encoding="utf-8",
)
