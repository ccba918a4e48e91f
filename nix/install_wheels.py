"""Install wheels into the Python environment that runs this script (a venv made by
`python -m venv --without-pip $out`) with pypa/installer, the version python/uv.lock pins,
imported from its own wheel, as nixpkgs bootstraps installer:

    PYTHONPATH=<installer wheel> $out/bin/python -B install_wheels.py WHEEL...

No bytecode is written (a .pyc records its source's mtime and the interpreter's magic
number), console scripts start with this environment's interpreter, and installer checks
every file against the wheel's RECORD while it installs.
"""

from __future__ import annotations

import pathlib
import re
import sys
import sysconfig

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile

# A fetched wheel's store path is <32-character hash>-<file name>; installer reads the
# distribution and version from the file name.
STORE_NAME = re.compile(r"[0-9a-z]{32}-(.+\.whl)")


def main(wheels: list[str]) -> int:
    scheme = sysconfig.get_paths()
    destination = SchemeDictionaryDestination(
        scheme_dict={
            "purelib": scheme["purelib"],
            "platlib": scheme["platlib"],
            "headers": scheme["include"],
            "scripts": scheme["scripts"],
            "data": scheme["data"],
        },
        interpreter=sys.executable,
        script_kind="posix",
    )
    for wheel in map(pathlib.Path, wheels):
        stored = STORE_NAME.fullmatch(wheel.name)
        named = pathlib.Path.cwd() / (stored.group(1) if stored else wheel.name)
        if named != wheel:
            named.symlink_to(wheel)
        with WheelFile.open(named) as source:
            install(source=source, destination=destination, additional_metadata={"INSTALLER": b"nix\n"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
