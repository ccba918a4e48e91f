"""Builder: python3Packages.<name> from the wheel PyPI publishes for the version nixpkgs has
at the pinned revision, installed into $out/lib/pythonX.Y/site-packages by that revision's
pypa/installer (0.7.0, imported from its own wheel, as nixpkgs bootstraps it). Run by the
stand-in's python3, so a platform wheel is checked against that interpreter on import.
"""

import os
import pathlib
import subprocess
import sys

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile

out = pathlib.Path(os.environ["out"])
site_packages = out / os.environ["sitePackages"]
named = pathlib.Path(os.environ["NIX_BUILD_TOP"]) / os.environ["wheelName"]
named.symlink_to(os.environ["wheel"])
destination = SchemeDictionaryDestination(
    scheme_dict={
        "purelib": str(site_packages),
        "platlib": str(site_packages),
        "headers": str(out / "include"),
        "scripts": str(out / "bin"),
        "data": str(out),
    },
    interpreter=sys.executable,
    script_kind="posix",
)
with WheelFile.open(named) as wheel:
    install(source=wheel, destination=destination, additional_metadata={"INSTALLER": b"nix\n"})
module = os.environ.get("importCheck", "")
if module:
    subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site_packages)!r}); import {module}"], check=True)
