"""Builder: python3.withPackages — a venv over Debian's interpreter whose path holds the host
venv's site-packages and the site-packages of each selected package built by this stand-in;
the selected packages' programs are linked into its bin/, as nixpkgs' python.buildEnv does."""

import os
import pathlib
import sys
import sysconfig
import venv

out = pathlib.Path(os.environ["out"])
site_packages = out / os.environ["sitePackages"]
venv.EnvBuilder(symlinks=True, with_pip=False).create(out)
if not site_packages.is_dir():
    sys.exit(
        f"{site_packages}: the host interpreter is not Python {os.environ['sitePackages']}"
    )
search_path = [sysconfig.get_paths()["purelib"]]
for package in os.environ.get("pythonPackages", "").split():
    package_site = pathlib.Path(package) / os.environ["sitePackages"]
    if package_site.is_dir():
        search_path.append(str(package_site))
(site_packages / "nix-python-env.pth").write_text(
    "\n".join(search_path) + "\n", encoding="utf-8"
)
for package in os.environ.get("pythonPackages", "").split():
    package_bin = pathlib.Path(package) / "bin"
    if package_bin.is_dir():
        for program in sorted(package_bin.iterdir()):
            link = out / "bin" / program.name
            if not link.exists():
                link.symlink_to(program)
