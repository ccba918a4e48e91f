"""Builder: buildPythonApplication / buildPythonPackage with host tools.

With `pyproject = true` it builds a wheel with the project's own PEP 517 backend (from
[build-system] in pyproject.toml); with `format = "wheel"` it takes the fetched wheel as it is.
It installs the wheel with pypa/installer into $out/lib/pythonX.Y/site-packages, writes console
scripts that put that directory (and those of the built dependencies) first on sys.path
(nixpkgs' wrappers do the same with PYTHONPATH), and imports each module of
pythonImportsCheck.
"""

import io
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tomllib

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.records import RecordEntry
from installer.sources import WheelFile
from installer.utils import Scheme

build_top = pathlib.Path(os.environ["NIX_BUILD_TOP"])
out = pathlib.Path(os.environ["out"])
site_packages = out / os.environ["sitePackages"]


def built_wheel() -> pathlib.Path:
    source = build_top / "source"
    shutil.copytree(os.environ["src"], source, symlinks=True)
    for path in [source, *source.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    pyproject = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    wheel_dir = build_top / "dist"
    wheel_dir.mkdir()
    # The backend runs in its own process, as a PEP 517 frontend runs it; the fixed
    # SOURCE_DATE_EPOCH makes the wheel's zip timestamps independent of the build time.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib, sys; importlib.import_module(sys.argv[1]).build_wheel(sys.argv[2])",
            pyproject["build-system"]["build-backend"],
            str(wheel_dir),
        ],
        cwd=source,
        env={
            **os.environ,
            "SOURCE_DATE_EPOCH": "315532800",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        check=True,
    )
    (wheel_path,) = wheel_dir.glob("*.whl")
    return wheel_path


def fetched_wheel() -> pathlib.Path:
    # installer reads the distribution name and version from the file name, which the store
    # path prefixes with its hash: link it under its own name.
    src = pathlib.Path(os.environ["src"])
    wheel_path = build_top / src.name.split("-", 1)[1]
    wheel_path.symlink_to(src)
    return wheel_path


wheel_path = fetched_wheel() if os.environ["format"] == "wheel" else built_wheel()
# Console scripts see the package and its built dependencies; host-venv packages are on the
# interpreter's own path.
launcher_path = [str(site_packages)] + [
    str(pathlib.Path(dependency) / os.environ["sitePackages"])
    for dependency in os.environ.get("dependencies", "").split()
    if (pathlib.Path(dependency) / os.environ["sitePackages"]).is_dir()
]


class LauncherDestination(SchemeDictionaryDestination):
    """Console scripts that find the package in $out without any environment variable."""

    def write_script(
        self, name: str, module: str, attr: str, section: object
    ) -> RecordEntry:
        launcher = (
            f"#!{sys.executable}\n"
            "import importlib\n"
            "import sys\n"
            f"sys.path[0:0] = {launcher_path!r}\n"
            f"entry = importlib.import_module({module!r})\n"
            f"for part in {attr.split('.')!r}:\n"
            "    entry = getattr(entry, part)\n"
            "sys.exit(entry())\n"
        )
        return self.write_file(
            Scheme("scripts"), name, io.BytesIO(launcher.encode()), is_executable=True
        )


destination = LauncherDestination(
    scheme_dict={
        "purelib": str(site_packages),
        "platlib": str(site_packages),
        "headers": str(out / "include" / os.environ["pname"]),
        "scripts": str(out / "bin"),
        "data": str(out),
    },
    interpreter=sys.executable,
    script_kind="posix",
)
with WheelFile.open(wheel_path) as wheel:
    install(
        source=wheel,
        destination=destination,
        additional_metadata={"INSTALLER": b"nix\n"},
    )

for module in os.environ.get("pythonImportsCheck", "").split():
    subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(launcher_path)},
        check=True,
    )
